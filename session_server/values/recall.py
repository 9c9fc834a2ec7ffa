"""Recall: what the full-text index holds of an event, and how a typed query becomes an
FTS5 expression (pure).

The index (FTS5 shards ``events_fts_<n>``, ``values.recall_shards``) is kept by SQLite
triggers on ``events``, which queue every written event; the store indexes the queue
with ``indexed_text`` before each write transaction commits (``storage.recall_pending``), so every path that writes an
event indexes it, and every path that deletes one erases its index row, in the same
transaction.

Text is indexed by the ``unicode61`` tokenizer with ``remove_diacritics 2`` (``cafe``
finds ``Café``) and with symbols (``So``: emoji) as token characters. Scripts written
without spaces (Chinese, Japanese, Korean syllables) and emoji are indexed one character
per token (``segment``), so any run of them is found by the phrase of its characters;
queries are segmented the same way.
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec

from .records import CompactionRecord

__all__ = [
    "INDEXED_ACTIONS",
    "MAX_INDEXED_CHARS",
    "MAX_QUERY_CHARS",
    "MAX_QUERY_TERMS",
    "SNIPPET_CLOSE",
    "SNIPPET_OPEN",
    "clip",
    "event_in_context",
    "fts_query",
    "indexed_text",
    "segment",
    "unsegment",
]

MAX_INDEXED_CHARS: Final = 32_768
"""Characters of one event the index holds (the start of a larger tool result)."""
MAX_QUERY_CHARS: Final = 1_000
MAX_QUERY_TERMS: Final = 32
INDEXED_ACTIONS: Final = frozenset(
    {"user_message", "agent_message", "tool_call_request", "tool_result", "system_instruction"}
)
SNIPPET_OPEN: Final = "\u00ab"  # «
SNIPPET_CLOSE: Final = "\u00bb"  # »

# Characters indexed one per token: CJK radicals to Yi, Hangul syllables, CJK
# compatibility, the supplementary ideographs, and the pictographic blocks (emoji).
_SOLO: Final = (
    "\u2600-\u27bf\u2e80-\ua4cf\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f"
    "\U0001f000-\U0001faff\U00020000-\U0003134f"
)
_SOLO_RUN = re.compile(f"[{_SOLO}]")
_SPACED = re.compile(f"(?<=[{_SOLO}]) (?=[{_SOLO}])")
_PHRASE = re.compile(r'"([^"]*)"')
# What unicode61 (categories L* N* Co So) keeps as token characters, roughly: a term
# without any of them is no term (FTS5 would match nothing, or refuse it).
_WORDY = re.compile(rf"[\w{_SOLO}]", re.UNICODE)

_decode_meta = msgspec.json.Decoder()


def segment(text: str) -> str:
    """``text`` with each CJK character and emoji set apart by spaces (one token each)."""
    if text.isascii():  # most text: nothing to set apart, no regex pass
        return text
    return _SOLO_RUN.sub(r" \g<0> ", text)


def unsegment(text: str) -> str:
    """Undo ``segment`` in a snippet: the spaces between two such characters go (the
    highlight markers stay where they are)."""
    return _SPACED.sub("", re.sub(r"  +", " ", text))


def _parts(action: str, content: str | None, meta: Any) -> list[str]:
    parts = [content or ""]
    if not isinstance(meta, dict):
        return parts
    reasoning = meta.get("reasoning")
    if isinstance(reasoning, str):
        parts.append(reasoning)
    if action == "tool_call_request":
        for call in meta.get("toolCalls") or ():
            if isinstance(call, dict):
                parts.append(str(call.get("name") or ""))
                args = call.get("arguments")
                if isinstance(args, str):
                    parts.append(args)
                elif args is not None:
                    parts.append(msgspec.json.encode(args).decode("utf-8", "replace"))
    elif action == "tool_result":
        name = meta.get("toolName")
        if isinstance(name, str):
            parts.append(name)
    return parts


def indexed_text(action: Any, content: Any, metadata: Any) -> str | None:
    """What the index holds of an event row (``None``: nothing, a compaction record): its
    text, reasoning, tool names and arguments, at most ``MAX_INDEXED_CHARS``, segmented.

    Called inside the transaction that writes the row, so it never raises: a
    row it cannot read is indexed by its content alone.
    """
    if not isinstance(action, str) or action not in INDEXED_ACTIONS:
        return None
    text_content = content if isinstance(content, str) else None
    meta: Any = None
    if isinstance(metadata, str) and metadata:
        try:
            meta = _decode_meta.decode(metadata)
        except (msgspec.DecodeError, ValueError):
            meta = None
    try:
        parts = _parts(action, text_content, meta)
    except (TypeError, ValueError, msgspec.EncodeError):
        parts = [text_content or ""]
    text = "\n".join(p for p in parts if p)
    return segment(text[:MAX_INDEXED_CHARS])


def _quoted(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def fts_query(text: str) -> str | None:
    """A safe FTS5 expression for what a person or a model typed (``None``: nothing to
    search for). ``"quoted phrases"`` stay phrases, every other word is a plain term
    (FTS5 operators such as ``OR``, ``NOT``, ``NEAR``, ``*`` or ``col:`` are words like any
    other); all must match. At most ``MAX_QUERY_CHARS`` characters and
    ``MAX_QUERY_TERMS`` terms are used. Never produces an expression FTS5 refuses."""
    # NUL ends an FTS5 string early (``unterminated string``): no term holds one.
    text = text[:MAX_QUERY_CHARS].replace("\x00", " ")
    terms: list[str] = []
    rest: list[str] = []
    last = 0
    for match in _PHRASE.finditer(text):
        rest.append(text[last : match.start()])
        terms.append(match.group(1))
        last = match.end()
    rest.append(text[last:])
    # An unmatched quote is just a character of the words around it.
    words = " ".join(rest).replace('"', " ").split()
    out: list[str] = []
    for term in [*terms, *words]:
        seg = " ".join(segment(term).split())
        if _WORDY.search(seg) and len(out) < MAX_QUERY_TERMS:
            out.append(_quoted(seg))
    return " ".join(out) if out else None


def event_in_context(
    action: str, seq: int, record: CompactionRecord | None, *, tool_name: str | None = None
) -> bool:
    """Whether the event at ``seq`` still reaches the prompt as it was, given its
    session's latest compaction record: false when a summary covers it (before the
    record's ``from_seq``), or when a placeholder compaction replaced its tool output
    (a ``tool_result`` before ``boundary_seq``; with ``compact_clear_tool_inputs``, a
    ``tool_call_request`` too), unless the record's params exclude or do not include its
    tool."""
    if record is None:
        return True
    if record.from_seq is not None and seq < record.from_seq:
        return False
    data = record.data
    if record.strategy != "compact":
        return True
    boundary = data.get("boundary_seq")
    if not isinstance(boundary, int) or seq >= boundary:
        return True
    params = data.get("params") if isinstance(data.get("params"), dict) else {}
    assert isinstance(params, dict)
    if action == "tool_call_request":
        if not params.get("compact_clear_tool_inputs"):
            return True
    elif action != "tool_result":
        return True
    include = params.get("compact_include_tools")
    exclude = params.get("compact_exclude_tools")
    if tool_name is not None:
        if isinstance(include, list) and include:
            return tool_name not in include
        if isinstance(exclude, list) and tool_name in exclude:
            return True
    return False


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    note = f"…[{len(text) - limit} more chars]"
    return text[: max(0, limit - len(note))] + note
