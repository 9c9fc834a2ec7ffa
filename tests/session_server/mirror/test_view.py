"""Memory view transformers and snapshot index paging (pure)."""

from __future__ import annotations

from typing import Any

from session_server.mirror.view import (
    MemoryViewOptions,
    SnapshotSummary,
    build_conversation_view,
    build_memory_view,
    format_memory_view,
    group_by_agent,
    merge_raw_traces,
    page_snapshots,
    to_trace_event,
)


def t(kind: str, ts: float, turn: str, seq: int, **kw: Any) -> dict[str, Any]:
    return {
        "id": f"r{ts}",
        "ts": ts,
        "turn_id": turn,
        "seq": seq,
        "trace_type": kind,
        "content": kw.pop("content", ""),
        **kw,
    }


TRACES = [
    t("user", 1, "turn_0001", 1, content="hi", media={"images": [], "audio": [], "video": []}),
    t("tool_call", 2, "turn_0001", 2, tool_name="a", tool_call_id="c1", tool_args={"x": 1}),
    t("tool_call", 2, "turn_0001", 3, tool_name="b", tool_call_id="c2", tool_args={}),
    t("assistant", 2, "turn_0001", 4, content=""),
    t("tool_result", 3, "turn_0001", 5, tool_name="a", tool_call_id="c1", tool_result={"ok": 1}),
    t("tool_result", 4, "turn_0001", 6, tool_name="z", tool_call_id="c9", tool_error="no call"),
    t("tool_result", 5, "turn_0001", 7, tool_name="a", tool_call_id="c1", tool_result="again"),
    t("mystery", 6, "turn_0001", 8),
    t("assistant", 7, "turn_0001", 9, content="bye"),
]


def test_conversation_collapses_calls_and_flags_orphans_and_pending() -> None:
    conv = build_conversation_view(TRACES)
    kinds = [(e["kind"], e.get("role") or e.get("tool_name")) for e in conv]
    assert kinds == [
        ("message", "user"),
        ("tool_call", "a"),
        ("tool_call_pending", "b"),
        ("message", "assistant"),
        ("tool_result_orphan", "z"),
        ("tool_result_orphan", "a"),  # a second result for an answered call
        ("message", "assistant"),
    ]
    call = conv[1]
    assert call["tool_args"] == {"x": 1} and call["tool_result"] == {"ok": 1}
    assert call["tool_error"] is None and call["ts"] == 2.0 and call["turn_id"] == "turn_0001"
    assert conv[4]["tool_error"] == "no call" and conv[4]["tool_result"] is None
    assert conv[0]["content"] == "hi" and conv[0]["media"] == {
        "images": [],
        "audio": [],
        "video": [],
    }
    assert set(conv[0]) == {
        "kind",
        "role",
        "content",
        "tool_name",
        "tool_call_id",
        "tool_args",
        "tool_result",
        "tool_error",
        "media",
        "turn_id",
        "ts",
    }


def test_conversation_without_collapse_lists_calls_and_results() -> None:
    conv = build_conversation_view(TRACES, collapse_tools=False)
    assert [e["kind"] for e in conv] == [
        "message",
        "tool_call",
        "tool_call",
        "message",
        "tool_result",
        "tool_result",
        "tool_result",
        "message",
    ]
    assert conv[1]["tool_result"] is None and conv[4]["tool_result"] == {"ok": 1}


def test_merge_sorts_by_ts_turn_seq_and_limits_after_merge() -> None:
    active = [
        t("user", 5, "turn_0003", 1),
        t("assistant", 5, "turn_0002", 2),
        t("user", 9, "turn_0004", 1),
    ]
    archive = [
        t("user", 1, "turn_0001", 1),
        t("assistant", 5, "turn_0002", 1),
        {"trace_type": "user"},
    ]
    merged = merge_raw_traces(active, archive)
    assert [(m.get("turn_id"), m.get("seq")) for m in merged] == [
        (None, None),
        ("turn_0001", 1),
        ("turn_0002", 1),
        ("turn_0002", 2),
        ("turn_0003", 1),
        ("turn_0004", 1),
    ]
    assert [m["turn_id"] for m in merge_raw_traces(active, archive, limit=2)] == [
        "turn_0003",
        "turn_0004",
    ]
    assert merge_raw_traces(active, archive, limit=0) == []
    event = to_trace_event({"trace_type": "user", "ts": 3, "seq": True, "tool_args": "x"})
    assert (event["ts"], event["seq"], event["turn_id"], event["tool_args"]) == (3.0, 0, "", None)


def test_memory_view_options() -> None:
    snapshot = {
        "schema_version": 1,
        "agent_id": "a",
        "messages": [
            {"role": "system", "content": "s", "reasoning_content": None, "tool_payload": None},
            "junk",
        ],
    }
    view = build_memory_view(
        "a",
        snapshot=snapshot,
        episodic=[{"id": "ep"}],
        semantic=[{"id": "sem"}],
        raw_active=TRACES[4:],
        raw_archive=TRACES[:4],
        options=MemoryViewOptions(raw_trace_limit=3, conversation_limit=2),
    )
    assert list(view) == [
        "agent_id",
        "session_id",
        "working_context",
        "episodic",
        "semantic",
        "conversation",
        "raw_traces",
    ]
    assert view["working_context"] == [
        {"role": "system", "content": "s", "reasoning": None, "tool_payload": None, "ts": None}
    ]
    assert [r["seq"] for r in view["raw_traces"]] == [7, 8, 9]
    assert [c["kind"] for c in view["conversation"]] == ["tool_result_orphan", "message"]
    # without the archive the collapsed call is gone: its result is an orphan
    view = build_memory_view(
        "a",
        raw_active=TRACES[4:],
        raw_archive=TRACES[:4],
        options=MemoryViewOptions(
            include_archive=False,
            include_working_context=False,
            include_episodic=False,
            include_semantic=False,
        ),
    )
    assert view["working_context"] is None and view["episodic"] is None and view["semantic"] is None
    assert view["conversation"][0]["kind"] == "tool_result_orphan"
    assert len(view["raw_traces"]) == 5
    empty = build_memory_view(
        "a", options=MemoryViewOptions(include_conversation=False, include_raw_traces=False)
    )
    assert empty["conversation"] is None and empty["raw_traces"] is None
    assert empty["episodic"] == [] and empty["working_context"] is None
    text = format_memory_view(
        build_memory_view(
            "a", snapshot=snapshot, raw_active=TRACES, episodic=[{"id": "e1", "summary": "sum"}]
        )
    )
    assert "agent: a" in text and "== conversation (7) ==" in text and "e1: sum" in text


def summaries() -> list[SnapshotSummary]:
    return [
        SnapshotSummary("Worker_1", None, 100.0, has_raw_traces=True),
        SnapshotSummary("db manager_2", "s1", 300.0, has_working_context=True),
        SnapshotSummary("Worker_3", "s2", 200.0),
        SnapshotSummary("other", None, None),
    ]


def test_page_snapshots_newest_first_search_and_clamps() -> None:
    page = page_snapshots(summaries())
    assert [e["agent_id"] for e in page["entries"]] == [
        "db manager_2",
        "Worker_3",
        "Worker_1",
        "other",
    ]
    assert (page["total"], page["page"], page["page_size"], page["total_pages"]) == (4, 1, 50, 1)
    entry = page["entries"][0]
    assert entry["last_updated_at"] == "1970-01-01T00:05:00+00:00"
    assert entry["has_working_context"] is True and entry["session_id"] == "s1"
    found = page_snapshots(summaries(), search="worker")
    assert [e["agent_id"] for e in found["entries"]] == ["Worker_3", "Worker_1"]
    paged = page_snapshots(summaries(), page=2, page_size=3)
    assert [e["agent_id"] for e in paged["entries"]] == ["other"] and paged["total_pages"] == 2
    clamped = page_snapshots(summaries(), page=0, page_size=-5)
    assert (clamped["page"], clamped["page_size"], clamped["total_pages"]) == (1, 1, 4)
    assert len(clamped["entries"]) == 1
    past = page_snapshots(summaries(), page=9)
    assert past["entries"] == [] and past["total"] == 4
    none = page_snapshots(summaries(), search="nobody")
    assert (none["total"], none["total_pages"], none["entries"]) == (0, 0, [])


def test_group_by_agent_keeps_the_latest_folder_and_counts_them() -> None:
    folders = [
        *summaries(),
        SnapshotSummary("Worker_3", "s9", 500.0, has_episodic=True),
        SnapshotSummary("Worker_3", "s0", 50.0, has_raw_archive=True),
    ]
    grouped = {s.agent_id: s for s in group_by_agent(folders)}
    assert sorted(grouped) == ["Worker_1", "Worker_3", "db manager_2", "other"]
    worker = grouped["Worker_3"]
    assert (worker.session_id, worker.last_updated, worker.session_count) == ("s9", 500.0, 3)
    assert worker.has_episodic and worker.has_raw_archive and not worker.has_working_context
    page = page_snapshots(group_by_agent(folders), page_size=2)
    assert [e["agent_id"] for e in page["entries"]] == ["Worker_3", "db manager_2"]
    assert page["entries"][0]["session_count"] == 3 and page["total_pages"] == 2
    assert "session_count" not in page_snapshots(folders)["entries"][0]
