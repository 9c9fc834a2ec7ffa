"""Checks shared by the provider adapters: what no provider format can express (pure).

Every adapter except ``workers-ai`` (which keeps its historical pass-through behaviour)
runs :func:`check_tool_pairing` before rendering, so the rules are the same everywhere:

- a ``tool`` message must carry a ``tool_call_id`` and answer a call of the *call group*
  it follows: one assistant message with ``tool_calls``, or several consecutive ones (the
  Responses API's one ``function_call`` item per call); only ``tool`` messages may sit
  between a call group and the last of its results;
- each call id appears once in the whole context (providers pair calls and results by
  id; a reused id would make the pairing ambiguous, and Anthropic refuses it) and each
  call is answered at most once;
- a call may stay unanswered only in the last call group, with nothing but results of
  that same group after it (the model or the tool runner answers it next); a call whose
  result is missing, followed by any other message, is refused;
- only assistant messages carry ``tool_calls``.

:func:`check_images` refuses images on roles a format cannot attach them to. Refusals
are ``RenderError``s whose message starts with the offending ``messages[i]`` path.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from session_server.values.errors import RenderError
from session_server.values.events import ContextMessage

__all__ = ["call_groups", "check_images", "check_tool_pairing", "render_error"]


def render_error(index: int, problem: str, *, field: str | None = None) -> RenderError:
    """A ``RenderError`` for ``messages[index]`` (``messages[index].field`` when given)."""
    path = f"messages[{index}]" if field is None else f"messages[{index}].{field}"
    return RenderError(f"{path}: {problem}", data={"field": path, "index": index})


def check_tool_pairing(messages: Sequence[ContextMessage]) -> None:
    """Raise ``RenderError`` unless every tool call and tool result pair up (rules above)."""
    first_seen: dict[str, int] = {}  # call id -> index of the assistant message
    answered: set[str] = set()
    pending: dict[str, int] = {}  # calls of the open call group still unanswered
    group_open = False  # the previous message has tool calls: another one joins its group
    for i, msg in enumerate(messages):
        joins_group = group_open and msg.role == "assistant" and bool(msg.tool_calls)
        group_open = False
        if msg.role == "tool":
            call_id = msg.tool_call_id
            if not call_id:
                raise render_error(i, "tool result has no tool_call_id", field="tool_call_id")
            if call_id in pending:
                del pending[call_id]
            elif call_id in answered:
                raise render_error(i, f"duplicate tool result for call_id {call_id!r}")
            else:
                raise render_error(
                    i, f"tool result for call_id {call_id!r} has no preceding tool call"
                )
            answered.add(call_id)
            continue
        if pending and not joins_group:
            call_id, at = next(iter(pending.items()))
            raise render_error(
                at,
                f"tool call {call_id!r} has no result before messages[{i}] ({msg.role}); "
                "a call may stay unanswered only in the last call group",
            )
        if not msg.tool_calls:
            continue
        if msg.role != "assistant":
            raise render_error(
                i, f"only assistant messages carry tool calls, not {msg.role}", field="tool_calls"
            )
        for k, call in enumerate(msg.tool_calls):
            where = f"tool_calls[{k}].id"
            if not call.id:
                raise render_error(i, "tool call id must be a non-empty string", field=where)
            if call.id in first_seen:
                raise render_error(
                    i,
                    f"tool call id {call.id!r} is already used by messages[{first_seen[call.id]}]",
                    field=where,
                )
            first_seen[call.id] = i
            pending[call.id] = i
        group_open = True


def call_groups(messages: Sequence[ContextMessage]) -> list[list[ContextMessage]]:
    """``messages`` in runs: each call group (consecutive assistant messages with tool
    calls) is one run, every other message a run of its own. For formats that need a
    group as one message (Chat Completions)."""
    runs: list[list[ContextMessage]] = []
    for msg in messages:
        is_call = msg.role == "assistant" and bool(msg.tool_calls)
        if is_call and runs and runs[-1][-1].role == "assistant" and runs[-1][-1].tool_calls:
            runs[-1].append(msg)
        else:
            runs.append([msg])
    return runs


def check_images(
    messages: Sequence[ContextMessage], *, adapter: str, roles: Collection[str]
) -> None:
    """Raise ``RenderError`` for images on a role outside ``roles`` or an empty image URL."""
    allowed = ", ".join(sorted(roles))
    for i, msg in enumerate(messages):
        if not msg.images:
            continue
        if msg.role not in roles:
            raise render_error(
                i,
                f"{adapter} cannot attach images to a {msg.role} message "
                f"(images are accepted on: {allowed})",
                field="images",
            )
        for k, url in enumerate(msg.images):
            if not url:
                raise render_error(i, "image URL must be a non-empty string", field=f"images[{k}]")
