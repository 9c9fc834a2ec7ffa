"""Retention policies and what they remove (pure).

A policy ``{max_age_days?, max_idle_days?, max_raw_events?, max_sessions?}`` is set per
agent and per session; a session's effective policy is the agent's with the session's
keys over it. ``plan_retention`` decides, from session rows and a clock, which sessions
expire and which raw events go; the shell erases them as ``session.delete`` and
``events.delete`` do.

- ``max_age_days``: a session expires ``max_age_days`` after it was created;
- ``max_idle_days``: ... after its last write (``updated_at``);
- ``max_raw_events``: raw events older than the latest summary's boundary
  (``tail_start_seq`` of the latest compaction record) and not among the newest
  ``max_raw_events`` are erased; the summary and the context built from it stay as they
  are. A session without a summary keeps every event;
- ``max_sessions`` (agent level only): when the agent has more sessions than this, the
  least recently updated go first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec

from .errors import InvalidParamsError

__all__ = [
    "DAY_MS",
    "RetentionPlan",
    "RetentionPolicy",
    "SessionAge",
    "effective_policy",
    "expires_at",
    "next_batch",
    "parse_policy",
    "plan_retention",
    "policy_for",
    "policy_json",
]

DAY_MS: Final = 86_400_000
MAX_DAYS: Final = 1_000_000.0
MAX_COUNT: Final = 2**31


class RetentionPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A retention policy (every key optional; ``None``: no limit of that kind)."""

    max_age_days: float | None = None
    max_idle_days: float | None = None
    max_raw_events: int | None = None
    max_sessions: int | None = None

    @property
    def empty(self) -> bool:
        return all(v is None for v in msgspec.structs.astuple(self))


class SessionAge(msgspec.Struct, frozen=True):
    """What retention needs of one session row."""

    session_id: str
    created_at: int
    updated_at: int
    policy: RetentionPolicy | None = None  # the session's own policy
    raw_events: int = 0  # non-compaction events stored
    summary_from_seq: int | None = None  # the latest summary's tail_start_seq
    last_seq: int = 0


class RawCut(msgspec.Struct, frozen=True):
    """Erase the non-compaction events of ``session_id`` with seq < ``before_seq`` (the
    summary's boundary), except the newest ``keep`` raw events."""

    session_id: str
    before_seq: int
    keep: int


class RetentionPlan(msgspec.Struct, frozen=True):
    """What a sweep removes: whole sessions with the reason, and raw-event cuts."""

    sessions: list[tuple[str, str]] = msgspec.field(default_factory=list)
    raw: list[RawCut] = msgspec.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "sessions": [{"session_id": s, "reason": r} for s, r in self.sessions],
            "raw_events": [
                {"session_id": c.session_id, "before_seq": c.before_seq, "keep": c.keep}
                for c in self.raw
            ],
        }


_DAYS = ("max_age_days", "max_idle_days")
_COUNTS = ("max_raw_events", "max_sessions")


def parse_policy(data: object, *, session: bool = False, where: str = "policy") -> RetentionPolicy:
    """A policy from JSON; ``InvalidParamsError`` naming the field. ``max_sessions`` is an
    agent-level key (refused for a session)."""
    if not isinstance(data, Mapping):
        raise InvalidParamsError(f"{where}: must be an object or null", data={"field": where})
    for key in data:
        if key not in _DAYS + _COUNTS:
            raise InvalidParamsError(
                f"{where}.{key}: unknown field (known: {', '.join(_DAYS + _COUNTS)})",
                data={"field": f"{where}.{key}"},
            )
    values: dict[str, Any] = {}
    for key in _DAYS:
        v = data.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise InvalidParamsError(
                f"{where}.{key}: must be a number of days, got {v!r}",
                data={"field": f"{where}.{key}"},
            )
        if not 0 < v <= MAX_DAYS:
            raise InvalidParamsError(
                f"{where}.{key}: must be above 0 and at most {MAX_DAYS:g}, got {v!r}",
                data={"field": f"{where}.{key}"},
            )
        values[key] = float(v)
    for key in _COUNTS:
        v = data.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_COUNT:
            raise InvalidParamsError(
                f"{where}.{key}: must be an integer from 1 to {MAX_COUNT}, got {v!r}",
                data={"field": f"{where}.{key}"},
            )
        values[key] = v
    if session and "max_sessions" in values:
        raise InvalidParamsError(
            f"{where}.max_sessions: an agent-level limit (set it without session_id)",
            data={"field": f"{where}.max_sessions"},
        )
    return RetentionPolicy(**values)


def policy_json(policy: RetentionPolicy | None) -> dict[str, Any] | None:
    """A policy as stored and answered (only the keys set; ``None`` when empty)."""
    if policy is None:
        return None
    out = {k: v for k, v in msgspec.structs.asdict(policy).items() if v is not None}
    return out or None


def effective_policy(
    agent: RetentionPolicy | None, session: RetentionPolicy | None
) -> RetentionPolicy:
    """The agent's policy with the session's keys over it."""
    base = msgspec.structs.asdict(agent) if agent is not None else {}
    if session is not None:
        base.update({k: v for k, v in msgspec.structs.asdict(session).items() if v is not None})
    return RetentionPolicy(**base)


def expires_at(policy: RetentionPolicy, created_at: int, updated_at: int) -> int | None:
    """When a session expires under ``policy`` (ms), or ``None`` (never)."""
    times = []
    if policy.max_age_days is not None:
        times.append(created_at + math.ceil(policy.max_age_days * DAY_MS))
    if policy.max_idle_days is not None:
        times.append(updated_at + math.ceil(policy.max_idle_days * DAY_MS))
    return min(times) if times else None


_NO_POLICY: Final = RetentionPolicy()


def policy_for(
    agent: RetentionPolicy | None,
    own: RetentionPolicy | None,
    override: RetentionPolicy | None = None,
    only: str | None = None,
) -> RetentionPolicy:
    """The policy ``plan_retention`` applies to a session whose own policy is ``own``
    (``override``, ``only``: as there)."""
    if override is not None and only is not None:
        return effective_policy(agent, override)
    if override is not None:
        return effective_policy(override, own)
    if own is None:
        return _NO_POLICY if agent is None else agent
    return effective_policy(agent, own)


MIN_BATCH: Final = 1
MAX_BATCH: Final = 256
STEP_TARGET_MS: Final = 30.0
"""A sweep's step (one transaction deleting a batch of sessions) aims at this much time
for the parts that grow with the batch (tombstones, delete statements, the mirror
folders' moves); the next batch is sized from the last one's. The rest of the step (the
commit, the search index's purge, the WAL's truncation) is paid once per step whatever
its size."""


def next_batch(size: int, elapsed_ms: float, target_ms: float = STEP_TARGET_MS) -> int:
    """The size of a sweep's next batch of sessions after one of ``size`` took
    ``elapsed_ms``: scaled toward ``target_ms``, at most doubled, within
    ``[MIN_BATCH, MAX_BATCH]``."""
    if size < MIN_BATCH:
        raise ValueError(f"size must be at least {MIN_BATCH}, got {size}")
    if not math.isfinite(elapsed_ms) or elapsed_ms * 2 <= target_ms:
        scaled = size * 2  # fast (or not measured): double, never more
    else:
        scaled = int(size * target_ms / elapsed_ms)
    return max(MIN_BATCH, min(MAX_BATCH, scaled))


def plan_retention(
    sessions: Sequence[SessionAge],
    agent: RetentionPolicy | None,
    now_ms: int,
    *,
    override: RetentionPolicy | None = None,
    only: str | None = None,
) -> RetentionPlan:
    """What the policies remove at ``now_ms``. ``override``: a policy to preview in place
    of the stored ones (for the agent, or for the session ``only``); ``only``: consider
    that session alone (``max_sessions`` does not apply then)."""
    gone: list[tuple[str, str]] = []
    cuts: list[RawCut] = []
    kept: list[SessionAge] = []
    for s in sessions:
        if only is not None and s.session_id != only:
            continue
        policy = policy_for(agent, s.policy, override, only)
        when = expires_at(policy, s.created_at, s.updated_at)
        if when is not None and when <= now_ms:
            age_due = policy.max_age_days is not None and (
                s.created_at + math.ceil(policy.max_age_days * DAY_MS) <= now_ms
            )
            gone.append((s.session_id, "max_age_days" if age_due else "max_idle_days"))
            continue
        kept.append(s)
        keep = policy.max_raw_events
        boundary = s.summary_from_seq
        # The newest ``keep`` raw events stay; of the rest only those the summary covers
        # (seq below its tail) go (the shell selects them in SQL).
        if keep is not None and boundary is not None and boundary > 1 and s.raw_events > keep:
            cuts.append(RawCut(s.session_id, boundary, keep))
    cap = None
    if only is None:
        source = override if override is not None else agent
        cap = None if source is None else source.max_sessions
    if cap is not None and len(kept) > cap:
        oldest = sorted(kept, key=lambda s: (s.updated_at, s.created_at, s.session_id))
        for s in oldest[: len(kept) - cap]:
            gone.append((s.session_id, "max_sessions"))
        dropped = {s.session_id for s in oldest[: len(kept) - cap]}
        cuts = [c for c in cuts if c.session_id not in dropped]
    return RetentionPlan(gone, cuts)
