"""WorkingContext and build_working_context (pure: no loop, no database)."""

from __future__ import annotations

import copy
import inspect

from session_server.values.codec import event_to_message
from session_server.values.context import WorkingContext, build_working_context
from session_server.values.events import ContextMessage, SessionEvent, ToolCall


def ev(seq: int, action: str = "user_message", content: str = "", **kw: object) -> SessionEvent:
    return SessionEvent(id=f"e{seq}", session_id="s", seq=seq, action=action, content=content, **kw)  # type: ignore[arg-type]


HISTORY = [
    ev(1, "system_instruction", "Stored instruction"),
    ev(2, "user_message", "Weather in Paris?"),
    ev(3, "tool_call_request", tool_calls=[ToolCall("c1", "weather", {"city": "Paris"})]),
    ev(4, "tool_result", "21C", tool_call_id="c1", tool_name="weather", is_success=True),
    ev(5, "agent_message", "It is 21C."),
]


class TestWorkingContext:
    def test_defaults_are_empty(self) -> None:
        ctx = WorkingContext()
        assert ctx.system_instructions == []
        assert ctx.messages == []
        assert ctx.metadata == {}
        assert ctx.base_seq == 0
        assert ctx.token_count is None
        assert ctx.get_new_messages() == []

    def test_no_shared_mutable_defaults(self) -> None:
        a, b = WorkingContext(), WorkingContext()
        a.add_message(ContextMessage(role="user", content="only in a"))
        a.system_instructions.append("only in a")
        a.metadata["k"] = 1
        assert b.messages == []
        assert b.system_instructions == []
        assert b.metadata == {}
        assert WorkingContext().messages == []

    def test_signature_defaults_are_none(self) -> None:
        params = inspect.signature(WorkingContext).parameters
        for name in ("system_instructions", "messages", "metadata"):
            assert params[name].default is None

    def test_arguments_are_copied(self) -> None:
        instructions = ["Be brief."]
        messages = [ContextMessage(role="user", content="hi")]
        metadata = {"k": 1}
        ctx = WorkingContext(instructions, messages, metadata)
        ctx.add_message(ContextMessage(role="assistant", content="yo"))
        ctx.system_instructions.append("more")
        ctx.metadata["j"] = 2
        assert instructions == ["Be brief."]
        assert len(messages) == 1
        assert metadata == {"k": 1}

    def test_get_new_messages_returns_only_messages_added_after_construction(self) -> None:
        history = [
            ContextMessage(role="user", content="old"),
            ContextMessage(role="assistant", content="old"),
        ]
        ctx = WorkingContext(["sys"], history)
        assert ctx.get_new_messages() == []
        new1 = ContextMessage(role="user", content="new")
        new2 = ContextMessage(role="assistant", content="reply")
        ctx.add_message(new1)
        ctx.add_messages([new2])
        assert ctx.get_new_messages() == [new1, new2]
        assert ctx.messages == [*history, new1, new2]

    def test_get_new_messages_is_a_copy(self) -> None:
        ctx = WorkingContext()
        ctx.add_message(ContextMessage(role="user", content="x"))
        ctx.get_new_messages().clear()
        assert len(ctx.get_new_messages()) == 1

    def test_system_instructions_are_kept_apart_from_messages(self) -> None:
        ctx = WorkingContext(["A", "B"], [ContextMessage(role="user", content="hi")])
        assert ctx.system_instructions == ["A", "B"]
        assert all(m.role != "system" for m in ctx.messages)
        assert ctx.get_new_messages() == []

    def test_a_single_string_is_one_instruction(self) -> None:
        assert WorkingContext("Be brief.").system_instructions == ["Be brief."]

    def test_instructions_from_a_generator(self) -> None:
        assert WorkingContext(s for s in ("a", "b")).system_instructions == ["a", "b"]

    def test_base_seq_and_token_count(self) -> None:
        ctx = WorkingContext(base_seq=12, token_count=345)
        assert (ctx.base_seq, ctx.token_count) == (12, 345)

    def test_repr_is_short(self) -> None:
        ctx = WorkingContext(messages=[ContextMessage(role="user", content="x")], base_seq=3)
        ctx.add_message(ContextMessage(role="assistant", content="y"))
        assert repr(ctx) == "WorkingContext(base_seq=3, messages=2, new=1)"


class TestBuildWorkingContext:
    def test_maps_events_in_order_with_the_default_mapper(self) -> None:
        ctx = build_working_context(HISTORY)
        assert ctx.messages == [event_to_message(e) for e in HISTORY]
        assert [m.role for m in ctx.messages] == [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
        assert ctx.get_new_messages() == []

    def test_system_instructions_stay_separate(self) -> None:
        ctx = build_working_context(HISTORY, system_instructions=["You are helpful."])
        assert ctx.system_instructions == ["You are helpful."]
        # The stored system_instruction event is history, not one of the instructions.
        assert ctx.messages[0] == ContextMessage(role="system", content="Stored instruction")
        assert "You are helpful." not in [m.content for m in ctx.messages]

    def test_base_seq_defaults_to_the_highest_seq(self) -> None:
        assert build_working_context(HISTORY).base_seq == 5
        assert build_working_context(list(reversed(HISTORY))).base_seq == 5

    def test_base_seq_of_no_events_is_zero(self) -> None:
        ctx = build_working_context([])
        assert ctx.base_seq == 0
        assert ctx.messages == []

    def test_explicit_base_seq_wins(self) -> None:
        assert build_working_context(HISTORY, base_seq=40).base_seq == 40
        assert build_working_context([], base_seq=7).base_seq == 7

    def test_custom_mapper_may_skip_events(self) -> None:
        def no_tools(event: SessionEvent) -> ContextMessage | None:
            if event.action in ("tool_call_request", "tool_result"):
                return None
            return ContextMessage(role="user", content=f"#{event.seq}")

        ctx = build_working_context(HISTORY, event_to_message=no_tools)
        assert [m.content for m in ctx.messages] == ["#1", "#2", "#5"]
        # Skipped events still count for base_seq.
        assert ctx.base_seq == 5

    def test_mapper_that_skips_everything(self) -> None:
        ctx = build_working_context(HISTORY, event_to_message=lambda e: None)
        assert ctx.messages == []
        assert ctx.base_seq == 5

    def test_new_messages_after_build(self) -> None:
        ctx = build_working_context(HISTORY, system_instructions=["sys"])
        msg = ContextMessage(role="user", content="And tomorrow?")
        ctx.add_message(msg)
        assert ctx.get_new_messages() == [msg]
        assert len(ctx.messages) == len(HISTORY) + 1

    def test_metadata_and_token_count_are_passed_on(self) -> None:
        meta = {"strategy": "compact"}
        ctx = build_working_context(HISTORY, metadata=meta, token_count=99)
        assert ctx.metadata == meta and ctx.metadata is not meta
        assert ctx.token_count == 99

    def test_a_single_string_is_one_instruction(self) -> None:
        assert build_working_context([], system_instructions="Be brief.").system_instructions == [
            "Be brief."
        ]

    def test_does_not_mutate_the_events(self) -> None:
        events = list(HISTORY)
        snapshot = copy.deepcopy(events)
        ctx = build_working_context(events)
        ctx.add_message(ContextMessage(role="user", content="x"))
        assert events == snapshot
