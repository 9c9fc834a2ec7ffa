"""values.retention: policies, expiry and what a sweep removes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_server.values.errors import InvalidParamsError
from session_server.values.retention import (
    DAY_MS,
    MAX_BATCH,
    MIN_BATCH,
    STEP_TARGET_MS,
    RetentionPolicy,
    SessionAge,
    effective_policy,
    expires_at,
    next_batch,
    parse_policy,
    plan_retention,
    policy_for,
    policy_json,
)

NOW = 1_000 * DAY_MS


def test_parse_and_json() -> None:
    policy = parse_policy({"max_age_days": 1.5, "max_sessions": 3})
    assert policy == RetentionPolicy(max_age_days=1.5, max_sessions=3)
    assert policy_json(policy) == {"max_age_days": 1.5, "max_sessions": 3}
    assert policy_json(RetentionPolicy()) is None


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"max_age_days": 0}, "policy.max_age_days"),
        ({"max_idle_days": "1"}, "policy.max_idle_days"),
        ({"max_idle_days": float("inf")}, "policy.max_idle_days"),
        ({"max_raw_events": 0}, "policy.max_raw_events"),
        ({"max_raw_events": 2.0}, "policy.max_raw_events"),
        ({"max_days": 1}, "policy.max_days"),
    ],
)
def test_bad_policies_name_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidParamsError) as info:
        parse_policy(data)
    assert info.value.data == {"field": field}


def test_max_sessions_is_an_agent_limit() -> None:
    with pytest.raises(InvalidParamsError) as info:
        parse_policy({"max_sessions": 2}, session=True)
    assert info.value.data == {"field": "policy.max_sessions"}


def test_session_keys_override_the_agents() -> None:
    agent = RetentionPolicy(max_age_days=30, max_idle_days=7)
    own = RetentionPolicy(max_idle_days=1)
    assert effective_policy(agent, own) == RetentionPolicy(max_age_days=30, max_idle_days=1)
    assert effective_policy(None, None) == RetentionPolicy()


def test_expiry_is_the_earlier_limit() -> None:
    policy = RetentionPolicy(max_age_days=10, max_idle_days=0.5)
    assert expires_at(policy, 0, 2 * DAY_MS) == 2 * DAY_MS + DAY_MS // 2
    assert expires_at(policy, 0, 20 * DAY_MS) == 10 * DAY_MS
    assert expires_at(RetentionPolicy(), 0, 0) is None


def age(sid: str, created_days_ago: float, idle_days: float, **kw: object) -> SessionAge:
    return SessionAge(
        sid,
        NOW - int(created_days_ago * DAY_MS),
        NOW - int(idle_days * DAY_MS),
        **kw,  # type: ignore[arg-type]
    )


def test_plan_age_idle_and_cap() -> None:
    sessions = [
        age("old", 40, 1),
        age("idle", 5, 3),
        age("a", 2, 0.5),
        age("b", 2, 0.2),
        age("c", 2, 0.1),
    ]
    agent = RetentionPolicy(max_age_days=30, max_idle_days=2, max_sessions=2)
    plan = plan_retention(sessions, agent, NOW)
    assert plan.sessions == [
        ("old", "max_age_days"),
        ("idle", "max_idle_days"),
        ("a", "max_sessions"),
    ]


def test_a_session_policy_keeps_it_longer() -> None:
    sessions = [age("keep", 40, 40, policy=RetentionPolicy(max_age_days=100, max_idle_days=100))]
    assert plan_retention(sessions, RetentionPolicy(max_age_days=30), NOW).sessions == []


def test_raw_events_go_only_below_the_summary() -> None:
    policy = RetentionPolicy(max_raw_events=10)
    summarized = age("s", 1, 0, policy=policy, raw_events=50, summary_from_seq=40, last_seq=60)
    unsummarized = age("u", 1, 0, policy=policy, raw_events=50, summary_from_seq=None, last_seq=60)
    small = age("small", 1, 0, policy=policy, raw_events=5, summary_from_seq=3, last_seq=6)
    plan = plan_retention([summarized, unsummarized, small], None, NOW)
    assert [(c.session_id, c.before_seq, c.keep) for c in plan.raw] == [("s", 40, 10)]


def test_preview_with_a_policy_in_place_of_the_stored_one() -> None:
    sessions = [age("x", 3, 3)]
    assert plan_retention(sessions, None, NOW).sessions == []
    preview = plan_retention(sessions, None, NOW, override=RetentionPolicy(max_idle_days=1))
    assert preview.sessions == [("x", "max_idle_days")]
    one = plan_retention(sessions, None, NOW, override=RetentionPolicy(max_age_days=1), only="x")
    assert one.to_json() == {
        "sessions": [{"session_id": "x", "reason": "max_age_days"}],
        "raw_events": [],
    }


@given(
    st.lists(st.tuples(st.integers(0, 100), st.integers(0, 100)), max_size=30),
    st.integers(1, 40),
)
def test_the_cap_keeps_exactly_the_most_recent(times: list[tuple[int, int]], cap: int) -> None:
    sessions = [
        SessionAge(f"s{i}", NOW - c * DAY_MS, NOW - min(c, u) * DAY_MS)
        for i, (c, u) in enumerate(times)
    ]
    plan = plan_retention(sessions, RetentionPolicy(max_sessions=cap), NOW)
    gone = {s for s, _ in plan.sessions}
    kept = [s for s in sessions if s.session_id not in gone]
    assert len(kept) == min(cap, len(sessions))
    if gone and kept:
        newest_gone = max(
            (s.updated_at, s.created_at, s.session_id) for s in sessions if s.session_id in gone
        )
        oldest_kept = min((s.updated_at, s.created_at, s.session_id) for s in kept)
        assert newest_gone < oldest_kept


@given(st.integers(1, MAX_BATCH), st.floats(0, 10_000, allow_nan=False))
def test_next_batch_stays_in_bounds_and_moves_toward_the_target(size: int, elapsed: float) -> None:
    nxt = next_batch(size, elapsed)
    assert MIN_BATCH <= nxt <= MAX_BATCH
    assert nxt <= 2 * size  # grows at most twofold
    if elapsed > STEP_TARGET_MS and size > MIN_BATCH:
        assert nxt <= size  # a slow step shrinks the next one
    if 0 < elapsed < STEP_TARGET_MS / 2 and size < MAX_BATCH:
        assert nxt > size  # a fast one grows it


def test_next_batch_refuses_an_empty_batch() -> None:
    with pytest.raises(ValueError, match="size"):
        next_batch(0, 1.0)


POLICIES = st.none() | st.builds(
    RetentionPolicy,
    max_age_days=st.none() | st.floats(0.5, 30),
    max_idle_days=st.none() | st.floats(0.5, 30),
    max_raw_events=st.none() | st.integers(1, 50),
)


@given(POLICIES, POLICIES, POLICIES, st.booleans())
def test_policy_for_is_the_effective_policy_plan_retention_applies(
    agent: RetentionPolicy | None,
    own: RetentionPolicy | None,
    override: RetentionPolicy | None,
    only: bool,
) -> None:
    sid = "s" if only else None
    got = policy_for(agent, own, override, sid)
    if override is not None and sid is not None:
        assert got == effective_policy(agent, override)
    elif override is not None:
        assert got == effective_policy(override, own)
    else:
        assert got == effective_policy(agent, own)
