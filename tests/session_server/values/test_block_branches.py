"""The pure rules of session blocks across forks and rewinds (``values.block_branches``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from session_server.values.block_branches import (
    blocks_at_seq,
    fork_copies,
    lineage,
    rewind_blocks,
)
from session_server.values.blocks import BlockRevision


def rev(label: str, revision: int, value: str, seq: int) -> BlockRevision:
    return BlockRevision(
        label=label,
        session_id="s",
        revision=revision,
        value=value,
        description="",
        max_tokens=100,
        tokens=1,
        author="model",
        reason="why",
        tool_call_id="call-1",
        session_seq=seq,
        created_at=seq,
    )


def test_revisions_of_an_abandoned_range_are_not_the_lineage() -> None:
    revs = [rev("a", 1, "v1", 2), rev("a", 2, "gone", 5), rev("a", 3, "v1", 9)]
    # A rewind to 4 took seq 9: seqs 5-8 are no longer the session's.
    assert [r.revision for r in lineage(revs, [(4, 9)])] == [1, 3]
    assert blocks_at_seq(revs, 6, [(4, 9)])["a"].value == "v1"
    assert blocks_at_seq(revs, 6, [])["a"].value == "gone"
    assert blocks_at_seq(revs, 1, []) == {}


def test_a_fork_copies_the_lineage_up_to_its_seq_unchanged_but_for_its_scope() -> None:
    revs = [rev("b", 1, "x", 3), rev("a", 1, "y", 2), rev("a", 2, "z", 7)]
    copies = fork_copies(revs, 5, [], "f")
    assert [(c.label, c.revision, c.session_id) for c in copies] == [("a", 1, "f"), ("b", 1, "f")]
    assert (copies[0].author, copies[0].reason, copies[0].tool_call_id) == (
        "model",
        "why",
        "call-1",
    )


def test_a_rewind_restores_changed_blocks_and_drops_new_ones() -> None:
    revs = [
        rev("a", 1, "v1", 2),
        rev("a", 2, "v2", 6),
        rev("b", 1, "new", 6),
        rev("c", 1, "same", 1),
    ]
    plan = rewind_blocks(revs, 4, [], rewind_seq=8, now_ms=99)
    assert plan.drop == ("b",)
    (restored,) = plan.restore
    assert (restored.label, restored.revision, restored.value) == ("a", 3, "v1")
    assert (restored.author, restored.reason, restored.tool_call_id) == (
        "operator",
        "rewind to seq 4",
        None,
    )
    assert (restored.session_seq, restored.created_at) == (8, 99)
    # A block set back by hand to its old value needs no new revision.
    back = [*revs[:2], rev("a", 3, "v1", 7)]
    assert rewind_blocks(back, 4, [], rewind_seq=8, now_ms=0).restore == ()


# Histories of a few blocks: per write, the label, the value and how many events came
# before it (seqs are non-decreasing, as the session's last seq is).
writes = st.lists(
    st.tuples(st.sampled_from("abc"), st.sampled_from(["x", "y", "z"]), st.integers(0, 3)),
    max_size=20,
)


def history(items: list[tuple[str, str, int]]) -> list[BlockRevision]:
    seq, numbers, out = 0, dict[str, int](), []
    for label, value, step in items:
        seq += step
        numbers[label] = numbers.get(label, 0) + 1
        out.append(rev(label, numbers[label], value, seq))
    return out


@given(writes, st.integers(0, 70))
def test_after_a_rewind_the_blocks_are_those_at_its_seq(
    items: list[tuple[str, str, int]], to_seq: int
) -> None:
    revs = history(items)
    last = max((r.session_seq for r in revs), default=0)
    to_seq = min(to_seq, last)
    rewind_seq = last + 1
    plan = rewind_blocks(revs, to_seq, [], rewind_seq=rewind_seq, now_ms=0)
    after = [r for r in revs if r.label not in plan.drop] + list(plan.restore)
    then = blocks_at_seq(revs, to_seq, [])
    now = blocks_at_seq(after, rewind_seq, [(to_seq, rewind_seq)])
    assert {k: v.value for k, v in now.items()} == {k: v.value for k, v in then.items()}
    # Nothing is rewritten: restored revisions follow the latest of their block.
    for r in plan.restore:
        assert r.revision == max(x.revision for x in revs if x.label == r.label) + 1
    # A fork at any seq then sees what the session had at that seq.
    for seq in range(rewind_seq + 1):
        fork = blocks_at_seq(fork_copies(after, seq, [(to_seq, rewind_seq)], "f"), seq, [])
        want = blocks_at_seq(after, seq, [(to_seq, rewind_seq)])
        assert {k: v.value for k, v in fork.items()} == {k: v.value for k, v in want.items()}
