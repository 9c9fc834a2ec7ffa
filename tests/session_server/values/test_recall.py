"""The recall rules (pure): what an event indexes, the query builder, in_context."""

from __future__ import annotations

import sqlite3

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from session_server.storage.recall_shards import TOKENIZE
from session_server.values.recall import (
    MAX_INDEXED_CHARS,
    MAX_QUERY_TERMS,
    clip,
    event_in_context,
    fts_query,
    indexed_text,
    segment,
    unsegment,
)
from session_server.values.records import CompactionRecord


def _fts() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute(f"CREATE VIRTUAL TABLE events_fts USING fts5(text, {TOKENIZE})")  # a shard's
    conn.execute(
        "INSERT INTO events_fts(rowid, text) VALUES (1, ?)",
        (segment('Ünïcode "quoted" text AND OR NOT 東京 🎉 x*y col:z'),),
    )
    return conn


_CONN = _fts()


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=200))
def test_any_text_gives_a_query_fts5_accepts(text: str) -> None:
    expr = fts_query(text)
    if expr is not None:
        _CONN.execute("SELECT rowid FROM events_fts WHERE events_fts MATCH ?", (expr,)).fetchall()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ['"', "(", ")", "*", ":", "^", "AND", "OR", "NOT", "NEAR", "-", "+", "{", "}", "x", " "]
        ),
        max_size=40,
    )
)
def test_fts5_syntax_characters_never_reach_fts5_as_syntax(parts: list[str]) -> None:
    expr = fts_query("".join(parts))
    if expr is not None:
        _CONN.execute("SELECT rowid FROM events_fts WHERE events_fts MATCH ?", (expr,)).fetchall()


def test_phrases_stay_phrases_and_words_are_quoted() -> None:
    assert fts_query('find "exact words" here') == '"exact words" "find" "here"'
    assert fts_query("a OR b") == '"a" "OR" "b"'
    assert fts_query('say "hi') == '"say" "hi"'
    assert fts_query("東京") == '"東 京"'
    assert fts_query("  ") is None
    assert fts_query("!!! ---") is None
    assert fts_query(" ".join(f"w{i}" for i in range(100))).count('"') == 2 * MAX_QUERY_TERMS


def test_indexed_text_of_each_action() -> None:
    meta = msgspec.json.encode(
        {
            "toolCalls": [{"id": "c", "name": "lookup", "arguments": {"q": "zebra"}}],
            "reasoning": "hmm",
        }
    ).decode()
    text = indexed_text("tool_call_request", "", meta)
    assert text is not None and "lookup" in text and "zebra" in text and "hmm" in text
    assert "search_docs" in (indexed_text("tool_result", "r", '{"toolName":"search_docs"}') or "")
    assert indexed_text("compaction", "x", None) is None
    assert indexed_text("user_message", None, "not json") == ""
    assert indexed_text(None, "x", None) is None
    assert len(indexed_text("user_message", "a" * (MAX_INDEXED_CHARS * 2), None) or "") == (
        MAX_INDEXED_CHARS
    )


@given(st.text(max_size=100))
def test_indexed_text_never_raises(content: str) -> None:
    indexed_text("agent_message", content, content)


def test_segment_and_unsegment() -> None:
    assert segment("ab東京cd") == "ab 東  京 cd"
    assert unsegment("«東 京» タ ワ ー") == "«東京» タワー"


def _record(data: dict[str, object]) -> CompactionRecord:
    return CompactionRecord.decode(data)


def test_in_context() -> None:
    assert event_in_context("user_message", 1, None)
    summary = _record(
        {
            "strategy": "summarize",
            "episodic": [],
            "semantic": [],
            "tail_start_seq": 10,
            "tail_start_turn": 3,
        }
    )
    assert not event_in_context("user_message", 9, summary)
    assert event_in_context("user_message", 10, summary)
    compact = _record({"strategy": "compact", "boundary_seq": 10, "params": {}})
    assert not event_in_context("tool_result", 5, compact, tool_name="t")
    assert event_in_context("user_message", 5, compact)
    assert event_in_context("tool_call_request", 5, compact)
    clear = _record(
        {
            "strategy": "compact",
            "boundary_seq": 10,
            "params": {"compact_clear_tool_inputs": True, "compact_exclude_tools": ["keep"]},
        }
    )
    assert not event_in_context("tool_call_request", 5, clear, tool_name="t")
    assert event_in_context("tool_result", 5, clear, tool_name="keep")
    only = _record(
        {"strategy": "compact", "boundary_seq": 10, "params": {"compact_include_tools": ["big"]}}
    )
    assert event_in_context("tool_result", 5, only, tool_name="small")
    assert not event_in_context("tool_result", 5, only, tool_name="big")


def test_clip() -> None:
    assert clip("short", 10) == "short"
    clipped = clip("x" * 100, 40)
    assert len(clipped) <= 40 and clipped.endswith("more chars]")
