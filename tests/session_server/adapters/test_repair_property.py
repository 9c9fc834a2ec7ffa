"""Property: every stored history builds a context every adapter renders, the same each time.

Logs are generated the way real agents break them: crashes between a call and its result,
providers that reuse ``call_1`` in every turn, results that arrive turns later, results
whose call was never stored, duplicate results, system messages in the middle, arguments
that are malformed JSON or not an object, and the Responses shape (one call per assistant
item). Each is built (``build_compacted_context``, the builder of ``context.build`` /
``context.render``), rendered by every adapter, validated against the ``openai`` and
``anthropic`` SDK request types, and built a second time to the same bytes. Each log is
also built through tail windows of every length (``values.turns.tail_window``, the rule
``store.context_window`` and the actor's cache share): every result a window shows
answers the call the whole log gives it to, never another turn's call with its id.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from session_server import adapters
from session_server.compaction import build_compacted_context, build_parts
from session_server.values.codec import encode_json, event_to_message
from session_server.values.context import build_working_context
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from session_server.values.repair import _repair as _full_repair
from session_server.values.repair import missing_result_text, needs_repair, repair_tool_pairing
from session_server.values.turns import (
    _pairs,
    assign_turns,
    drop_orphan_results,
    safe_window_start,
    tail_window,
    widening_turns,
    window_from,
)

from .test_sdk_types import _check_all

_text = st.text(alphabet="ab ⟦\n", max_size=6)
_ids = st.sampled_from(["call_1", "call_2", "call_1_2", "c"])
_arguments = st.sampled_from([{"city": "Paris"}, '{"city": "Par', "[1]", [1, 2], 3, None, {}])


@st.composite
def logs(draw: st.DrawFn) -> list[SessionEvent]:
    events: list[SessionEvent] = []
    deferred: list[SessionEvent] = []  # results that arrive later (or never)
    fresh = 0
    used: list[str] = []  # call ids so far ("reuse": a later turn's call takes one again)
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(
            st.sampled_from(
                ["user", "assistant", "system", "calls", "reuse", "late", "orphan", "dup"]
            )
        )
        if kind == "reuse" and used:
            events.append(SessionEvent(action="user_message", content=draw(_text)))
        if kind == "user":
            events.append(SessionEvent(action="user_message", content=draw(_text)))
        elif kind == "assistant":
            events.append(SessionEvent(action="agent_message", content=draw(_text)))
        elif kind == "system":
            events.append(SessionEvent(action="system_instruction", content=draw(_text)))
        elif kind in ("calls", "reuse"):
            calls = []
            for k in range(draw(st.integers(1, 3))):
                fresh += 1
                if kind == "reuse" and used and k == 0:
                    call_id = draw(st.sampled_from(used))
                else:
                    call_id = draw(_ids | st.just(f"f{fresh}"))
                used.append(call_id)
                calls.append(ToolCall(id=call_id, name=f"tool{fresh}", arguments=draw(_arguments)))
            if draw(st.booleans()):  # one request event per call (the Responses shape)
                events.extend(
                    SessionEvent(action="tool_call_request", tool_calls=[c]) for c in calls
                )
            else:
                events.append(
                    SessionEvent(action="tool_call_request", content=draw(_text), tool_calls=calls)
                )
            for call in calls:
                fate = draw(st.sampled_from(["now", "later", "never"]))
                res = SessionEvent(
                    action="tool_result",
                    content=draw(_text),
                    tool_call_id=call.id,
                    tool_name=call.name,
                    is_success=draw(st.booleans()),
                )
                if fate == "now":
                    events.append(res)
                elif fate == "later":
                    deferred.append(res)
        elif kind == "late" and deferred:
            events.append(deferred.pop(draw(st.integers(0, len(deferred) - 1))))
        elif kind == "orphan":
            events.append(SessionEvent(action="tool_result", content="o", tool_call_id="nowhere"))
        elif kind == "dup":
            done = [e for e in events if e.action == "tool_result"]
            if done:
                events.append(draw(st.sampled_from(done)))
    return [
        SessionEvent(**{**_fields(e), "id": f"e{i}", "seq": i + 1}) for i, e in enumerate(events)
    ]


def _fields(event: SessionEvent) -> dict[str, Any]:
    return {f: getattr(event, f) for f in event.__struct_fields__}


def _render(events: list[SessionEvent]) -> dict[str, Any]:
    ctx = build_compacted_context(events, record=None, system_instructions=["Be brief."])
    return {
        name: adapters.get(name).to_model_messages(ctx.system_instructions, ctx.messages)
        for name in adapters.names()
    }


def _check_anthropic_pairing(payload: dict[str, Any]) -> None:
    """Each assistant ``tool_use`` is answered in the very next (user) message, except in
    the last exchange, where calls may still be pending."""
    messages = payload["messages"]
    for i, msg in enumerate(messages):
        uses = {b["id"] for b in msg["content"] if b["type"] == "tool_use"}
        if not uses or i + 1 == len(messages):
            continue
        answered = {
            b["tool_use_id"] for b in messages[i + 1]["content"] if b["type"] == "tool_result"
        }
        assert answered <= uses if i + 2 == len(messages) else answered == uses


@settings(max_examples=150, deadline=None)
@given(logs())
def test_every_stored_history_renders_for_every_adapter(events: list[SessionEvent]) -> None:
    stored = encode_json(events)
    first = _render(events)
    ctx = build_compacted_context(events, record=None, system_instructions=["Be brief."])
    _check_all(ctx.system_instructions, ctx.messages)
    _check_anthropic_pairing(first["anthropic"])
    # A second build gives the same bytes (provider prompt caches keep working).
    assert encode_json(_render(events)) == encode_json(first)
    # The public local builder repairs the same way.
    assert build_working_context(events, system_instructions=["Be brief."]).messages == ctx.messages
    # Every synthetic result says which call it stands for.
    names = {c.id: c.name for m in ctx.messages for c in m.tool_calls or ()}
    for msg in ctx.messages:
        if msg.synthetic:
            assert msg.tool_call_id is not None
            assert msg.content == missing_result_text(names[msg.tool_call_id], msg.tool_call_id)
            assert msg.is_error
    # The events a build reads are never changed by it.
    assert encode_json(events) == stored


def _stored(events: list[SessionEvent]) -> list[SessionEvent]:
    """The events as the store returns them: turns assigned, each result's text unique
    (a duplicate keeps its original's: the generator names every call's tool apart), so a
    built context tells which result it shows."""
    turns, _ = assign_turns(events)
    text: dict[tuple[str | None, str | None], str] = {}
    out = []
    for e, turn in zip(events, turns, strict=True):
        fields = {**_fields(e), "turn": turn}
        if e.action == "tool_result":
            fields["content"] = text.setdefault((e.tool_call_id, e.tool_name), f"r of {e.id}")
        out.append(SessionEvent(**fields))
    return out


def _answers(events: list[SessionEvent]) -> set[tuple[str, str]]:
    """(result text, name of the call it answers) for each stored result a build shows."""
    ctx = build_compacted_context(events, record=None)
    names = {c.id: c.name for m in ctx.messages for c in m.tool_calls or ()}
    return {
        (m.content, names[m.tool_call_id or ""])
        for m in ctx.messages
        if m.role == "tool" and not m.synthetic
    }


@settings(max_examples=150, deadline=None)
@given(logs())
def test_windows_give_each_result_to_its_own_call(events: list[SessionEvent]) -> None:
    stored = _stored(events)
    truth = _answers(stored)
    for limit in range(1, len(stored) + 1):
        window = tail_window(stored, limit, complete=True)
        assert window is not None
        ctx = build_compacted_context(window, record=None, system_instructions=["Be brief."])
        _check_all(ctx.system_instructions, ctx.messages)
        assert _answers(window) <= truth, limit


# -- the one-pass shortcut (``needs_repair``) against the full repair ------------------------

_pool = st.sampled_from(["c1", "c2", "c3", "c1_2", ""])


@st.composite
def message_lists(draw: st.DrawFn) -> list[ContextMessage]:
    """Histories as agents write them (each call group answered in order, ids fresh),
    then up to three edits of the kinds that need repair: a reused id, a dropped, moved,
    duplicated or orphan result, a message between a call and its result."""
    messages: list[ContextMessage] = []
    fresh = 0
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["user", "assistant", "system", "group", "responses"]))
        if kind == "user":
            messages.append(ContextMessage(role="user", content=draw(_text)))
            continue
        if kind == "assistant":
            messages.append(ContextMessage(role="assistant", content=draw(_text)))
            continue
        if kind == "system":
            messages.append(ContextMessage(role="system", content=draw(_text)))
            continue
        ids = []
        for _ in range(draw(st.integers(1, 3))):
            fresh += 1
            ids.append(f"f{fresh}")
        if kind == "group":
            calls = [ToolCall(id=i, name="t") for i in ids]
            messages.append(ContextMessage(role="assistant", content="", tool_calls=calls))
        else:  # one call per assistant message
            messages.extend(
                ContextMessage(role="assistant", content="", tool_calls=[ToolCall(id=i, name="t")])
                for i in ids
            )
        order = draw(st.permutations(ids))
        answered = draw(st.integers(0, len(ids))) if draw(st.booleans()) else len(ids)
        messages.extend(
            ContextMessage(role="tool", content=draw(_text), tool_call_id=i, name="t")
            for i in order[:answered]
        )
    for _ in range(draw(st.integers(0, 3))):
        if not messages:
            break
        k = draw(st.integers(0, len(messages) - 1))
        edit = draw(st.sampled_from(["drop", "move", "dup", "orphan", "reuse", "insert"]))
        if edit == "drop":
            del messages[k]
        elif edit == "move":
            messages.insert(draw(st.integers(0, len(messages))), messages.pop(k))
        elif edit == "dup":
            messages.insert(draw(st.integers(0, len(messages))), messages[k])
        elif edit == "orphan":
            orphan = ContextMessage(role="tool", content="o", tool_call_id=draw(_pool), name="t")
            messages.insert(k, orphan)
        elif edit == "reuse":
            call = ToolCall(id=draw(_pool), name="t")
            messages.insert(k, ContextMessage(role="assistant", content="", tool_calls=[call]))
        else:
            messages.insert(k, ContextMessage(role="user", content="between"))
    return messages


@settings(max_examples=400, deadline=None)
@given(message_lists(), st.booleans())
def test_the_shortcut_gives_exactly_what_the_full_repair_gives(
    messages: list[ContextMessage], with_turns: bool
) -> None:
    turns: list[int | None] | None = None
    if with_turns:
        turns, turn = [], 0
        for m in messages:
            turn += m.role == "user"
            turns.append(turn)
    full = _full_repair(messages, turns)
    out = repair_tool_pairing(messages, turns=turns)
    # Byte-identical output, and the same objects where the full repair kept them.
    assert encode_json(out) == encode_json(full)
    assert [id(m) for m in out if any(m is k for k in messages)] == [
        id(m) for m in full if any(m is k for k in messages)
    ]
    if not needs_repair(messages):
        # The shortcut's claim: the full repair changes nothing at all.
        assert len(full) == len(messages)
        assert all(a is b for a, b in zip(full, messages, strict=True))


def test_the_shortcut_takes_the_shapes_agents_write() -> None:
    def call(*ids: str) -> ContextMessage:
        return ContextMessage(
            role="assistant", content="", tool_calls=[ToolCall(id=i, name="t") for i in ids]
        )

    def res(call_id: str) -> ContextMessage:
        return ContextMessage(role="tool", content="r", tool_call_id=call_id, name="t")

    user = ContextMessage(role="user", content="q")
    answer = ContextMessage(role="assistant", content="a")
    clean = [
        [],
        [user, answer],
        [user, call("a"), res("a"), answer],
        [user, call("a", "b"), res("b"), res("a"), answer],
        [user, call("a"), call("b"), res("a"), res("b"), call("c"), res("c"), answer],
        [user, call("a", "b"), res("a")],  # the last group stays pending
        [user, call("a")],
    ]
    for messages in clean:
        assert not needs_repair(messages), messages
    dirty = [
        [user, call("a"), user],  # missing result
        [user, call("a"), res("a"), user, call("a"), res("a")],  # reused id
        [user, res("a"), call("a")],  # result before its call
        [user, call("a"), res("a"), res("a")],  # second result
        [user, call("a", "b"), res("a"), call("c"), res("b"), res("c")],  # late result
        [user, call(""), res("")],  # empty id
        [user, res("nowhere")],  # orphan
    ]
    for messages in dirty:
        assert needs_repair(messages), messages


@settings(max_examples=300, deadline=None)
@given(logs())
def test_the_builders_clean_path_gives_what_the_full_path_gives(
    events: list[SessionEvent],
) -> None:
    """``build_parts`` skips the orphan filter and the repair when nothing needs them:
    its messages are those of the full path (orphans dropped, then repaired), and the
    stored counts make the total of a history that needed nothing."""
    stored = [SessionEvent(**{**_fields(e), "token_count": 3}) for e in _stored(events)]
    kept = drop_orphan_results(stored)
    mapped = [m for m in map(event_to_message, kept) if m is not None]
    full = _full_repair(mapped, [e.turn for e in kept])
    parts = build_parts(stored, None)
    assert encode_json(parts.messages) == encode_json(full)
    if not needs_repair([m for m in map(event_to_message, stored) if m is not None]):
        assert len(parts.messages) == len(stored)
        assert parts.stored_tokens == 3 * len(stored)


def _reference_widening(window: list[SessionEvent]) -> set[int]:
    """``widening_turns`` as first written: settled results from the full ``_pairs``."""
    settled = {result for call, result in _pairs(window) if call < result}
    if all(i in settled for i, e in enumerate(window) if e.action == "tool_result"):
        return set()
    return {window[0].turn or 0} | {e.turn or 0 for e in window if e.action == "tool_result"}


@settings(max_examples=200, deadline=None)
@given(logs(), st.booleans())
def test_the_window_rule_gives_what_its_first_form_gave(
    events: list[SessionEvent], with_turns: bool
) -> None:
    """``widening_turns`` (one pass) and ``window_from`` (pairs computed once) against the
    rule as first written, on every window and nominal cut of every log, with stored
    turns and without (then turns are counted from the events)."""
    log = _stored(events) if with_turns else events
    for start in range(len(log)):
        window = log[start:]
        assert widening_turns(window) == _reference_widening(window)
        for cut in range(len(window) + 1):
            first = safe_window_start(window, cut) if cut > 0 else 0
            assert window_from(window, cut) == drop_orphan_results(window[first:])
