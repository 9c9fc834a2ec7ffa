"""Session memory blocks across forks and rewinds (pure).

A session block's revisions each record the session's last seq when written
(``BlockRevision.session_seq``). A rewind leaves the revisions written during the tail it
abandons in the block's history (nothing is rewritten); those revisions belong to a seq
range the session no longer has (``(to_seq, rewind_seq)``, open at both ends), so the
*lineage* of a session's blocks is its revisions outside every such range. The blocks
as they stood at seq ``s`` are then, per label, the latest lineage revision written at or
before ``s`` (``values.blocks.block_at_seq``).

- A fork at ``s`` gets the source's lineage revisions up to ``s`` (numbers, authors,
  reasons, tool calls, seqs and times kept), so its blocks at the fork point are the
  source's then, and a later rewind of the fork restores correctly too.
- A rewind to ``t`` gives each block whose current value differs from its value at ``t``
  a new revision equal to it (reason ``rewind to seq t``), and drops a block that did
  not exist at ``t``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from .blocks import BlockRevision, block_at_seq

__all__ = [
    "RewindBlocks",
    "blocks_at_seq",
    "fork_copies",
    "lineage",
    "rewind_blocks",
    "rewind_reason",
]


def rewind_reason(to_seq: int) -> str:
    """The reason of the revisions a rewind writes."""
    return f"rewind to seq {to_seq}"


def lineage(
    revisions: Iterable[BlockRevision], abandoned: Sequence[tuple[int, int]]
) -> list[BlockRevision]:
    """``revisions`` without those written inside an abandoned range ``(to_seq,
    rewind_seq)`` of one of the session's rewinds."""
    return [r for r in revisions if not any(low < r.session_seq < high for low, high in abandoned)]


def blocks_at_seq(
    revisions: Iterable[BlockRevision], seq: int, abandoned: Sequence[tuple[int, int]]
) -> dict[str, BlockRevision]:
    """Per label, the revision of a session's block that stood at ``seq`` (labels
    absent then are left out)."""
    by_label: dict[str, list[BlockRevision]] = {}
    for r in lineage(revisions, abandoned):
        by_label.setdefault(r.label, []).append(r)
    out: dict[str, BlockRevision] = {}
    for label in sorted(by_label):
        rev = block_at_seq(by_label[label], seq)
        if rev is not None:
            out[label] = rev
    return out


def fork_copies(
    revisions: Iterable[BlockRevision],
    seq: int,
    abandoned: Sequence[tuple[int, int]],
    new_session_id: str,
) -> list[BlockRevision]:
    """The revisions a fork at ``seq`` gets: the lineage up to ``seq``, moved to
    ``new_session_id``'s scope, by label then revision."""
    kept = [r for r in lineage(revisions, abandoned) if r.session_seq <= seq]
    kept.sort(key=lambda r: (r.label, r.revision))
    return [msgspec.structs.replace(r, session_id=new_session_id) for r in kept]


class RewindBlocks(msgspec.Struct, frozen=True):
    """What a rewind does to a session's blocks: new revisions to write, labels to
    erase (blocks that did not exist at the rewind's seq)."""

    restore: tuple[BlockRevision, ...] = ()
    drop: tuple[str, ...] = ()


def _same(a: BlockRevision, b: BlockRevision) -> bool:
    return (a.value, a.description, a.max_tokens) == (b.value, b.description, b.max_tokens)


def rewind_blocks(
    revisions: Iterable[BlockRevision],
    to_seq: int,
    abandoned: Sequence[tuple[int, int]],
    *,
    rewind_seq: int,
    now_ms: int,
) -> RewindBlocks:
    """The plan of a rewind of one session to ``to_seq``. ``revisions``: every revision
    of the session's blocks; ``abandoned``: the ranges of its earlier rewinds. A restored
    block's new revision follows its latest one, equal to its value at ``to_seq``
    (description and limit too), written by ``operator`` at ``rewind_seq``."""
    revs = list(revisions)
    head: dict[str, BlockRevision] = {}
    for r in revs:
        if r.label not in head or r.revision > head[r.label].revision:
            head[r.label] = r
    then = blocks_at_seq(revs, to_seq, abandoned)
    restore: list[BlockRevision] = []
    drop: list[str] = []
    for label in sorted(head):
        current, target = head[label], then.get(label)
        if target is None:
            drop.append(label)
        elif not _same(current, target):
            restore.append(
                msgspec.structs.replace(
                    target,
                    session_id=current.session_id,
                    revision=current.revision + 1,
                    author="operator",
                    reason=rewind_reason(to_seq),
                    tool_call_id=None,
                    session_seq=rewind_seq,
                    created_at=now_ms,
                )
            )
    return RewindBlocks(tuple(restore), tuple(drop))
