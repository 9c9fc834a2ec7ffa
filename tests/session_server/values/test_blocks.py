"""Memory blocks as values: bounds, the usage header, rendering, the state at a seq."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_server.values.blocks import (
    BlockRevision,
    BlockSet,
    block_at_seq,
    check_label,
    check_max_tokens,
    check_value_tokens,
    render_blocks,
    usage_header,
)
from session_server.values.errors import InvalidParamsError


def rev(
    label: str,
    value: str = "v",
    *,
    session: str | None = None,
    revision: int = 1,
    tokens: int = 1,
    max_tokens: int = 100,
    description: str = "",
    session_seq: int = 0,
) -> BlockRevision:
    return BlockRevision(
        label=label,
        session_id=session,
        revision=revision,
        value=value,
        description=description,
        max_tokens=max_tokens,
        tokens=tokens,
        author="client",
        session_seq=session_seq,
    )


def test_usage_header_has_the_documented_shape() -> None:
    assert (
        usage_header(rev("human", tokens=495, max_tokens=1100)) == "[human · 45% of 1,100 tokens]"
    )
    assert usage_header(rev("x", tokens=0, max_tokens=5)) == "[x · 0% of 5 tokens]"
    assert usage_header(rev("x", tokens=5, max_tokens=5)) == "[x · 100% of 5 tokens]"


def test_render_orders_agent_then_session_by_label() -> None:
    blocks = BlockSet(
        (rev("zeta", "Z"), rev("alpha", "A", description="first")),
        (rev("beta", "B", session="s"),),
    )
    text = render_blocks(blocks)
    assert text.startswith("<memory_blocks>\n") and text.endswith("\n</memory_blocks>")
    assert text.index("[alpha") < text.index("[zeta") < text.index("[beta")
    assert "[alpha · 1% of 100 tokens]\n(first)\nA" in text
    assert "Session blocks:" in text and "Agent blocks" in text
    assert render_blocks(BlockSet()) == ""
    assert render_blocks(blocks, pin=[]) == ""
    pinned = render_blocks(blocks, pin=["beta"])
    assert "[beta" in pinned and "alpha" not in pinned and "Agent blocks" not in pinned


labels = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)


@given(st.lists(st.tuples(labels, st.text(max_size=40)), max_size=8, unique_by=lambda t: t[0]))
def test_render_depends_on_the_blocks_not_their_order(items: list[tuple[str, str]]) -> None:
    blocks = [rev(label, value) for label, value in items]
    forward = render_blocks(BlockSet(tuple(blocks)))
    backward = render_blocks(BlockSet(tuple(reversed(blocks))))
    assert forward == backward
    for label, value in items:
        assert f"[{label} ·" in forward and value in forward


def test_bounds_name_their_field() -> None:
    assert check_label("user.profile-2_x") == "user.profile-2_x"
    for bad in ("", " x", "x y", "_x", "x" * 65, "é"):
        with pytest.raises(InvalidParamsError) as exc:
            check_label(bad)
        assert exc.value.data == {"field": "label"}
    with pytest.raises(InvalidParamsError) as exc:
        check_max_tokens(0)
    assert exc.value.data == {"field": "max_tokens"}
    with pytest.raises(InvalidParamsError) as exc:
        check_value_tokens(11, 10)
    assert exc.value.data == {"field": "value", "tokens": 11, "max_tokens": 10}
    check_value_tokens(10, 10)


def test_block_at_seq_is_the_latest_revision_written_by_then() -> None:
    revs = [
        rev("t", "one", session="s", revision=1, session_seq=2),
        rev("t", "two", session="s", revision=2, session_seq=2),
        rev("t", "three", session="s", revision=3, session_seq=6),
    ]
    assert block_at_seq(revs, 1) is None
    found = block_at_seq(revs, 5)
    assert found is not None and found.value == "two"
    found = block_at_seq(revs, 6)
    assert found is not None and found.value == "three"
