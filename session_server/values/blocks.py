"""Memory blocks as values, their bounds and their rendering (pure).

A memory block is a labelled text the agent keeps in its prompt: a description, a token
limit (``max_tokens``) and a scope, the agent (every session sees it) or one session.
Every write is a new revision; the current value is the latest revision. Blocks are
rendered into the system instructions of ``context.build`` by ``render_blocks``: agent
blocks then session blocks, each group by label, so the text is byte-identical from one
build to the next while no block changes (providers' prompt caches keep hitting).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final, Literal

import msgspec

from .errors import InvalidParamsError

__all__ = [
    "AGENT_SCOPE",
    "AUTHORS",
    "BLOCKS_FILE",
    "BLOCKS_OPEN",
    "DEFAULT_BLOCK_TOKENS",
    "LABEL_PATTERN",
    "MAX_BLOCKS_PER_SCOPE",
    "MAX_BLOCK_TOKENS",
    "MAX_DESCRIPTION_CHARS",
    "MAX_HISTORY_PAGE",
    "MAX_IMPORTED_REVISIONS",
    "MAX_REASON_CHARS",
    "MAX_SCOPE_TOKENS",
    "MAX_VALUE_CHARS",
    "Author",
    "BlockRevision",
    "BlockSet",
    "block_at_seq",
    "check_description",
    "check_label",
    "check_max_tokens",
    "check_reason",
    "check_value_chars",
    "check_value_tokens",
    "imported_revisions",
    "render_blocks",
    "usage_header",
    "without_blocks",
]

Author = Literal["client", "model", "operator"]
AUTHORS: Final[tuple[str, ...]] = ("client", "model", "operator")

# The scope column of an agent block (a session block's is its session id, never empty).
AGENT_SCOPE: Final = ""

LABEL_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
_LABEL = re.compile(LABEL_PATTERN)
MAX_DESCRIPTION_CHARS: Final = 1024
MAX_REASON_CHARS: Final = 1024
# A block's limit when its first revision names none, and the largest limit allowed.
DEFAULT_BLOCK_TOKENS: Final = 2000
MAX_BLOCK_TOKENS: Final = 16_384
# The longest value taken to the tokenizer at all (characters): far above what the
# largest limit holds in any text, so only a value that could never fit is refused here.
MAX_VALUE_CHARS: Final = 256 * 1024
# Blocks per scope (the agent's, each session's) and their tokens together: what one
# build renders (and counts, once per change) is bounded.
MAX_BLOCKS_PER_SCOPE: Final = 64
MAX_SCOPE_TOKENS: Final = 32_768
# The most revisions one ``memory.blocks.history`` answer holds.
MAX_HISTORY_PAGE: Final = 500


class BlockRevision(msgspec.Struct, frozen=True, kw_only=True):
    """One revision of a block. ``session_id`` ``None``: an agent block.

    ``session_seq`` is the session's last seq when the revision was written (0 for an
    agent block), so the session's blocks as they stood at any event seq can be computed
    (``block_at_seq``); ``tokens`` is the value's token count (the real tokenizer).
    """

    label: str
    session_id: str | None
    revision: int
    value: str
    description: str
    max_tokens: int
    tokens: int
    author: Author
    reason: str | None = None
    tool_call_id: str | None = None
    session_seq: int = 0
    created_at: int = 0  # ms since the epoch

    def to_dict(self) -> dict[str, object]:
        return {f: getattr(self, f) for f in self.__struct_fields__}


class BlockSet(msgspec.Struct, frozen=True):
    """The current blocks one session sees: the agent's and its own, each by label."""

    agent: tuple[BlockRevision, ...] = ()
    session: tuple[BlockRevision, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.agent and not self.session

    def find(self, label: str) -> BlockRevision | None:
        """The block a model's tool edits under ``label``: the session's, else the agent's."""
        for block in (*self.session, *self.agent):
            if block.label == label:
                return block
        return None

    def labels(self) -> list[str]:
        return sorted({b.label for b in (*self.agent, *self.session)})


def check_label(label: object, field: str = "label") -> str:
    if not isinstance(label, str) or not _LABEL.match(label):
        raise InvalidParamsError(
            f"{field}: must be 1-64 characters of letters, digits, '_', '.' or '-', "
            "starting with a letter or digit",
            data={"field": field},
        )
    return label


def check_description(description: str | None) -> str | None:
    if description is not None and len(description) > MAX_DESCRIPTION_CHARS:
        raise InvalidParamsError(
            f"description: at most {MAX_DESCRIPTION_CHARS} characters",
            data={"field": "description"},
        )
    return description


def check_reason(reason: str | None) -> str | None:
    if reason is not None and len(reason) > MAX_REASON_CHARS:
        raise InvalidParamsError(
            f"reason: at most {MAX_REASON_CHARS} characters", data={"field": "reason"}
        )
    return reason


def check_max_tokens(max_tokens: int | None) -> int | None:
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not 1 <= max_tokens <= MAX_BLOCK_TOKENS
    ):
        raise InvalidParamsError(
            f"max_tokens: must be between 1 and {MAX_BLOCK_TOKENS}", data={"field": "max_tokens"}
        )
    return max_tokens


def check_value_chars(value: str, field: str = "value") -> None:
    if len(value) > MAX_VALUE_CHARS:
        raise InvalidParamsError(
            f"{field}: {len(value)} characters, more than a block may hold ({MAX_VALUE_CHARS})",
            data={"field": field},
        )


def check_value_tokens(tokens: int, max_tokens: int, field: str = "value") -> None:
    """Refuse a value past its block's limit, naming ``field`` and both figures."""
    if tokens > max_tokens:
        raise InvalidParamsError(
            f"{field}: {tokens} tokens, past the block's max_tokens of {max_tokens}",
            data={"field": field, "tokens": tokens, "max_tokens": max_tokens},
        )


def usage_header(block: BlockRevision) -> str:
    """``[label · 45% of 1,100 tokens]``: the block's fill, rounded to a whole percent."""
    pct = round(100 * block.tokens / block.max_tokens) if block.max_tokens else 0
    return f"[{block.label} · {pct}% of {block.max_tokens:,} tokens]"


BLOCKS_OPEN: Final = "<memory_blocks>"

_INTRO: Final = (
    "Memory blocks: notes kept across turns. Keep them current with the memory_block_* "
    "tools; each header shows how full the block is."
)


def _section(title: str, blocks: Iterable[BlockRevision]) -> list[str]:
    out: list[str] = []
    for block in sorted(blocks, key=lambda b: b.label):
        out.append(usage_header(block))
        if block.description:
            out.append(f"({block.description})")
        out.append(block.value)
        out.append("")
    return [title, "", *out] if out else []


def render_blocks(blocks: BlockSet, pin: Sequence[str] | None = None) -> str:
    """The system instruction holding ``blocks`` (``""`` when none is shown).

    Agent blocks first, then the session's, each group by label. ``pin`` (a strategy's
    ``blocks``) keeps only those labels; ``None`` shows every block. Depends only on the
    blocks' labels, descriptions, values and limits: the same blocks give the same text.
    """
    keep = None if pin is None else frozenset(pin)
    agent = [b for b in blocks.agent if keep is None or b.label in keep]
    session = [b for b in blocks.session if keep is None or b.label in keep]
    if not agent and not session:
        return ""
    lines = [
        BLOCKS_OPEN,
        _INTRO,
        "",
        *_section("Agent blocks (shared by all sessions):", agent),
        *_section("Session blocks:", session),
    ]
    while lines and lines[-1] == "":
        lines.pop()
    lines.append("</memory_blocks>")
    return "\n".join(lines)


def without_blocks(instructions: list[str]) -> list[str]:
    """``instructions`` without the rendered blocks (``render_blocks``' text)."""
    if not any(text.startswith(BLOCKS_OPEN + "\n") for text in instructions):
        return instructions
    return [text for text in instructions if not text.startswith(BLOCKS_OPEN + "\n")]


def block_at_seq(revisions: Iterable[BlockRevision], seq: int) -> BlockRevision | None:
    """The revision of one session block that stood at event ``seq``: the latest written
    while the session's last seq was at most ``seq`` (fork and rewind use this)."""
    best: BlockRevision | None = None
    for rev in revisions:
        if rev.session_seq <= seq and (best is None or rev.revision > best.revision):
            best = rev
    return best


# The most revisions a ``blocks.jsonl`` may carry into an import.
MAX_IMPORTED_REVISIONS: Final = 100_000
BLOCKS_FILE: Final = "blocks.jsonl"


def imported_revisions(items: Sequence[object], session_id: str | None) -> list[BlockRevision]:
    """Revisions read from a ``blocks.jsonl`` (one object per line), checked, moved to
    ``session_id``'s scope; ``InvalidParamsError`` naming the line of the first problem."""
    if len(items) > MAX_IMPORTED_REVISIONS:
        raise InvalidParamsError(
            f"{BLOCKS_FILE}: more than {MAX_IMPORTED_REVISIONS} revisions",
            data={"field": BLOCKS_FILE},
        )
    out: list[BlockRevision] = []
    seen: set[tuple[str, int]] = set()
    for n, item in enumerate(items, 1):
        try:
            rev = msgspec.convert(item, BlockRevision)
            check_label(rev.label)
            check_max_tokens(rev.max_tokens)
            check_description(rev.description)
            check_reason(rev.reason)
            if rev.revision < 1 or rev.tokens < 0 or (rev.label, rev.revision) in seen:
                raise InvalidParamsError("revision: must be a new positive number")
        except (msgspec.ValidationError, InvalidParamsError) as exc:
            raise InvalidParamsError(
                f"{BLOCKS_FILE}: line {n}: {exc}", data={"field": BLOCKS_FILE, "line": n}
            ) from None
        seen.add((rev.label, rev.revision))
        out.append(msgspec.structs.replace(rev, session_id=session_id))
    if len({r.label for r in out}) > MAX_BLOCKS_PER_SCOPE:
        raise InvalidParamsError(
            f"{BLOCKS_FILE}: more than {MAX_BLOCKS_PER_SCOPE} blocks", data={"field": BLOCKS_FILE}
        )
    return out
