"""Memory view transformers and snapshot index paging (pure; snake_case output).

Output shapes (JSON-ready dicts):

- memory view: ``{agent_id, session_id, working_context, episodic, semantic,
  conversation, raw_traces}``; a part not asked for is ``None``.
- working context message: ``{role, content, reasoning, tool_payload, ts}``.
- raw trace event: ``{id, trace_type, content, tool_name, tool_call_id, tool_args,
  tool_result, tool_error, media, turn_id, seq, ts}``.
- conversation entry: ``{kind, role, content, tool_name, tool_call_id, tool_args,
  tool_result, tool_error, media, turn_id, ts}`` with ``kind`` one of ``message`` (user
  and assistant traces), ``tool_call`` (a call, with its result when collapsed),
  ``tool_call_pending`` (a call whose result never came), ``tool_result_orphan`` (a
  result without a call), or ``tool_result`` (a result, only when collapsing is off).
- snapshot page: ``{entries, total, page, page_size, total_pages}``.

Raw traces are merged from the archive and the active file, sorted by ``(ts, turn_id,
seq)`` (stable, so ties keep file order, archive first) and limits keep the newest
entries, applied after the merge. A limit of ``None`` means no limit.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .traces import parse_turn_id

__all__ = [
    "MemoryViewOptions",
    "SnapshotSummary",
    "build_conversation_view",
    "build_memory_view",
    "format_memory_view",
    "group_by_agent",
    "merge_raw_traces",
    "page_snapshots",
    "tail_lines_needed",
    "to_memory_message",
    "to_trace_event",
    "trace_sort_key",
    "window_shows_tail",
]


@dataclass(frozen=True, slots=True)
class MemoryViewOptions:
    """Which parts of the memory view to build, and how many entries to keep."""

    include_working_context: bool = True
    include_episodic: bool = True
    include_semantic: bool = True
    include_conversation: bool = True
    include_raw_traces: bool = True
    include_archive: bool = True
    raw_trace_limit: int | None = None
    conversation_limit: int | None = None
    collapse_tools: bool = True


def _tail(items: list[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    if limit is None:
        return items
    return items[-limit:] if limit > 0 else []


def _number(value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return 0.0


def trace_sort_key(line: Mapping[str, Any]) -> tuple[float, int, str, int]:
    """``(ts, turn number, turn_id, seq)`` with missing or mistyped values read as 0 /
    ``""``. The number of a ``turn_0001``-style id orders turns (``turn_10000`` after
    ``turn_9999``); other ids sort before those, by text."""
    turn_id = line.get("turn_id")
    turn = turn_id if isinstance(turn_id, str) else ""
    number = parse_turn_id(turn)
    seq = line.get("seq")
    return (
        _number(line.get("ts")),
        -1 if number is None else number,
        turn,
        seq if isinstance(seq, int) and not isinstance(seq, bool) else 0,
    )


def merge_raw_traces(
    active: Iterable[dict[str, Any]],
    archive: Iterable[dict[str, Any]] = (),
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Archive + active lines sorted by ``trace_sort_key``; the newest ``limit`` kept."""
    merged = sorted([*archive, *active], key=trace_sort_key)
    return _tail(merged, limit)


def _ts(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _dict(value: object) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def to_trace_event(line: Mapping[str, Any]) -> dict[str, Any]:
    """One raw-trace line in the view's trace shape."""
    seq = line.get("seq")
    return {
        "id": line.get("id"),
        "trace_type": _str(line.get("trace_type")) or "",
        "content": _str(line.get("content")),
        "tool_name": _str(line.get("tool_name")),
        "tool_call_id": line.get("tool_call_id"),
        "tool_args": _dict(line.get("tool_args")),
        "tool_result": line.get("tool_result"),
        "tool_error": _str(line.get("tool_error")),
        "media": _dict(line.get("media")),
        "turn_id": _str(line.get("turn_id")) or "",
        "seq": seq if isinstance(seq, int) and not isinstance(seq, bool) else 0,
        "ts": _ts(line.get("ts")) or 0.0,
    }


def to_memory_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """One snapshot message in the view's working-context shape."""
    return {
        "role": _str(message.get("role")) or "",
        "content": _str(message.get("content")),
        "reasoning": _str(message.get("reasoning_content")),
        "tool_payload": _dict(message.get("tool_payload")),
        "ts": _ts(message.get("ts")),
    }


def _entry(kind: str, trace: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "kind": kind,
        "role": None,
        "content": None,
        "tool_name": _str(trace.get("tool_name")),
        "tool_call_id": trace.get("tool_call_id"),
        "tool_args": None,
        "tool_result": None,
        "tool_error": None,
        "media": None,
        "turn_id": _str(trace.get("turn_id")),
        "ts": _ts(trace.get("ts")),
    }
    entry.update(fields)
    return entry


def build_conversation_view(
    raw_traces: Sequence[Mapping[str, Any]], collapse_tools: bool = True
) -> list[dict[str, Any]]:
    """Conversation entries for raw traces in display order (see the module doc).

    With ``collapse_tools``, a call and its result (matched by ``tool_call_id``) form one
    ``tool_call`` entry at the call's place; a result whose call is absent, or already
    answered, is a ``tool_result_orphan``; a call never answered is ``tool_call_pending``.
    Lines of an unknown trace type are left out.
    """
    out: list[dict[str, Any]] = []
    open_calls: dict[Any, dict[str, Any]] = {}
    for trace in raw_traces:
        trace_type = trace.get("trace_type")
        if trace_type in ("user", "assistant"):
            out.append(
                _entry(
                    "message",
                    trace,
                    role=trace_type,
                    content=_str(trace.get("content")),
                    media=_dict(trace.get("media")),
                    tool_name=None,
                    tool_call_id=None,
                )
            )
        elif trace_type == "tool_call":
            entry = _entry("tool_call", trace, tool_args=_dict(trace.get("tool_args")))
            out.append(entry)
            call_id = trace.get("tool_call_id")
            if collapse_tools and isinstance(call_id, str | int):
                open_calls[call_id] = entry
        elif trace_type == "tool_result":
            result = trace.get("tool_result")
            error = _str(trace.get("tool_error"))
            call_id = trace.get("tool_call_id")
            if not collapse_tools:
                out.append(_entry("tool_result", trace, tool_result=result, tool_error=error))
                continue
            call = open_calls.pop(call_id, None) if isinstance(call_id, str | int) else None
            if call is None:
                out.append(
                    _entry(
                        "tool_result_orphan",
                        trace,
                        tool_args=_dict(trace.get("tool_args")),
                        tool_result=result,
                        tool_error=error,
                    )
                )
                continue
            call["tool_result"] = result
            call["tool_error"] = error
            if call["tool_name"] is None:
                call["tool_name"] = _str(trace.get("tool_name"))
    for entry in open_calls.values():
        entry["kind"] = "tool_call_pending"
    return out


def build_memory_view(
    agent_id: str,
    *,
    snapshot: Mapping[str, Any] | None = None,
    episodic: Sequence[dict[str, Any]] = (),
    semantic: Sequence[dict[str, Any]] = (),
    raw_active: Sequence[dict[str, Any]] = (),
    raw_archive: Sequence[dict[str, Any]] = (),
    options: MemoryViewOptions | None = None,
    session_id: str | None = None,
) -> dict[str, Any]:
    """The memory view of one agent folder's parsed contents."""
    opts = options or MemoryViewOptions()
    view: dict[str, Any] = {
        "agent_id": agent_id,
        "session_id": session_id,
        "working_context": None,
        "episodic": None,
        "semantic": None,
        "conversation": None,
        "raw_traces": None,
    }
    if opts.include_working_context and snapshot is not None:
        messages = snapshot.get("messages")
        if isinstance(messages, list):
            view["working_context"] = [
                to_memory_message(m) for m in messages if isinstance(m, dict)
            ]
    if opts.include_episodic:
        view["episodic"] = list(episodic)
    if opts.include_semantic:
        view["semantic"] = list(semantic)
    if opts.include_conversation or opts.include_raw_traces:
        merged = merge_raw_traces(raw_active, raw_archive if opts.include_archive else ())
        if opts.include_raw_traces:
            view["raw_traces"] = [to_trace_event(t) for t in _tail(merged, opts.raw_trace_limit)]
        if opts.include_conversation:
            conversation = build_conversation_view(merged, opts.collapse_tools)
            view["conversation"] = _tail(conversation, opts.conversation_limit)
    return view


def tail_lines_needed(options: MemoryViewOptions) -> int | None:
    """How many of the newest trace lines a view needs at least; ``None`` when it needs
    every line (a trace part asked for without a limit)."""
    needs: list[int] = []
    if options.include_raw_traces:
        if options.raw_trace_limit is None:
            return None
        needs.append(options.raw_trace_limit)
    if options.include_conversation:
        if options.conversation_limit is None:
            return None
        needs.append(options.conversation_limit)
    return max(needs, default=0)


def window_shows_tail(window: Sequence[Mapping[str, Any]], options: MemoryViewOptions) -> bool:
    """True when ``window``, the newest trace lines in file order (older lines not read),
    yields the same limited view as the whole history.

    The server writes trace lines in seq order with its own timestamps, so the newest
    lines in the files are the newest by ``trace_sort_key``; a window not in that order
    is never trusted (read more). The raw traces need ``raw_trace_limit`` lines. The
    conversation needs ``conversation_limit`` entries, none of them an orphan result:
    with collapsing, a result whose call lies before the window looks like an orphan
    inside it, so only a window whose shown entries have no orphan is complete.
    """
    keys = [trace_sort_key(t) for t in window]
    if any(a > b for a, b in itertools.pairwise(keys)):
        return False
    if options.include_raw_traces and len(window) < (options.raw_trace_limit or 0):
        return False
    if options.include_conversation:
        limit = options.conversation_limit or 0
        shown = build_conversation_view(window, options.collapse_tools)[-limit:] if limit else []
        if len(shown) < limit or any(e["kind"] == "tool_result_orphan" for e in shown):
            return False
    return True


@dataclass(frozen=True, slots=True)
class SnapshotSummary:
    """Which memory files one agent (or one of its sessions) has, and when they changed."""

    agent_id: str
    session_id: str | None
    last_updated: float | None
    has_working_context: bool = False
    has_episodic: bool = False
    has_semantic: bool = False
    has_raw_traces: bool = False
    has_raw_archive: bool = False
    # Set on per-agent summaries (``group_by_agent``): how many folders were merged.
    session_count: int | None = None

    def to_dict(self) -> dict[str, Any]:
        updated = (
            None
            if self.last_updated is None
            else datetime.fromtimestamp(self.last_updated, UTC).isoformat()
        )
        out: dict[str, Any] = {
            "agent_id": self.agent_id,
            "session_id": self.session_id,
            "last_updated_at": updated,
            "has_working_context": self.has_working_context,
            "has_episodic": self.has_episodic,
            "has_semantic": self.has_semantic,
            "has_raw_traces": self.has_raw_traces,
            "has_raw_archive": self.has_raw_archive,
        }
        if self.session_count is not None:
            out["session_count"] = self.session_count
        return out


def group_by_agent(summaries: Iterable[SnapshotSummary]) -> list[SnapshotSummary]:
    """One summary per agent: its most recently updated folder (``session_id`` of that
    folder), the files any of its folders has, and ``session_count`` folders merged."""
    by_agent: dict[str, list[SnapshotSummary]] = {}
    for summary in summaries:
        by_agent.setdefault(summary.agent_id, []).append(summary)
    out: list[SnapshotSummary] = []
    for agent_id, group in by_agent.items():
        latest = max(group, key=lambda s: (s.last_updated or 0.0, s.session_id or ""))
        out.append(
            SnapshotSummary(
                agent_id=agent_id,
                session_id=latest.session_id,
                last_updated=latest.last_updated,
                has_working_context=any(s.has_working_context for s in group),
                has_episodic=any(s.has_episodic for s in group),
                has_semantic=any(s.has_semantic for s in group),
                has_raw_traces=any(s.has_raw_traces for s in group),
                has_raw_archive=any(s.has_raw_archive for s in group),
                session_count=len(group),
            )
        )
    return out


def page_snapshots(
    summaries: Iterable[SnapshotSummary],
    search: str | None = None,
    page: int = 1,
    page_size: int = 50,
) -> dict[str, Any]:
    """One page of summaries, newest first, filtered by agent id substring.

    The search ignores case and surrounding blanks (an empty search filters nothing);
    ``page`` and ``page_size`` are clamped to at least 1; a page past the end is empty;
    ``total_pages`` is 0 when nothing matches.
    """
    page = max(1, int(page))
    page_size = max(1, int(page_size))
    needle = (search or "").strip().casefold()
    matching = [s for s in summaries if needle in s.agent_id.casefold()]
    matching.sort(key=lambda s: (s.agent_id, s.session_id or ""))
    matching.sort(key=lambda s: s.last_updated or 0.0, reverse=True)
    start = (page - 1) * page_size
    return {
        "entries": [s.to_dict() for s in matching[start : start + page_size]],
        "total": len(matching),
        "page": page,
        "page_size": page_size,
        "total_pages": math.ceil(len(matching) / page_size),
    }


def _short(value: Any, width: int = 160) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 1] + "…"


def format_memory_view(view: Mapping[str, Any]) -> str:
    """A readable text dump of a memory view (for ``session-server inspect``)."""
    lines = [f"agent: {view.get('agent_id')}"]
    if view.get("session_id"):
        lines.append(f"session: {view['session_id']}")
    for title, key in (
        ("working context", "working_context"),
        ("episodic", "episodic"),
        ("semantic", "semantic"),
        ("conversation", "conversation"),
        ("raw traces", "raw_traces"),
    ):
        items = view.get(key)
        if items is None:
            continue
        lines.append(f"\n== {title} ({len(items)}) ==")
        for item in items:
            lines.append("  " + _format_item(key, item))
    return "\n".join(lines) + "\n"


def _format_item(key: str, item: Mapping[str, Any]) -> str:
    if key == "working_context":
        payload = item.get("tool_payload")
        extra = f" {_short(payload, 80)}" if payload else ""
        return f"[{item.get('role')}] {_short(item.get('content') or '')}{extra}"
    if key == "episodic":
        return f"{item.get('id')}: {_short(item.get('summary', ''))}"
    if key == "semantic":
        return f"{item.get('id')}: {_short(item.get('fact', ''))}"
    if key == "conversation":
        if item.get("kind") == "message":
            return f"{item.get('turn_id')} [{item.get('role')}] {_short(item.get('content') or '')}"
        result = item.get("tool_error") or item.get("tool_result")
        return (
            f"{item.get('turn_id')} <{item.get('kind')}> {item.get('tool_name')}"
            f"({_short(item.get('tool_args'), 60)}) -> {_short(result, 80)}"
        )
    return (
        f"{item.get('turn_id')}#{item.get('seq')} {item.get('trace_type')}: "
        f"{_short(item.get('content') or item.get('tool_name') or '')}"
    )
