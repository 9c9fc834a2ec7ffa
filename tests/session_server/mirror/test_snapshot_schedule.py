"""``SnapshotSchedule``: which end-of-turn snapshots render when (pure, times given)."""

from __future__ import annotations

from session_server.mirror.snapshot_schedule import SnapshotSchedule
from session_server.values.plans import SnapshotDue


def due(sid: str, tag: str = "") -> SnapshotDue:
    return SnapshotDue(sid, [tag] if tag else [])


def test_a_first_snapshot_is_ready_at_once_and_the_latest_due_one_counts() -> None:
    schedule = SnapshotSchedule(interval=1.0, read_interval=5.0)
    schedule.want(due("a", "old"))
    schedule.want(due("a", "new"))
    ready, first = schedule.take(now=10.0)
    assert ready == {"a": due("a", "new")} and first is None
    assert not schedule.holding


def test_a_rendered_session_waits_its_interval_and_a_read_one_the_longer_one() -> None:
    schedule = SnapshotSchedule(interval=1.0, read_interval=5.0)
    schedule.rendered("cached", 10.0)
    schedule.rendered("read", 10.0, read=True)
    schedule.want(due("cached"))
    schedule.want(due("read"))
    assert schedule.take(now=10.5) == ({}, 11.0)  # both held; the first is due at 11
    assert schedule.holding
    assert schedule.take(now=11.0) == ({"cached": due("cached")}, 15.0)
    assert schedule.take(now=14.9) == ({}, 15.0)
    assert schedule.take(now=15.0) == ({"read": due("read")}, None)


def test_force_takes_every_waiting_one() -> None:
    schedule = SnapshotSchedule(interval=1.0, read_interval=5.0)
    schedule.rendered("a", 10.0, read=True)
    schedule.want(due("a"))
    assert schedule.take(now=10.1, force=True) == ({"a": due("a")}, None)


def test_a_failed_render_is_held_again_unless_a_newer_one_waits() -> None:
    schedule = SnapshotSchedule(interval=1.0, read_interval=5.0)
    schedule.rendered("a", 10.0, read=True)
    assert schedule.retry(due("a", "failed")) == 15.0
    schedule.want(due("a", "newer"))
    assert schedule.retry(due("a", "failed")) == 15.0
    assert schedule.take(now=15.0) == ({"a": due("a", "newer")}, None)
    assert schedule.retry(due("b")) == 0.0  # never rendered: due at once
    assert schedule.take(now=15.0) == ({"b": due("b")}, None)


def test_forget_and_drop_waiting() -> None:
    schedule = SnapshotSchedule(interval=1.0, read_interval=5.0)
    schedule.rendered("a", 10.0)
    schedule.want(due("a"))
    schedule.forget("a")  # deleted: its pace starts over, nothing waits
    assert not schedule.holding
    schedule.want(due("a"))
    assert schedule.take(now=10.1) == ({"a": due("a")}, None)
    schedule.rendered("b", 10.0)
    schedule.want(due("b"))
    schedule.drop_waiting()
    assert not schedule.holding and schedule.take(now=10.2) == ({}, None)
