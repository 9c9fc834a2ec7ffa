"""Repair of the tool pairing in a built context: each rule, on messages."""

from __future__ import annotations

from session_server.adapters.checks import check_tool_pairing
from session_server.values.events import ContextMessage, ToolCall
from session_server.values.repair import missing_result_text, repair_tool_pairing


def user(text: str = "q") -> ContextMessage:
    return ContextMessage(role="user", content=text)


def calls(*ids: str, text: str = "") -> ContextMessage:
    return ContextMessage(
        role="assistant", content=text, tool_calls=[ToolCall(id=i, name="t") for i in ids]
    )


def result(call_id: str, text: str = "r") -> ContextMessage:
    return ContextMessage(role="tool", content=text, tool_call_id=call_id, name="t")


def shape(messages: list[ContextMessage]) -> list[str]:
    """``u``, ``a``, ``s``, ``call:ID,ID``, ``res:ID`` / ``syn:ID`` per message."""
    out = []
    for m in messages:
        if m.tool_calls:
            out.append("call:" + ",".join(c.id for c in m.tool_calls))
        elif m.role == "tool":
            out.append(("syn:" if m.synthetic else "res:") + str(m.tool_call_id))
        else:
            out.append(m.role[0])
    return out


def repaired(messages: list[ContextMessage]) -> list[ContextMessage]:
    out = repair_tool_pairing(messages)
    check_tool_pairing(out)  # every repaired context is one every checked adapter takes
    assert repair_tool_pairing(out) == out  # and repairing again changes nothing
    return out


def test_a_well_formed_context_is_returned_as_the_same_objects() -> None:
    messages = [user(), calls("c1", "c2"), result("c2"), result("c1"), user(), calls("c3")]
    out = repaired(messages)
    assert all(a is b for a, b in zip(out, messages, strict=True))


def test_an_unanswered_call_followed_by_a_user_turn_gets_a_synthetic_error_result() -> None:
    out = repaired([user(), calls("c9"), user("next")])
    assert shape(out) == ["u", "call:c9", "syn:c9", "u"]
    synthetic = out[2]
    assert synthetic.content == "⟦missing: no result was recorded for t (call_id=c9)⟧"
    assert synthetic.content == missing_result_text("t", "c9")
    assert synthetic.synthetic and synthetic.is_error and synthetic.name == "t"


def test_an_unanswered_call_in_the_last_assistant_message_stays_pending() -> None:
    assert shape(repaired([user(), calls("c1", "c2"), result("c2")])) == [
        "u",
        "call:c1,c2",
        "res:c2",
    ]


def test_a_late_result_is_placed_with_its_call() -> None:
    out = repaired([user(), calls("c1"), user("more"), ContextMessage(role="system"), result("c1")])
    assert shape(out) == ["u", "call:c1", "res:c1", "u", "s"]


def test_an_orphan_or_second_result_is_left_out() -> None:
    out = repaired([user(), result("nowhere"), calls("c1"), result("c1"), result("c1", "again")])
    assert shape(out) == ["u", "call:c1", "res:c1"]
    assert out[2].content == "r"


def test_a_result_stored_before_its_call_moves_after_it() -> None:
    assert shape(repaired([user(), result("c1"), calls("c1"), user()])) == [
        "u",
        "call:c1",
        "res:c1",
        "u",
    ]


def test_a_result_before_its_call_answers_only_a_call_of_its_own_turn() -> None:
    # Turn 1's result (its call cut off), turn 2 reusing the id and crashed: the result
    # is not turn 2's answer; turn 2's call gets a synthetic one.
    messages = [result("call_1", "turn 1"), user("q2"), calls("call_1"), user("q3")]
    out = repaired(messages)
    assert shape(out) == ["u", "call:call_1", "syn:call_1", "u"]
    # The stored turns decide when given: a result of turn 2 before turn 2's call
    # answers it...
    no_user = [messages[0], *messages[2:]]
    assert shape(repair_tool_pairing(no_user, turns=[2, 2, 3])) == [
        "call:call_1",
        "res:call_1",
        "u",
    ]
    # ...a result of turn 1 next to it (no user message between, as in a window) does not.
    apart = repair_tool_pairing(no_user, turns=[1, 2, 3])
    assert shape(apart) == ["call:call_1", "syn:call_1", "u"]


def test_a_reused_call_id_is_made_unique_and_its_results_follow() -> None:
    messages = [
        user(),
        calls("call_1"),
        result("call_1", "first"),
        user(),
        calls("call_1"),
        result("call_1", "second"),
        user(),
        calls("call_1", "call_1_2"),
    ]
    out = repaired(messages)
    assert shape(out) == [
        "u",
        "call:call_1",
        "res:call_1",
        "u",
        "call:call_1_2",
        "res:call_1_2",
        "u",
        "call:call_1_3,call_1_2_2",
    ]
    assert [m.content for m in out if m.role == "tool"] == ["first", "second"]
    # Deterministic, and a prefix of the log builds to a prefix of the messages.
    assert repair_tool_pairing(messages) == out
    assert repair_tool_pairing(messages[:6]) == out[:6]


def test_a_crashed_call_whose_id_is_reused_later_gets_its_own_synthetic_result() -> None:
    out = repaired([user(), calls("c1"), user(), calls("c1"), result("c1")])
    assert shape(out) == ["u", "call:c1", "syn:c1", "u", "call:c1_2", "res:c1_2"]


def test_a_result_may_name_a_call_by_its_repaired_id() -> None:
    out = repaired([user(), calls("c1"), result("c1"), user(), calls("c1"), result("c1_2")])
    assert shape(out) == ["u", "call:c1", "res:c1", "u", "call:c1_2", "res:c1_2"]


def test_consecutive_call_messages_are_one_group_with_results_after_them() -> None:
    # The Responses shape: one function_call item per assistant message, outputs after.
    out = repaired([user(), calls("a", text="Checking."), calls("b"), result("b"), user()])
    assert shape(out) == ["u", "call:a", "call:b", "res:b", "syn:a", "u"]
    assert shape(repaired([user(), calls("a"), calls("b")])) == ["u", "call:a", "call:b"]


def test_calls_separated_by_their_results_are_separate_groups() -> None:
    messages = [user(), calls("a"), result("a"), calls("b"), result("b"), user()]
    assert repaired(messages) == messages


def test_a_result_that_answers_nothing_does_not_split_a_group() -> None:
    out = repaired([user(), calls("a"), result("ghost"), calls("b"), result("b")])
    assert shape(out) == ["u", "call:a", "call:b", "res:b"]  # a stays pending, with b
