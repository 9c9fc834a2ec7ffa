"""The model's memory-block tools: definitions and the edits they plan (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_server.values.block_tools import (
    BLOCK_TOOLS,
    MAX_TOOL_TEXT_CHARS,
    BlockToolError,
    plan_block_edit,
)
from session_server.values.blocks import BlockRevision, BlockSet


def block(label: str, value: str, session: str | None = None) -> BlockRevision:
    return BlockRevision(
        label=label,
        session_id=session,
        revision=1,
        value=value,
        description="",
        max_tokens=100,
        tokens=1,
        author="client",
    )


def test_definitions_are_json_schemas_with_required_arguments() -> None:
    names = [t["name"] for t in BLOCK_TOOLS]
    assert names == ["memory_block_set", "memory_block_append", "memory_block_replace"]
    for tool in BLOCK_TOOLS:
        params = tool["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert set(params["required"]) == set(params["properties"])
        assert tool["description"]


def test_set_append_replace() -> None:
    blocks = BlockSet((block("persona", "agent value"),), (block("profile", "Name: Ada", "s"),))
    edit = plan_block_edit("memory_block_set", {"label": "profile", "value": "new"}, blocks)
    assert edit.value == "new" and edit.block.session_id == "s"
    edit = plan_block_edit(
        "memory_block_append", {"label": "profile", "text": "Likes: tea"}, blocks
    )
    assert edit.value == "Name: Ada\nLikes: tea"
    edit = plan_block_edit(
        "memory_block_replace", {"label": "persona", "old": "agent", "new": "the"}, blocks
    )
    assert edit.value == "the value" and edit.block.session_id is None
    empty = BlockSet((block("p", ""),))
    assert plan_block_edit("memory_block_append", {"label": "p", "text": "x"}, empty).value == "x"


def test_a_session_block_shadows_the_agent_block_of_its_label() -> None:
    blocks = BlockSet((block("notes", "agent"),), (block("notes", "session", "s"),))
    edit = plan_block_edit("memory_block_set", {"label": "notes", "value": "v"}, blocks)
    assert edit.block.session_id == "s"


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("memory_block_set", {"label": "ghost", "value": "x"}, "the blocks you can edit are 'a'"),
        ("memory_block_replace", {"label": "a", "old": "zzz", "new": "x"}, "does not occur"),
        ("memory_block_replace", {"label": "a", "old": "b", "new": "x"}, "occurs 2 times"),
        ("memory_block_replace", {"label": "a", "old": "", "new": "x"}, "must not be empty"),
        ("memory_block_append", {"label": "a"}, "argument 'text': required"),
        ("memory_block_set", {"label": "a", "value": 3}, "argument 'value': required, a string"),
        (
            "memory_block_set",
            {"label": "a", "value": "x", "extra": 1},
            "unknown argument(s) 'extra'",
        ),
        ("memory_block_delete", {"label": "a"}, "unknown tool"),
        ("memory_block_set", ["a"], "must be a JSON object"),
    ],
)
def test_errors_tell_the_model_what_to_do(name: str, arguments: object, message: str) -> None:
    with pytest.raises(BlockToolError) as exc:
        plan_block_edit(name, arguments, BlockSet((block("a", "b and b"),)))
    assert message in str(exc.value)


def test_no_blocks_at_all() -> None:
    with pytest.raises(BlockToolError, match="there are no memory blocks"):
        plan_block_edit("memory_block_set", {"label": "a", "value": "x"}, BlockSet())


@given(st.text(max_size=30), st.text(min_size=1, max_size=5), st.text(max_size=5))
def test_replace_changes_exactly_the_one_occurrence(prefix: str, old: str, new: str) -> None:
    value = prefix + old
    blocks = BlockSet((block("a", value),))
    arguments = {"label": "a", "old": old, "new": new}
    if value.count(old) != 1:
        with pytest.raises(BlockToolError):
            plan_block_edit("memory_block_replace", arguments, blocks)
        return
    edited = plan_block_edit("memory_block_replace", arguments, blocks).value
    assert edited == prefix + new


def test_an_edit_far_past_any_limit_is_refused_before_counting() -> None:
    blocks = BlockSet((block("a", "x" * MAX_TOOL_TEXT_CHARS),))
    with pytest.raises(BlockToolError, match="shorten it"):
        plan_block_edit("memory_block_append", {"label": "a", "text": "more"}, blocks)
