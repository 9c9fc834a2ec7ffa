"""``AgentCore`` as a state machine, h11 style: no event loop, no file, no thread.

Every test drives the core by hand: it asks, gets a ``Need``, answers it with a value it
built (what the store would have returned) and asks again, then feeds ``committed`` the
outcome a store would give. The actor does exactly this against a real store
(tests/session_server/runtime).
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from session_server.core.agent_core import AgentCore, compaction_report, trusted_snapshot_digest
from session_server.core.decisions import (
    LARGE_WINDOW_EVENTS,
    AppendPlan,
    CompactionDue,
    CompactionInput,
    ContextDraft,
    PlaceholderFallback,
    StrategyWrite,
)
from session_server.core.needs import (
    Known,
    NeedAgentStrategy,
    NeedBlocks,
    NeedCount,
    NeedSnapshot,
    NeedState,
    NeedWindow,
)
from session_server.mirror.snapshot import RestoredSnapshot
from session_server.values.blocks import BlockRevision, BlockSet, render_blocks
from session_server.values.cache_budget import CacheBudget
from session_server.values.codec import message_to_event
from session_server.values.context import WorkingContext
from session_server.values.errors import InvalidParamsError, NotFoundError
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from session_server.values.plans import (
    AppendBatch,
    AppendOutcome,
    AppendResult,
    ContextWindow,
    NewSession,
    SessionState,
    SnapshotDue,
)
from session_server.values.tokens import count_messages
from session_server.values.turns import number_turns

SID = "s"
COMPACT = {"mode": "compact", "compact_keep": 1, "compact_trigger_turns": 1}


def new_core(**kw: Any) -> AgentCore:
    """A core that knows ``SID`` has no memory blocks (its first build asks no block
    read: ``test_a_cold_build_asks_for_the_blocks_first`` shows that step)."""
    options: dict[str, Any] = {"context_limit": 50, "server_strategy": None, "snapshots": False}
    options.update(kw)
    core = AgentCore("agent", **options)
    need = core.blocks.lookup(SID)
    assert isinstance(need, NeedBlocks)
    core.learn(need, BlockSet(), Known())
    return core


def test_a_cold_build_asks_for_the_blocks_first_then_renders_them() -> None:
    core, known = (
        AgentCore("agent", context_limit=50, server_strategy=None, snapshots=False),
        Known(),
    )
    step = core.build(SID, known, instructions=["sys"], limit=None, strategy=None)
    assert step == NeedBlocks(SID, 0)
    persona = BlockRevision(
        label="persona",
        session_id=None,
        revision=1,
        value="calm",
        description="",
        max_tokens=10,
        tokens=1,
        author="client",
    )
    core.learn(step, BlockSet((persona,)), known)
    step = core.build(SID, known, instructions=["sys"], limit=None, strategy=None)
    assert step == NeedWindow(SID, 50, 0)
    core.learn(step, window_of(stored(chat(1))), known)
    core.learn(core.build(SID, known, instructions=["sys"], limit=None, strategy=None), None, known)
    ctx = core.build(SID, known, instructions=["sys"], limit=None, strategy=None)
    assert isinstance(ctx, WorkingContext)
    assert ctx.system_instructions == ["sys", render_blocks(BlockSet((persona,)))]
    # A block write drops the cache: the next build reads the blocks again.
    core.blocks.written(None)
    assert isinstance(
        core.build(SID, Known(), instructions=[], limit=None, strategy=None), NeedBlocks
    )


def stored(events: list[SessionEvent], first_seq: int = 1) -> list[SessionEvent]:
    """``events`` as the store keeps them: seq, turn, session id and token count set."""
    positions, _ = number_turns(events, first_seq=first_seq)
    return [
        msgspec.structs.replace(
            e, id=e.id or f"e{seq}", session_id=SID, seq=seq, turn=p.turn, token_count=3
        )
        for seq, (e, p) in enumerate(zip(events, positions, strict=True), start=first_seq)
    ]


def chat(n: int) -> list[SessionEvent]:
    out: list[SessionEvent] = []
    for i in range(n):
        out.append(SessionEvent(action="user_message", content=f"q{i}"))
        out.append(SessionEvent(action="agent_message", content=f"a{i}"))
    return out


def window_of(events: list[SessionEvent], **state: Any) -> ContextWindow:
    last = events[-1].seq if events else 0
    return ContextWindow(
        events=list(events),
        state=SessionState(SID, last_seq=last, **state),
        suffix=list(events),
        complete=True,
    )


def answer(core: AgentCore, step: Any, known: Known, value: Any) -> None:
    core.learn(step, value, known)


def test_a_cold_build_asks_for_the_window_then_the_agent_strategy() -> None:
    core, known = new_core(), Known()
    log = stored(chat(2))
    step = core.build(SID, known, instructions=["sys"], limit=None, strategy=None)
    assert step == NeedWindow(SID, 50, 0)
    answer(core, step, known, window_of(log))
    step = core.build(SID, known, instructions=["sys"], limit=None, strategy=None)
    assert step == NeedAgentStrategy(0)
    answer(core, step, known, None)
    ctx = core.build(SID, known, instructions=["sys"], limit=None, strategy=None)
    assert isinstance(ctx, WorkingContext)
    assert [m.content for m in ctx.messages] == ["q0", "a0", "q1", "a1"]
    assert ctx.base_seq == 4
    # One rule for the total: the stored counts plus the instruction's tokens.
    assert ctx.token_count is not None and ctx.token_count > 4 * 3
    # The window is cached now: a new request needs no read at all.
    again = core.build(SID, Known(), instructions=["sys"], limit=2, strategy=None)
    assert isinstance(again, WorkingContext)
    assert [m.content for m in again.messages] == ["q1", "a1"]


def test_a_bounded_window_counts_the_events_it_leaves_out_once() -> None:
    core, known = new_core(context_limit=2), Known()
    log = stored(chat(3))  # seqs 1..6; the window holds the last turn
    tail = ContextWindow(
        events=log[4:], state=SessionState(SID, last_seq=6), suffix=log[4:], complete=False
    )
    step = core.build(SID, known, instructions=[], limit=None, strategy=None)
    assert step == NeedWindow(SID, 2, 0)
    answer(core, step, known, tail)
    answer(core, core.build(SID, known, instructions=[], limit=None, strategy=None), known, None)
    step = core.build(SID, known, instructions=[], limit=None, strategy=None)
    assert step == NeedCount(SID, 1, 5)  # the cache does not reach back: the store counts
    answer(core, step, known, 4)
    ctx = core.build(SID, known, instructions=[], limit=None, strategy=None)
    assert isinstance(ctx, WorkingContext) and ctx.omitted_events == 4
    # A turn later the window moved by two events the cache holds: no read this time.
    turn = stored(chat(4), first_seq=1)[6:]
    core.committed(
        AppendPlan(AppendBatch(SID, turn, [1, 1])),
        AppendOutcome(AppendResult(seqs=[7, 8], last_seq=8), turn),
    )
    again = core.build(SID, Known(), instructions=[], limit=None, strategy=None)
    assert isinstance(again, WorkingContext) and again.omitted_events == 6


def test_a_turn_is_planned_with_its_snapshot_and_committed_into_the_cache() -> None:
    core, known = new_core(), Known()
    log = stored(chat(1))
    core.learn(NeedWindow(SID, 50, 0), window_of(log), known)
    ctx = WorkingContext(["sys"], base_seq=2)
    ctx.add_messages(
        [ContextMessage(role="user", content="q9"), ContextMessage(role="assistant", content="a9")]
    )
    turn = core.prepare_turn(SID, ctx, usage=None, on_conflict="reject", idempotency_key="k")
    # The pressure check reads the agent's strategy once (is anything compacting?).
    step = core.plan_turn(turn, Known())
    assert step == NeedAgentStrategy(0)
    answer(core, step, Known(), None)
    plan = core.plan_turn(turn, Known())
    assert isinstance(plan, AppendPlan)
    assert plan.batch.expected_last_seq == 2 and plan.batch.idempotency_key == "k"
    assert plan.batch.compaction_required is None
    assert [e.action for e in plan.batch.events] == ["user_message", "agent_message"]
    assert plan.snapshot == SnapshotDue(SID, ["sys"])
    written = stored(plan.batch.events, first_seq=3)
    effects = core.committed(plan, AppendOutcome(AppendResult(seqs=[3, 4], last_seq=4), written))
    assert effects is not None
    assert effects.mirror == written and effects.notify == written
    assert effects.snapshot == plan.snapshot
    view = core.cached_view(SID, 50)
    assert view is not None and view.last_seq == 4 and len(view.events) == 4
    # The snapshot is rendered from the cache as of the latest commit.
    parts = core.snapshot_parts(SnapshotDue(SID, ["sys"]))
    assert parts is not None
    messages, system, last_seq = parts
    assert [m.content for m in messages] == ["q0", "a0", "q9", "a9"]
    assert system == ["sys"] and last_seq == 4


def test_a_replay_has_no_effects_and_leaves_the_cache() -> None:
    core = new_core()
    core.learn(NeedWindow(SID, 50, 0), window_of(stored(chat(1))), Known())
    plan = core.plan_events(SID, [SessionEvent(content="x")], idempotency_key="k")
    replay = AppendOutcome(AppendResult(seqs=[3], last_seq=3), [], replay=True)
    assert core.committed(plan, replay) is None
    view = core.cached_view(SID, 50)
    assert view is not None and view.last_seq == 2


def test_usage_pressure_needs_the_state_and_strategy_then_sets_the_flag() -> None:
    core, known = new_core(), Known()
    ctx = WorkingContext()
    ctx.add_message(ContextMessage(role="user", content="hi"))
    usage = {"prompt_tokens": 10**7}
    turn = core.prepare_turn(SID, ctx, usage=usage, on_conflict="append", idempotency_key=None)
    step = core.plan_turn(turn, known)
    assert step == NeedState(SID)
    strategy = {"mode": "summarize", "raw_tail_turns": 0}
    answer(core, step, known, SessionState(SID, last_seq=0, strategy=strategy))
    step = core.plan_turn(turn, known)
    assert step == NeedAgentStrategy(0)
    answer(core, step, known, None)
    # Under summarize the check also reads the window: is there a turn to summarise?
    step = core.plan_turn(turn, known)
    assert step == NeedWindow(SID, 50, 0)
    answer(core, step, known, window_of([], strategy=strategy))
    plan = core.plan_turn(turn, known)
    assert isinstance(plan, AppendPlan) and plan.batch.compaction_required is True
    cold, missing = new_core(), Known()  # no cached window: the state row says
    cold.learn(NeedState(SID), None, missing)
    with pytest.raises(NotFoundError):
        cold.plan_turn(turn, missing)
    with pytest.raises(InvalidParamsError, match="usage"):
        core.prepare_turn(SID, ctx, usage=[1], on_conflict="append", idempotency_key=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidParamsError, match="on_conflict"):
        core.prepare_turn(SID, ctx, usage=None, on_conflict="merge", idempotency_key=None)


def test_persisting_nothing_answers_from_the_state_without_a_write() -> None:
    core, known = new_core(), Known()
    turn = core.prepare_turn(
        SID, WorkingContext(), usage=None, on_conflict="append", idempotency_key=None
    )
    step = core.plan_turn(turn, known)
    assert step == NeedState(SID)
    core.learn(step, SessionState(SID, last_seq=7, compaction_required=True), known)
    assert core.plan_turn(turn, known) == AppendResult(
        seqs=[], last_seq=7, compaction_required=True
    )
    # An empty append of events is a no-op even for an unknown session.
    plan = core.plan_events(SID, [])
    assert plan.batch.writes_nothing
    unknown = Known()
    core.learn(NeedState(SID), None, unknown)
    assert core.unwritten(plan, unknown) == AppendResult(seqs=[], last_seq=0)


def test_a_compact_strategy_makes_the_build_compact_first_once() -> None:
    core, known = new_core(), Known()
    core.learn(NeedAgentStrategy(0), None, known)
    log = stored(chat(3))
    core.learn(NeedWindow(SID, 50, 0), window_of(log, strategy=COMPACT), known)
    due = core.build(SID, known, instructions=[], limit=None, strategy=None)
    assert isinstance(due, CompactionDue) and not due.force and due.config.mode == "compact"
    # The pump runs it (one at a time per session), then asks again.
    assert core.begin_compaction(SID) and not core.begin_compaction(SID)
    given = core.compaction_input(due, Known())
    assert isinstance(given, CompactionInput) and len(given.events) == 6
    core.end_compaction(SID)
    assert core.begin_compaction(SID)
    core.end_compaction(SID)
    known.compacted = True
    assert isinstance(
        core.build(SID, known, instructions=[], limit=None, strategy=None), WorkingContext
    )


def test_after_compaction_appends_the_record_or_clears_the_flag() -> None:
    from session_server.compaction.records import CompactionPlan

    core = new_core()
    config = core.resolve({"mode": "summarize"}, None)
    assert isinstance(config, NeedAgentStrategy)
    core.learn(config, None, Known())
    resolved = core.resolve({"mode": "summarize"}, None)
    assert not isinstance(resolved, NeedAgentStrategy)
    due = CompactionDue(SID, resolved, [], 50, force=False)
    pressed = CompactionInput([], None, pressure=True)
    nothing = CompactionPlan("summarize", None, "nothing to summarise")
    clear = core.after_compaction(due, pressed, nothing)
    assert clear is not None and clear.batch.compaction_required is False
    assert not clear.batch.events
    assert core.after_compaction(due, CompactionInput([], None, pressure=False), nothing) is None
    record = {"version": 1, "strategy": "compact", "boundary_seq": 3}
    done = CompactionPlan("compact", record, "ok", event_count=2)
    plan = core.after_compaction(due, pressed, done)
    assert plan is not None and plan.batch.compaction_required is False
    assert [e.action for e in plan.batch.events] == ["compaction"]
    assert compaction_report(done)["boundary_seq"] == 3
    assert compaction_report(nothing) == {
        "compacted": False,
        "strategy": "summarize",
        "reason": "nothing to summarise",
        "event_count": 0,
        "items_removed": 0,
        "tokens_before": None,
        "tokens_after": None,
        "boundary_seq": None,
    }


def test_an_agent_strategy_read_before_a_write_is_not_kept() -> None:
    core = new_core()
    stale = core.agent_strategy()
    assert stale == NeedAgentStrategy(0)
    write = core.plan_strategy(COMPACT, None)
    assert isinstance(write, StrategyWrite) and write.stored is not None
    core.strategy_written(write)
    core.learn(stale, None, Known())  # the read that raced with the write
    assert core.agent_strategy() == COMPACT
    levels = core.strategy_levels(None, Known())
    assert isinstance(levels, dict) and levels["effective"]["mode"] == "compact"


def test_the_first_build_may_come_from_the_snapshot_file() -> None:
    core, known = new_core(snapshots=True), Known()
    kwargs: dict[str, Any] = {"instructions": ["sys"], "limit": None, "strategy": None}
    step = core.build(SID, known, **kwargs)
    assert step == NeedState(SID)
    bound = SessionState(SID, last_seq=4, snapshot_seq=4, snapshot_digest="d")
    core.learn(step, bound, known)
    step = core.build(SID, known, **kwargs)
    assert step == NeedAgentStrategy(0)
    core.learn(step, None, known)
    step = core.build(SID, known, **kwargs)
    assert step == NeedSnapshot(SID, 4, "d")
    restored = RestoredSnapshot(
        agent_id="agent",
        system_instructions=["sys"],
        messages=[ContextMessage(role="user", content="q")],
        epoch_id=0,
        last_compaction_ts=None,
        last_seq=4,
    )
    core.learn(step, restored, known)
    ctx = core.build(SID, known, **kwargs)
    assert isinstance(ctx, WorkingContext)
    assert ctx.metadata["restored_from"] == "working_context_snapshot.json"
    assert ctx.base_seq == 4
    assert ctx.token_count == count_messages(restored.messages, ["sys"]).tokens
    # Only the first build of an activation: the next one reads the window.
    assert isinstance(core.build(SID, Known(), **kwargs), NeedWindow)


@pytest.mark.parametrize(
    "state",
    [
        SessionState(SID, last_seq=4),  # never bound, or unbound by a delete
        SessionState(SID, last_seq=4, snapshot_seq=3, snapshot_digest="d"),  # older snapshot
    ],
)
def test_a_snapshot_sqlite_does_not_vouch_for_is_never_read(state: SessionState) -> None:
    core, known = new_core(snapshots=True), Known()
    kwargs: dict[str, Any] = {"instructions": ["sys"], "limit": None, "strategy": None}
    assert trusted_snapshot_digest(state) is None
    core.learn(NeedState(SID), state, known)
    core.learn(NeedAgentStrategy(0), None, known)
    step = core.build(SID, known, **kwargs)
    assert isinstance(step, NeedWindow)  # rebuilt from events, the file never consulted


def test_a_window_read_that_raced_with_a_commit_is_not_cached() -> None:
    core = new_core()
    log = stored(chat(2))
    need = core.view(SID, 50, Known())
    assert isinstance(need, NeedWindow)
    plan = core.plan_events(SID, [SessionEvent(content="late")])
    core.committed(
        plan, AppendOutcome(AppendResult([5], 5), stored(plan.batch.events, first_seq=5))
    )
    known = Known()
    core.learn(need, window_of(log), known)  # read before the commit above
    assert core.cached_view(SID, 50) is None
    assert known.views[(SID, 50)].last_seq == 4  # this request still gets its answer


def test_a_tool_result_without_its_call_is_never_in_a_view() -> None:
    core = new_core()
    call = SessionEvent(
        action="tool_call_request", tool_calls=[ToolCall(id="c", name="t", arguments={})]
    )
    log = stored(
        [
            SessionEvent(action="user_message"),
            call,
            SessionEvent(action="tool_result", tool_call_id="c"),
        ]
    )
    core.learn(NeedWindow(SID, 50, 0), window_of(log), Known())
    view = core.cached_view(SID, 1)
    assert view is not None and [e.action for e in view.events] == [
        "user_message",
        "tool_call_request",
        "tool_result",
    ]


def test_misuse_of_the_values_raises_type_and_value_errors() -> None:
    event = SessionEvent(id="e1")
    with pytest.raises(ValueError, match="token_counts"):
        AppendBatch(SID, [event], [])
    with pytest.raises(ValueError, match="id"):
        AppendBatch(SID, [SessionEvent()], [1])
    with pytest.raises(TypeError, match="events"):
        AppendBatch(SID, ["not an event"], [1])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="expected_last_seq"):
        AppendBatch(SID, expected_last_seq="3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected_last_seq"):
        AppendBatch(SID, expected_last_seq=-1)
    with pytest.raises(TypeError, match="compaction_required"):
        AppendBatch(SID, compaction_required=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="last_seq"):
        SessionState(SID, last_seq="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="agent_id"):
        NewSession("")
    with pytest.raises(ValueError, match="context_limit"):
        AgentCore("agent", context_limit=0, server_strategy=None, snapshots=False)
    assert AppendBatch(SID).writes_nothing
    assert not AppendBatch(SID, create=NewSession("agent")).writes_nothing
    assert AppendBatch(SID).with_mirror_seq(4).mirror_seq == 4


def test_with_mirror_seq_copies_the_batch_and_checks_only_the_cursor() -> None:
    events = [message_to_event(SID, ContextMessage(role="user", content="hi"))]
    batch = AppendBatch(SID, events, [3], expected_last_seq=2, idempotency_key="k")
    moved = batch.with_mirror_seq(7)
    assert moved == msgspec.structs.replace(batch, mirror_seq=7)
    assert batch.mirror_seq is None  # the original is left as it was
    assert moved.events is batch.events  # not validated again, not copied
    with pytest.raises(ValueError, match="mirror_seq: must be >= 0"):
        batch.with_mirror_seq(-1)
    with pytest.raises(TypeError, match="mirror_seq: must be an int"):
        batch.with_mirror_seq(True)


def tool_turns(n: int) -> list[SessionEvent]:
    out: list[SessionEvent] = []
    for i in range(n):
        call = ToolCall(id=f"c{i}", name="search", arguments={"q": i})
        out.append(SessionEvent(action="user_message", content=f"q{i}"))
        out.append(SessionEvent(action="tool_call_request", tool_calls=[call]))
        out.append(
            SessionEvent(
                action="tool_result", content=f"hit {i}", tool_call_id=f"c{i}", tool_name="search"
            )
        )
        out.append(SessionEvent(action="agent_message", content=f"a{i}"))
    return out


def test_a_summary_that_cannot_be_had_falls_back_to_placeholders_if_the_strategy_has_them() -> None:
    core, known = new_core(), Known()
    core.learn(NeedAgentStrategy(0), None, known)
    log = stored(tool_turns(4))  # seqs 1..16
    summarize = {"mode": "summarize", "raw_tail_turns": 1}
    core.learn(
        NeedWindow(SID, 50, 0), window_of(log, strategy=summarize, compaction_required=True), known
    )
    # The session's strategy sets no placeholder parameter: the previous record applies.
    plain = core.build(SID, known, instructions=[], limit=None, strategy=None)
    assert isinstance(plain, CompactionDue) and plain.config.mode == "summarize"
    assert core.placeholder_fallback(plain, "failed", known) is None
    # The request's level sets one (request > session > agent > server): placeholders.
    due = core.build(SID, Known(), instructions=[], limit=None, strategy={"compact_keep": 1})
    assert isinstance(due, CompactionDue) and due.config.mode == "summarize"
    fallback = core.placeholder_fallback(due, "slow", Known())
    assert isinstance(fallback, PlaceholderFallback)
    batch = fallback.append.batch
    # Refused if the session moved meanwhile; the flag stays set: the summary is still due.
    assert batch.expected_last_seq == 16 and batch.compaction_required is None
    [event] = batch.events
    assert event.action == "compaction" and event.compaction is not None
    assert event.compaction["fallback"] == {"for": "summarize", "cause": "slow"}
    assert event.compaction["boundary_seq"] == 13 and fallback.plan.items_removed == 3


def test_a_plan_derived_before_a_removal_is_refused_after_it() -> None:
    """Issue 33, item 3: a plan carrying the removal count its reads were made at (a
    summary) conflicts once events of its session were removed; other sessions and plans
    without a count are not affected."""
    core = new_core()
    plan = AppendPlan(AppendBatch(SID, []), removals=core.removals(SID))
    other = AppendPlan(AppendBatch("other", []), removals=core.removals("other"))
    free = AppendPlan(AppendBatch(SID, []))
    assert core.removal_conflict(plan) is None
    core.events_deleted(SID)
    conflict = core.removal_conflict(plan)
    assert conflict is not None and conflict.code == -32002
    assert conflict.data == {"field": "session_id", "reason": "events_removed"}
    assert SID in conflict.message
    assert core.removal_conflict(other) is None
    assert core.removal_conflict(free) is None
    again = AppendPlan(AppendBatch(SID, []), removals=core.removals(SID))
    assert core.removal_conflict(again) is None
    core.session_deleted(SID)
    assert core.removal_conflict(again) is not None


def test_a_large_window_is_a_draft_and_a_store_read_is_freed_by_its_build() -> None:
    """A window of ``LARGE_WINDOW_EVENTS`` or more is answered with a ``ContextDraft``
    (the shell builds it off the event loop) that builds what a small window would. A
    window read from the store for this build, which the cache did not keep, is the
    draft's own: its build empties it, so its events are freed where the build runs."""
    pairs = LARGE_WINDOW_EVENTS // 2 + 1
    log = stored(chat(pairs))
    for budget, owned in ((CacheBudget(1024), True), (CacheBudget(1 << 30), False)):
        core, known = new_core(context_limit=2 * pairs, cache_budget=budget), Known()
        step = core.build(SID, known, instructions=["sys"], limit=None, strategy=None)
        answer(core, step, known, window_of(log))
        answer(core, core.build(SID, known, instructions=["sys"], limit=None, strategy=None),
               known, None)  # fmt: skip
        draft = core.build(SID, known, instructions=["sys"], limit=None, strategy=None)
        assert isinstance(draft, ContextDraft) and draft.owned is owned
        events = draft.events
        ctx = draft.build()
        assert [m.content for m in ctx.messages] == [e.content for e in log]
        assert ctx.base_seq == 2 * pairs and ctx.system_instructions == ["sys"]
        assert ctx.token_count is not None and ctx.token_count > 3 * len(log)
        assert (events == []) is owned
