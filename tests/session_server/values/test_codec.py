"""Row <-> event (hydrate/dehydrate) and event <-> message mapping."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_server.values.codec import (
    arguments_object,
    arguments_text,
    dehydrate_event,
    encode_json,
    event_to_message,
    hydrate_event,
    message_to_event,
    new_event_id,
    new_event_ids,
    now_ms,
)
from session_server.values.errors import CorruptRecordError, InternalError, SessionServerError
from session_server.values.events import ACTIONS, ContextMessage, SessionEvent, ToolCall

ROW_KEYS = {"id", "session_id", "seq", "action", "content", "metadata", "created_at"}


def row(
    action: str, content: str | None = "x", metadata: str | None = None, **extra: Any
) -> dict[str, Any]:
    base = {
        "id": "ev-1",
        "session_id": "s-1",
        "seq": 3,
        "action": action,
        "content": content,
        "metadata": metadata,
        "created_at": 1_700_000_000_123,
    }
    base.update(extra)
    return base


# --------------------------------------------------------------------------------------
# Rows as the reference SQL primitives write them (JSON.stringify: compact, camelCase keys)
# --------------------------------------------------------------------------------------


class TestReferenceRows:
    def test_user_message(self) -> None:
        ev = hydrate_event(row("user_message", "Hello"))
        assert ev == SessionEvent(
            id="ev-1",
            session_id="s-1",
            seq=3,
            timestamp=1_700_000_000_123,
            action="user_message",
            content="Hello",
        )

    def test_agent_message_with_model(self) -> None:
        ev = hydrate_event(row("agent_message", "Hi!", '{"model":"@cf/meta/llama-3-8b-instruct"}'))
        assert ev.action == "agent_message"
        assert ev.content == "Hi!"
        assert ev.model == "@cf/meta/llama-3-8b-instruct"
        assert ev.metadata is None

    def test_agent_message_without_model(self) -> None:
        ev = hydrate_event(row("agent_message", "Hi!", None))
        assert ev.model is None

    def test_tool_call_request(self) -> None:
        meta = (
            '{"toolCalls":[{"id":"call_1","name":"get_weather","arguments":{"city":"Paris"}},'
            '{"id":"call_2","name":"get_time","arguments":{}}]}'
        )
        ev = hydrate_event(row("tool_call_request", "", meta))
        assert ev.action == "tool_call_request"
        assert ev.tool_calls == [
            ToolCall("call_1", "get_weather", {"city": "Paris"}),
            ToolCall("call_2", "get_time", {}),
        ]
        assert ev.metadata is None

    def test_tool_result(self) -> None:
        meta = '{"toolCallId":"call_1","toolName":"get_weather","isSuccess":true}'
        ev = hydrate_event(row("tool_result", '{"temp":21}', meta))
        assert (ev.tool_call_id, ev.tool_name, ev.is_success) == ("call_1", "get_weather", True)
        assert ev.content == '{"temp":21}'
        assert ev.metadata is None

    def test_tool_result_failure_is_kept(self) -> None:
        meta = '{"toolCallId":"call_1","toolName":"get_weather","isSuccess":false}'
        assert hydrate_event(row("tool_result", "boom", meta)).is_success is False

    def test_system_instruction(self) -> None:
        ev = hydrate_event(row("system_instruction", "Be brief."))
        assert (ev.action, ev.content, ev.metadata) == ("system_instruction", "Be brief.", None)

    def test_compaction(self) -> None:
        ev = hydrate_event(row("compaction", "Summary of 12 events", '{"compactedEventCount":12}'))
        assert ev.action == "compaction"
        assert ev.compacted_event_count == 12
        assert ev.compaction is None
        assert ev.metadata is None

    @pytest.mark.parametrize(
        ("action", "metadata"),
        [
            ("user_message", None),
            ("agent_message", '{"model":"m"}'),
            (
                "tool_call_request",
                '{"toolCalls":[{"id":"c","name":"f","arguments":{"a":[1,"é"]}}]}',
            ),
            ("tool_result", '{"toolCallId":"c","toolName":"f","isSuccess":false}'),
            ("system_instruction", None),
            ("compaction", '{"compactedEventCount":4}'),
        ],
    )
    def test_reference_rows_write_back_unchanged(self, action: str, metadata: str | None) -> None:
        r = row(action, "content ü", metadata)
        assert dehydrate_event(hydrate_event(r)) == r


# --------------------------------------------------------------------------------------
# hydrate_event rules
# --------------------------------------------------------------------------------------


class TestHydrate:
    @pytest.mark.parametrize("action", ACTIONS)
    def test_null_content_reads_as_empty_string(self, action: str) -> None:
        assert hydrate_event(row(action, None)).content == ""

    @pytest.mark.parametrize("action", ["bogus", "", None, "USER_MESSAGE", "tool_call"])
    def test_unknown_action_reads_as_user_message(self, action: Any) -> None:
        ev = hydrate_event(row(action, "kept"))
        assert ev.action == "user_message"
        assert ev.content == "kept"

    def test_unknown_action_keeps_its_metadata(self) -> None:
        ev = hydrate_event(row("bogus", "kept", '{"a":1}'))
        assert ev.metadata == {"a": 1}

    def test_is_success_defaults_to_true_only_when_absent(self) -> None:
        absent = hydrate_event(row("tool_result", "r", '{"toolCallId":"c","toolName":"f"}'))
        assert absent.is_success is True
        no_meta = hydrate_event(row("tool_result", "r", None))
        assert no_meta.is_success is True

    def test_is_success_false_is_preserved(self) -> None:
        ev = hydrate_event(row("tool_result", "r", '{"toolCallId":"c","isSuccess":false}'))
        assert ev.is_success is False

    def test_is_success_null_reads_as_absent(self) -> None:
        # The reference reads ``isSuccess ?? true``: JSON null counts as absent.
        ev = hydrate_event(row("tool_result", "r", '{"toolCallId":"c","isSuccess":null}'))
        assert ev.is_success is True

    def test_tool_result_without_ids_has_none(self) -> None:
        ev = hydrate_event(row("tool_result", "r", None))
        assert ev.tool_call_id is None
        assert ev.tool_name is None

    def test_timestamp_comes_from_created_at(self) -> None:
        assert hydrate_event(row("user_message")).timestamp == 1_700_000_000_123

    def test_turn_and_token_count_pass_through(self) -> None:
        ev = hydrate_event(row("user_message", turn=4, token_count=17))
        assert (ev.turn, ev.token_count) == (4, 17)

    def test_empty_object_metadata_is_kept_as_empty_metadata(self) -> None:
        ev = hydrate_event(row("user_message", "x", "{}"))
        assert ev.metadata == {}

    def test_free_form_keys_become_metadata_and_reference_keys_do_not(self) -> None:
        meta = '{"toolCallId":"c","toolName":"f","isSuccess":true,"trace":"abc","n":2}'
        ev = hydrate_event(row("tool_result", "r", meta))
        assert ev.metadata == {"trace": "abc", "n": 2}

    def test_keys_of_another_action_stay_free_form(self) -> None:
        # ``toolCalls`` means nothing on a user message: it is kept as metadata.
        ev = hydrate_event(row("user_message", "x", '{"toolCalls":[1]}'))
        assert ev.tool_calls is None
        assert ev.metadata == {"toolCalls": [1]}

    def test_our_keys_reasoning_images_compaction(self) -> None:
        ev = hydrate_event(
            row(
                "agent_message",
                "a",
                '{"model":"m","reasoning":"because","images":["data:image/png;base64,AAA"]}',
            )
        )
        assert ev.reasoning == "because"
        assert ev.images == ["data:image/png;base64,AAA"]
        comp = hydrate_event(
            row("compaction", "s", '{"compactedEventCount":3,"compaction":{"mode":"summarize"}}')
        )
        assert comp.compaction == {"mode": "summarize"}

    def test_metadata_json_null_reads_as_no_metadata(self) -> None:
        ev = hydrate_event(row("agent_message", "a", "null"))
        assert ev.metadata is None
        assert ev.model is None

    def test_empty_string_metadata_reads_as_no_metadata(self) -> None:
        assert hydrate_event(row("user_message", "x", "")).metadata is None

    def test_tool_calls_null_reads_as_no_calls(self) -> None:
        ev = hydrate_event(row("tool_call_request", "", '{"toolCalls":null}'))
        assert ev.tool_calls == []

    def test_tool_calls_missing_reads_as_no_calls(self) -> None:
        assert hydrate_event(row("tool_call_request", "", None)).tool_calls == []

    def test_tool_call_arguments_stored_as_json_string_read_as_stored(self) -> None:
        # Stored as sent (a JSON string), read back unchanged; the adapters render it.
        meta = '{"toolCalls":[{"id":"c","name":"f","arguments":"{\\"q\\": 1}"}]}'
        ev = hydrate_event(row("tool_call_request", "", meta))
        assert ev.tool_calls == [ToolCall("c", "f", '{"q": 1}')]
        assert arguments_text(ev.tool_calls[0].arguments) == '{"q": 1}'
        assert arguments_object(ev.tool_calls[0].arguments) == {"q": 1}

    @pytest.mark.parametrize(
        ("stored", "text", "obj"),
        [
            ({"a": [1]}, '{"a":[1]}', {"a": [1]}),
            ('{"city": "Par', '{"city": "Par', {"_raw": '{"city": "Par'}),
            ("", "", {}),  # a tool without parameters: no arguments, not {"_raw": ""}
            (" \n", " \n", {}),
            ("[1, 2]", "[1, 2]", {"_raw": "[1, 2]"}),
            ([1, 2], "[1,2]", {"_value": [1, 2]}),
            (7, "7", {"_value": 7}),
            (None, "null", {"_value": None}),
        ],
    )
    def test_tool_call_arguments_any_shape_round_trip_and_render(
        self, stored: Any, text: str, obj: dict[str, Any]
    ) -> None:
        event = SessionEvent(
            id="e", action="tool_call_request", tool_calls=[ToolCall("c", "f", stored)]
        )
        back = hydrate_event(dehydrate_event(event))
        assert back.tool_calls == [ToolCall("c", "f", stored)]
        assert arguments_text(stored) == text
        assert arguments_object(stored) == obj

    def test_tool_call_arguments_missing_read_as_empty_object(self) -> None:
        ev = hydrate_event(row("tool_call_request", "", '{"toolCalls":[{"id":"c","name":"f"}]}'))
        assert ev.tool_calls == [ToolCall("c", "f", {})]

    def test_tool_call_null_id_and_name_read_as_empty(self) -> None:
        ev = hydrate_event(row("tool_call_request", "", '{"toolCalls":[{"id":null,"name":null}]}'))
        assert ev.tool_calls == [ToolCall("", "", {})]


class TestCorruptRows:
    @pytest.mark.parametrize("bad", ["{not json", '{"a":', "[1,2", "nul", "{'a': 1}"])
    def test_invalid_metadata_json_raises_corrupt_record_error(self, bad: str) -> None:
        with pytest.raises(CorruptRecordError) as info:
            hydrate_event(row("agent_message", "x", bad))
        err = info.value
        assert not isinstance(err, json.JSONDecodeError)
        assert not isinstance(err, ValueError)
        assert isinstance(err, InternalError)
        assert isinstance(err, SessionServerError)
        assert err.code == -32603
        assert "ev-1" in err.message
        assert "metadata" in err.message
        assert err.data == {"event_id": "ev-1", "field": "metadata"}

    @pytest.mark.parametrize("bad", ["[1,2]", '"text"', "42", "true"])
    def test_metadata_that_is_not_an_object_raises(self, bad: str) -> None:
        with pytest.raises(CorruptRecordError, match="must be a JSON object"):
            hydrate_event(row("user_message", "x", bad))

    def test_metadata_of_wrong_type_raises(self) -> None:
        with pytest.raises(CorruptRecordError, match="metadata"):
            hydrate_event(row("user_message", "x", 42))  # type: ignore[arg-type]

    def test_tool_calls_not_a_list_raises(self) -> None:
        with pytest.raises(CorruptRecordError, match="toolCalls"):
            hydrate_event(row("tool_call_request", "", '{"toolCalls":{"id":"c"}}'))

    def test_tool_call_not_an_object_raises(self) -> None:
        with pytest.raises(CorruptRecordError, match=r"toolCalls\[1\]"):
            hydrate_event(row("tool_call_request", "", '{"toolCalls":[{"id":"c"},"x"]}'))

    @pytest.mark.parametrize("bad", ['"many"', "1.5", "true", "[]"])
    def test_compacted_event_count_not_an_integer_raises(self, bad: str) -> None:
        with pytest.raises(CorruptRecordError, match="compactedEventCount"):
            hydrate_event(row("compaction", "s", f'{{"compactedEventCount":{bad}}}'))

    def test_compacted_event_count_integral_float_reads(self) -> None:
        ev = hydrate_event(row("compaction", "s", '{"compactedEventCount":3.0}'))
        assert ev.compacted_event_count == 3

    def test_metadata_given_as_bytes_or_dict(self) -> None:
        assert hydrate_event(row("agent_message", "a", b'{"model":"m"}')).model == "m"  # type: ignore[arg-type]
        assert hydrate_event(row("agent_message", "a", {"model": "m"})).model == "m"  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# dehydrate_event rules
# --------------------------------------------------------------------------------------


class TestDehydrate:
    def test_row_keys(self) -> None:
        r = dehydrate_event(SessionEvent(id="e", session_id="s", seq=1, timestamp=9, content="c"))
        assert set(r) == ROW_KEYS
        assert r == {
            "id": "e",
            "session_id": "s",
            "seq": 1,
            "action": "user_message",
            "content": "c",
            "metadata": None,
            "created_at": 9,
        }

    def test_turn_and_token_count_are_not_row_keys(self) -> None:
        r = dehydrate_event(SessionEvent(id="e", turn=3, token_count=10))
        assert set(r) == ROW_KEYS

    def test_metadata_is_compact_json_with_non_ascii_kept(self) -> None:
        ev = SessionEvent(
            action="agent_message",
            content="x",
            model="modèle",
            metadata={"note": "café ☕ 日本", "nested": {"a": [1, 2]}},
        )
        meta = dehydrate_event(ev)["metadata"]
        assert meta == '{"note":"café ☕ 日本","nested":{"a":[1,2]},"model":"modèle"}'
        assert " " not in meta.replace("café ☕ 日本", "")
        assert "\\u" not in meta

    def test_encode_json_is_compact_and_keeps_non_ascii(self) -> None:
        assert encode_json({"a": [1, {"b": "ü"}], "c": None}) == '{"a":[1,{"b":"ü"}],"c":null}'

    def test_empty_metadata_object_is_stored_as_braces(self) -> None:
        assert dehydrate_event(SessionEvent(metadata={}))["metadata"] == "{}"
        assert (
            dehydrate_event(SessionEvent(action="system_instruction", metadata={}))["metadata"]
            == "{}"
        )

    def test_no_metadata_is_stored_as_null(self) -> None:
        assert dehydrate_event(SessionEvent())["metadata"] is None
        assert dehydrate_event(SessionEvent(action="agent_message"))["metadata"] is None

    def test_empty_metadata_round_trips(self) -> None:
        ev = SessionEvent(id="e", session_id="s", seq=1, timestamp=2, metadata={})
        back = hydrate_event(dehydrate_event(ev))
        assert back.metadata == {}
        assert back == ev

    def test_reference_keys_are_written(self) -> None:
        ev = SessionEvent(
            action="tool_result",
            content="r",
            tool_call_id="c1",
            tool_name="f",
            is_success=False,
        )
        assert json.loads(dehydrate_event(ev)["metadata"]) == {
            "toolCallId": "c1",
            "toolName": "f",
            "isSuccess": False,
        }
        calls = SessionEvent(action="tool_call_request", tool_calls=[ToolCall("c", "f", {"x": 1})])
        assert json.loads(dehydrate_event(calls)["metadata"]) == {
            "toolCalls": [{"id": "c", "name": "f", "arguments": {"x": 1}}]
        }
        comp = SessionEvent(action="compaction", compacted_event_count=0)
        assert dehydrate_event(comp)["metadata"] == '{"compactedEventCount":0}'

    def test_reference_key_wins_over_free_form_key(self) -> None:
        ev = SessionEvent(action="agent_message", model="real", metadata={"model": "fake", "k": 1})
        assert json.loads(dehydrate_event(ev)["metadata"]) == {"model": "real", "k": 1}

    def test_fields_of_another_action_are_not_written(self) -> None:
        ev = SessionEvent(action="user_message", model="m", tool_call_id="c", is_success=False)
        assert dehydrate_event(ev)["metadata"] is None

    def test_is_success_none_is_not_written_and_reads_true(self) -> None:
        ev = SessionEvent(action="tool_result", tool_call_id="c")
        r = dehydrate_event(ev)
        assert json.loads(r["metadata"]) == {"toolCallId": "c"}
        assert hydrate_event(r).is_success is True

    def test_free_form_metadata_is_not_mutated(self) -> None:
        meta = {"k": 1}
        dehydrate_event(SessionEvent(action="agent_message", model="m", metadata=meta))
        assert meta == {"k": 1}


# --------------------------------------------------------------------------------------
# Round trips (every action), including a property test
# --------------------------------------------------------------------------------------

FULL_EVENTS = [
    SessionEvent(id="1", session_id="s", seq=1, timestamp=1, action="user_message", content="hi",
                 images=["https://x/y.png"], metadata={"lang": "fr"}),
    SessionEvent(id="2", session_id="s", seq=2, timestamp=2, action="agent_message", content="yo",
                 model="m", reasoning="r", images=["data:image/png;base64,AA"]),
    SessionEvent(id="3", session_id="s", seq=3, timestamp=3, action="tool_call_request",
                 content="", model="m", reasoning="r2", images=["u"],
                 tool_calls=[ToolCall("c1", "f", {"a": {"b": [1, None, "ü"]}}), ToolCall("c2", "g")]),
    SessionEvent(id="4", session_id="s", seq=4, timestamp=4, action="tool_result", content="42",
                 tool_call_id="c1", tool_name="f", is_success=True, images=["i"]),
    SessionEvent(id="5", session_id="s", seq=5, timestamp=5, action="tool_result", content="boom",
                 tool_call_id="c2", tool_name="g", is_success=False, metadata={"ms": 12}),
    SessionEvent(id="6", session_id="s", seq=6, timestamp=6, action="system_instruction",
                 content="Be brief."),
    SessionEvent(id="7", session_id="s", seq=7, timestamp=7, action="compaction",
                 content="summary", compacted_event_count=6,
                 compaction={"mode": "summarize", "upto_seq": 6}),
]  # fmt: skip


@pytest.mark.parametrize("event", FULL_EVENTS, ids=lambda e: e.action)
def test_dehydrate_hydrate_round_trip(event: SessionEvent) -> None:
    r = dehydrate_event(event)
    assert set(r) == ROW_KEYS
    assert hydrate_event(r) == event


_json_leaf = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
_json = st.recursive(
    _json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
_OWN = {"model", "toolCalls", "toolCallId", "toolName", "isSuccess", "compactedEventCount",
        "compaction", "reasoning", "images"}  # fmt: skip
_free_meta = st.none() | st.dictionaries(
    st.text(max_size=6).filter(lambda k: k not in _OWN), _json, max_size=4
)
_opt_text = st.none() | st.text(max_size=10)
_images = st.none() | st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=2)
_calls = st.lists(
    st.builds(
        ToolCall,
        id=st.text(min_size=1, max_size=5),
        name=st.text(min_size=1, max_size=5),
        arguments=st.dictionaries(st.text(max_size=4), _json, max_size=3),
    ),
    max_size=3,
)


@st.composite
def stored_events(draw: st.DrawFn) -> SessionEvent:
    action = draw(st.sampled_from(ACTIONS))
    kw: dict[str, Any] = {
        "id": draw(st.text(min_size=1, max_size=8)),
        "session_id": draw(st.text(max_size=8)),
        "seq": draw(st.integers(0, 10**9)),
        "timestamp": draw(st.integers(0, 2**50)),
        "action": action,
        "content": draw(st.text(max_size=20)),
        "metadata": draw(_free_meta),
    }
    if action in ("user_message", "agent_message", "tool_call_request", "tool_result"):
        kw["images"] = draw(_images)
    if action in ("user_message", "agent_message", "tool_call_request"):
        kw["reasoning"] = draw(_opt_text)
    if action in ("agent_message", "tool_call_request"):
        kw["model"] = draw(_opt_text)
    if action == "tool_call_request":
        kw["tool_calls"] = draw(_calls)
    if action == "tool_result":
        kw["tool_call_id"] = draw(_opt_text)
        kw["tool_name"] = draw(_opt_text)
        kw["is_success"] = draw(st.booleans())
    if action == "compaction":
        kw["compacted_event_count"] = draw(st.none() | st.integers(0, 10**6))
        kw["compaction"] = draw(st.none() | st.dictionaries(st.text(max_size=4), _json, max_size=3))
    return SessionEvent(**kw)


@given(stored_events())
def test_round_trip_property(event: SessionEvent) -> None:
    r = dehydrate_event(event)
    assert r["metadata"] is None or isinstance(json.loads(r["metadata"]), dict)
    expected = event
    if event.metadata == {} and r["metadata"] != "{}":
        # An empty free-form object shares the JSON object with reference keys, so it is
        # not told apart from "no free-form metadata" once those keys are present.
        expected = msgspec.structs.replace(event, metadata=None)
    assert hydrate_event(r) == expected
    # And the JSON text itself round-trips byte for byte.
    assert dehydrate_event(hydrate_event(r)) == r


# --------------------------------------------------------------------------------------
# event -> message
# --------------------------------------------------------------------------------------


class TestEventToMessage:
    def test_user_message(self) -> None:
        assert event_to_message(
            SessionEvent(action="user_message", content="hi")
        ) == ContextMessage(role="user", content="hi")

    def test_agent_message(self) -> None:
        msg = event_to_message(SessionEvent(action="agent_message", content="yo", model="m"))
        assert msg == ContextMessage(role="assistant", content="yo")

    def test_tool_call_request_becomes_assistant_with_tool_calls(self) -> None:
        calls = [ToolCall("c1", "f", {"a": 1})]
        msg = event_to_message(SessionEvent(action="tool_call_request", tool_calls=calls))
        assert msg == ContextMessage(role="assistant", content="", tool_calls=calls)
        assert msg is not None and msg.tool_calls is not calls  # a copy, not an alias

    def test_tool_call_request_without_calls_has_no_tool_calls_key(self) -> None:
        msg = event_to_message(SessionEvent(action="tool_call_request", content="x", tool_calls=[]))
        assert msg == ContextMessage(role="assistant", content="x")
        assert "tool_calls" not in msgspec.to_builtins(msg)

    def test_tool_result_becomes_tool_message_named_after_the_tool(self) -> None:
        ev = SessionEvent(action="tool_result", content="42", tool_call_id="c1", tool_name="calc",
                          is_success=True)  # fmt: skip
        assert event_to_message(ev) == ContextMessage(
            role="tool", content="42", tool_call_id="c1", name="calc"
        )

    def test_failed_tool_result_is_marked_as_error(self) -> None:
        ev = SessionEvent(action="tool_result", content="boom", tool_call_id="c1", is_success=False)
        msg = event_to_message(ev)
        assert msg is not None and msg.is_error is True

    def test_system_instruction_becomes_system_message(self) -> None:
        msg = event_to_message(SessionEvent(action="system_instruction", content="Be brief."))
        assert msg == ContextMessage(role="system", content="Be brief.")

    def test_compaction_becomes_system_message(self) -> None:
        ev = SessionEvent(action="compaction", content="Earlier: ...", compacted_event_count=5)
        assert event_to_message(ev) == ContextMessage(role="system", content="Earlier: ...")

    def test_free_form_metadata_reasoning_and_images_are_carried(self) -> None:
        ev = SessionEvent(action="agent_message", content="a", reasoning="r", images=["u"],
                          metadata={"k": 1})  # fmt: skip
        assert event_to_message(ev) == ContextMessage(
            role="assistant", content="a", reasoning="r", images=["u"], metadata={"k": 1}
        )

    def test_empty_metadata_gives_no_metadata_key(self) -> None:
        msg = event_to_message(SessionEvent(metadata={}))
        assert msg is not None and msg.metadata is None

    @pytest.mark.parametrize("action", ACTIONS)
    def test_every_action_maps_to_a_message(self, action: str) -> None:
        assert isinstance(event_to_message(SessionEvent(action=action)), ContextMessage)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# message -> event
# --------------------------------------------------------------------------------------


class TestMessageToEvent:
    def test_the_time_is_now_or_the_one_given(self) -> None:
        before = now_ms()
        ev = message_to_event("s1", ContextMessage(role="user", content="hi"))
        assert before <= ev.timestamp <= now_ms()
        given = message_to_event("s1", ContextMessage(role="user", content="hi"), timestamp=7)
        assert given.timestamp == 7

    def test_system(self) -> None:
        ev = message_to_event("s1", ContextMessage(role="system", content="Be brief."))
        assert (ev.action, ev.content, ev.session_id) == ("system_instruction", "Be brief.", "s1")

    def test_user(self) -> None:
        ev = message_to_event("s1", ContextMessage(role="user", content="hi", images=["u"]))
        assert (ev.action, ev.content, ev.images) == ("user_message", "hi", ["u"])

    def test_assistant_without_tool_calls_is_agent_message(self) -> None:
        ev = message_to_event("s1", ContextMessage(role="assistant", content="yo", reasoning="r"))
        assert (ev.action, ev.content, ev.reasoning) == ("agent_message", "yo", "r")
        assert ev.tool_calls is None

    def test_assistant_with_empty_tool_calls_is_agent_message(self) -> None:
        ev = message_to_event("s1", ContextMessage(role="assistant", content="yo", tool_calls=[]))
        assert ev.action == "agent_message"

    def test_assistant_with_tool_calls_is_tool_call_request(self) -> None:
        calls = [ToolCall("c1", "f", {"a": 1}), ToolCall("c2", "g")]
        ev = message_to_event(
            "s1", ContextMessage(role="assistant", content="", tool_calls=calls, images=["i"])
        )
        assert ev.action == "tool_call_request"
        assert ev.tool_calls == calls
        assert ev.images == ["i"]

    def test_tool_message_is_tool_result_named_from_name(self) -> None:
        ev = message_to_event(
            "s1", ContextMessage(role="tool", content="42", tool_call_id="c1", name="calc")
        )
        assert (ev.action, ev.tool_call_id, ev.tool_name, ev.is_success) == (
            "tool_result",
            "c1",
            "calc",
            True,
        )

    def test_tool_error_message_is_unsuccessful_result(self) -> None:
        ev = message_to_event(
            "s1", ContextMessage(role="tool", content="boom", tool_call_id="c1", is_error=True)
        )
        assert ev.is_success is False

    def test_seq_is_a_placeholder_and_timestamp_is_now(self) -> None:
        before = now_ms()
        ev = message_to_event("s1", ContextMessage(role="user", content="x"))
        after = now_ms()
        assert ev.seq == 0
        assert before <= ev.timestamp <= after
        assert abs(ev.timestamp - time.time() * 1000) < 60_000  # milliseconds, not seconds

    def test_unique_ids_per_call(self) -> None:
        msg = ContextMessage(role="user", content="same")
        ids = {message_to_event("s1", msg).id for _ in range(2000)}
        assert len(ids) == 2000
        assert all(ids)

    def test_new_event_id_is_unique(self) -> None:
        assert len({new_event_id() for _ in range(1000)}) == 1000

    def test_metadata_is_copied_not_aliased(self) -> None:
        meta = {"k": 1}
        ev = message_to_event("s1", ContextMessage(role="user", content="x", metadata=meta))
        assert ev.metadata == {"k": 1}
        assert ev.metadata is not meta

    def test_empty_metadata_is_kept_and_stored_as_braces(self) -> None:
        ev = message_to_event("s1", ContextMessage(role="user", content="x", metadata={}))
        assert ev.metadata == {}
        assert dehydrate_event(ev)["metadata"] == "{}"


MESSAGES = [
    ContextMessage(role="system", content="Be brief."),
    ContextMessage(role="user", content="What is 6*7? ü", images=["data:image/png;base64,AA"]),
    ContextMessage(role="assistant", content="", tool_calls=[ToolCall("c1", "calc", {"e": "6*7"})],
                   reasoning="use the tool"),
    ContextMessage(role="tool", content="42", tool_call_id="c1", name="calc"),
    ContextMessage(role="tool", content="err", tool_call_id="c2", name="calc", is_error=True),
    ContextMessage(role="assistant", content="42.", metadata={"finish": "stop"}),
]  # fmt: skip


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.role)
def test_message_event_row_event_message_round_trip(message: ContextMessage) -> None:
    ev = message_to_event("s1", message)
    back = hydrate_event(dehydrate_event(ev))
    assert back == ev
    assert event_to_message(back) == message


def test_new_event_ids_are_distinct_time_ordered_uuid7_strings() -> None:
    before = time.time_ns() // 1_000_000
    ids = new_event_ids(500) + [new_event_id() for _ in range(10)]
    after = time.time_ns() // 1_000_000
    assert len(set(ids)) == len(ids)
    for value in ids:
        parsed = uuid.UUID(value)
        assert str(parsed) == value  # the canonical lowercase 8-4-4-4-12 form
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
        # The leading 48 bits are the creation time in ms: the id index grows at its end.
        assert before <= parsed.int >> 80 <= after
    # An id made in a later millisecond sorts after every earlier one.
    while time.time_ns() // 1_000_000 <= after:
        pass  # spin to the next millisecond (well under 1 ms)
    assert new_event_id() > max(ids)
    assert new_event_ids(0) == []


def test_new_event_ids_use_all_74_random_bits() -> None:
    # rand_a (12 bits) and rand_b (62 bits) each vary bit by bit: no random bit of an id
    # is stuck, and the version and variant bits are.
    values = [uuid.UUID(v).int for v in new_event_ids(400)]
    random_mask = (0xFFF << 64) | ((1 << 62) - 1)
    varying = 0
    for v in values:
        varying |= v ^ values[0]
    assert varying & random_mask == random_mask
    assert {v >> 76 & 0xF for v in values} == {7} and {v >> 62 & 0b11 for v in values} == {2}


def test_arguments_nested_beyond_the_decoder_are_kept_as_text() -> None:
    """A stored history renders whatever it holds: arguments too deep to decode stay
    the text they are (they were refused with -32602 on write since)."""
    from session_server.values.codec import arguments_object

    deep = "[" * 100_000 + "]" * 100_000
    assert arguments_object(deep) == {"_raw": deep}
