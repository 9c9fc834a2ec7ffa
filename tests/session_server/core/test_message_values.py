"""``check_messages`` answers exactly as the round trip it shortcuts (property-tested).

The reference is what ``prepare_turn`` did before: ``parse_message(msgspec.to_builtins(m),
f"messages[{i}]")``. Messages are drawn with plain and unusual field values alike (wrong
types, subclasses, tuples, non-string keys, huge ints, NaN, deep or large values), so both
the direct copy and its fallback are exercised.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from session_server.core.message_values import check_messages
from session_server.values.events import ContextMessage, ToolCall
from session_server.values.validation import parse_message


class _Text(str):
    pass


class _Number(int):
    pass


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
)
odd_scalars = st.one_of(
    st.builds(_Text, st.text(max_size=3)),
    st.builds(_Number, st.integers(0, 9)),
    st.binary(max_size=3),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=3), inner, max_size=4),
    ),
    max_leaves=12,
)
odd_values = st.recursive(
    st.one_of(scalars, odd_scalars),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner),
        st.dictionaries(st.one_of(st.text(max_size=2), st.integers(0, 3)), inner, max_size=3),
    ),
    max_leaves=8,
)
values = st.one_of(json_values, odd_values)
texts = st.one_of(st.none(), st.text(max_size=4), st.just(""), odd_scalars, st.integers(0, 2))
calls = st.builds(
    ToolCall,
    id=st.one_of(st.text(max_size=3), st.just(""), st.integers(0, 2)),
    name=st.one_of(st.text(max_size=3), st.just("")),
    arguments=values,
)


@st.composite
def plain_messages(draw: st.DrawFn, metadata_values: Any = json_values) -> ContextMessage:
    """Valid messages (with JSON values only: the direct copy's case, unless
    ``metadata_values`` says otherwise)."""
    role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    word = st.text(min_size=1, max_size=4)
    maybe = st.one_of(st.none(), word)
    tool_calls = None
    if role == "assistant":
        plain_call = st.builds(ToolCall, id=word, name=word, arguments=json_values)
        tool_calls = draw(st.one_of(st.none(), st.lists(plain_call, max_size=2)))
    return ContextMessage(
        role=role,  # type: ignore[arg-type]
        content=draw(st.text(max_size=6)),
        name=draw(maybe),
        tool_call_id=draw(word) if role == "tool" else draw(maybe),
        tool_calls=tool_calls,
        metadata=draw(st.one_of(st.none(), st.dictionaries(st.text(max_size=3), metadata_values))),
        reasoning=draw(maybe),
        images=draw(st.one_of(st.none(), st.lists(st.text(max_size=3), max_size=2))),
        is_error=draw(st.booleans()),
        compacted=draw(st.booleans()),
        synthetic=draw(st.booleans()),
    )


odd_messages = st.builds(
    ContextMessage,
    role=st.one_of(st.sampled_from(["system", "user", "assistant", "tool"]), st.just("x")),
    content=st.one_of(st.text(max_size=6), st.just(""), st.none(), st.builds(_Text)),
    name=texts,
    tool_call_id=texts,
    tool_calls=st.one_of(st.none(), st.lists(st.one_of(calls, st.just(None)), max_size=3)),
    metadata=st.one_of(
        st.none(), st.dictionaries(st.one_of(st.text(max_size=3), st.integers(0, 2)), values)
    ),
    reasoning=texts,
    images=st.one_of(st.none(), st.lists(st.one_of(st.text(max_size=3), st.integers(0, 1)))),
    is_error=st.one_of(st.booleans(), st.integers(0, 1)),
    compacted=st.booleans(),
    synthetic=st.one_of(st.booleans(), st.none()),
)


@st.composite
def one_odd_field(draw: st.DrawFn) -> ContextMessage:
    """A valid message with one field set to any value at all."""
    message = draw(plain_messages())
    field = draw(st.sampled_from(ContextMessage.__struct_fields__))
    odd = st.one_of(
        texts,
        values,
        st.lists(st.one_of(calls, texts), max_size=2),
        st.dictionaries(st.one_of(st.text(max_size=2), st.integers(0, 2)), values, max_size=2),
    )
    return msgspec.structs.replace(message, **{field: draw(odd)})


# Mostly plain messages (the direct copy), some with odd values the round trip accepts
# or refuses (the fallback).
messages = st.one_of(
    plain_messages(), plain_messages(), plain_messages(odd_values), one_odd_field(), odd_messages
)


def outcome(call: Any) -> tuple[str, str, Any]:
    try:
        return ("ok", repr(call()), None)
    except Exception as exc:
        return (type(exc).__name__, str(exc), getattr(exc, "data", None))


def containers(value: Any) -> list[Any]:
    """Every list and dict inside a message's fields."""
    found: list[Any] = []

    def walk(v: Any) -> None:
        if isinstance(v, list | dict):
            found.append(v)
            for item in v.values() if isinstance(v, dict) else v:
                walk(item)
        elif isinstance(v, ToolCall):
            walk(v.arguments)

    for field in value.__struct_fields__:
        walk(getattr(value, field))
    return found


def same_as_round_trip(batch: list[ContextMessage]) -> tuple[str, str, Any]:
    def reference() -> list[ContextMessage]:
        return [
            parse_message(msgspec.to_builtins(m), f"messages[{i}]") for i, m in enumerate(batch)
        ]

    expected = outcome(reference)
    assert outcome(lambda: check_messages(batch)) == expected
    return expected


@settings(max_examples=300, deadline=None)
@given(st.lists(messages, min_size=1, max_size=3))
def test_check_messages_is_the_round_trip(batch: list[ContextMessage]) -> None:
    expected = same_as_round_trip(batch)
    if expected[0] == "ok":
        # Fresh containers: a caller changing its message afterwards changes nothing stored.
        given_ids = {id(c) for m in batch for c in containers(m)}
        assert not any(id(c) in given_ids for m in check_messages(batch) for c in containers(m))


def test_plain_messages_take_the_direct_copy_and_refusals_name_the_field() -> None:
    call = ToolCall("c1", "f", {"q": [1, {"a": None}]})
    batch = [
        ContextMessage(role="user", content="hi", images=["u"], metadata={"k": {"n": 1.5}}),
        ContextMessage(role="assistant", content="", tool_calls=[call]),
        ContextMessage(role="tool", content="42", tool_call_id="c1", name="f"),
    ]
    checked = check_messages(batch)
    assert checked == batch
    assert checked[1].tool_calls is not None and checked[1].tool_calls[0].arguments is not (
        call.arguments
    )
    bad = [batch[0], ContextMessage(role="tool", content="x")]
    assert outcome(lambda: check_messages(bad)) == (
        "InvalidParamsError",
        "messages[1].tool_call_id: required for role 'tool'",
        {"field": "messages[1].tool_call_id"},
    )


def test_keys_and_values_the_round_trip_treats_apart() -> None:
    def user(**fields: Any) -> list[ContextMessage]:
        return [ContextMessage(role="user", content="x", **fields)]

    assert same_as_round_trip(user(metadata={0: "a"}))[0] == "InvalidParamsError"
    assert same_as_round_trip(user(metadata={"a": {0: "b"}}))[0] == "ok"  # nested: any key
    assert same_as_round_trip(user(metadata={"a": (1, 2)}))[0] == "ok"
    assert same_as_round_trip(user(metadata={"a": float("nan"), "b": 2**70}))[0] == "ok"
    assert same_as_round_trip(user(metadata={"a": _Text("t")}))[0] == "TypeError"
    deep: Any = 1
    for _ in range(20):  # deeper than the direct copy goes: the round trip takes it
        deep = [deep]
    assert same_as_round_trip(user(metadata={"a": deep}))[0] == "ok"
    assert same_as_round_trip(user(images=["u", 1]))[0] == "InvalidParamsError"
    assert same_as_round_trip(user(is_error=1))[0] == "InvalidParamsError"
