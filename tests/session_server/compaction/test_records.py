from __future__ import annotations

from session_server.compaction.records import latest_record, make_compaction_event
from session_server.values.codec import dehydrate_event, hydrate_event
from session_server.values.records import record_memory

from .sessions import SessionLog


def test_compaction_event_round_trips_through_the_codec() -> None:
    record = {"strategy": "compact", "boundary_seq": 9, "params": {"compact_keep": 2}}
    ev = make_compaction_event("s1", record, 8, timestamp=42)
    assert ev.action == "compaction" and ev.session_id == "s1" and ev.seq == 0
    assert ev.compacted_event_count == 8 and ev.compaction == record
    assert ev.timestamp == 42 and ev.id
    assert "8 events before seq 9" in ev.content
    back = hydrate_event(dehydrate_event(ev))
    assert back.compaction == record and back.compacted_event_count == 8
    assert make_compaction_event("s1", record, 1).id != ev.id


def test_latest_record_is_the_last_compaction_event() -> None:
    log = SessionLog()
    assert latest_record(log.events) is None
    log.user("a")
    log.compaction({"strategy": "compact", "n": 1})
    log.user("b")
    log.compaction({"strategy": "compact", "n": 2})
    log.user("c")
    assert latest_record(log.events) == {"strategy": "compact", "n": 2}


def test_record_memory() -> None:
    assert record_memory(None) is None
    assert record_memory({"strategy": "compact", "boundary_seq": 1}) is None
    mem = {"episodic": [], "semantic": [], "tail_start_seq": 4, "tail_start_turn": 2}
    assert record_memory({"strategy": "summarize", **mem}) == mem
    assert record_memory({"strategy": "compact", "memory": mem}) == mem
