"""Compaction as the actor runs it: strategies, pressure, planning, applying (I/O shell).

The pure work (resolving a strategy, planning, building the compacted context) is in
``compaction``; this module reads what it needs through the actor and appends the
``compaction`` event. One compaction runs at a time per session, so a pressure flag is
acted on exactly once. A summarizer failure raises ``SummarizerError`` and writes
nothing. Raw events are never deleted or rewritten.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from ..compaction import (
    CompactionPlan,
    StrategyConfig,
    build_compacted_context,
    load_from_seq,
    make_compaction_event,
    resolve_strategy,
    token_pressure,
    validate_strategy,
)
from ..core.codec import encode_json
from ..core.context import WorkingContext
from ..core.errors import InvalidParamsError, NotFoundError
from ..core.events import ContextMessage, SessionEvent
from ..core.recent import SessionView
from ..core.tokens import MESSAGE_OVERHEAD, get_counter
from .compaction_run import run_compaction

if TYPE_CHECKING:
    from .actor import AgentActor

__all__ = [
    "build",
    "compact",
    "get_strategy",
    "pressure_flag",
    "set_strategy",
]

_AGENT_STRATEGY_KEY = "strategy"
_DEFAULT_CONFIG = StrategyConfig()


async def _agent_strategy(actor: AgentActor) -> dict[str, Any] | None:
    if not actor._agent_strategy_loaded:
        generation = actor._agent_strategy_generation
        raw = await actor._read(lambda s: s.get_setting(_AGENT_STRATEGY_KEY))
        if generation == actor._agent_strategy_generation:  # no set_strategy meanwhile
            actor._agent_strategy = None if raw is None else msgspec.json.decode(raw)
            actor._agent_strategy_loaded = True
        else:
            return await _agent_strategy(actor)
    return actor._agent_strategy


async def _session_strategy(actor: AgentActor, session_id: str) -> dict[str, Any] | None:
    state = await actor._read(lambda s: s.session_state(session_id))
    if state is None:
        raise NotFoundError.session(session_id)
    return _stored_strategy(state)


def _stored_strategy(state: Mapping[str, Any]) -> dict[str, Any] | None:
    raw = state["strategy"]
    return None if raw is None else dict(msgspec.json.decode(raw))


async def effective_mode(actor: AgentActor, state: Mapping[str, Any]) -> str:
    """The compaction mode in force for a session, given its ``session_state`` row."""
    return (await _resolve(actor, _stored_strategy(state), None)).mode


async def _resolve(
    actor: AgentActor, session: Mapping[str, Any] | None, request: Mapping[str, Any] | None
) -> StrategyConfig:
    """Precedence: request > session (persisted) > agent default > server default."""
    agent = await _agent_strategy(actor)
    server = actor.registry.default_strategy
    if server is None and agent is None and not session and not request:
        return _DEFAULT_CONFIG  # the common case: no validation to redo on every build
    return resolve_strategy(server, agent, session, request)


async def get_strategy(actor: AgentActor, session_id: str | None) -> dict[str, Any]:
    """Every level and the effective strategy (for the session, or the agent)."""
    session = None if session_id is None else await _session_strategy(actor, session_id)
    effective = await _resolve(actor, session, None)
    return {
        "server": actor.registry.default_strategy,
        "agent": await _agent_strategy(actor),
        "session": session,
        "effective": effective.to_dict(),
    }


async def set_strategy(
    actor: AgentActor, strategy: Mapping[str, Any] | None, session_id: str | None
) -> dict[str, Any]:
    """Persist a strategy for a session, or the agent default when ``session_id`` is None.

    Only the keys given are stored (``None`` or ``{}`` clears the level); the merged
    result must still be valid, so a refused strategy is never stored.
    """
    level = "agent" if session_id is None else "session"
    values = validate_strategy(strategy, source=f"{level} strategy") if strategy else {}
    stored = encode_json(values) if values else None
    if session_id is None:
        resolve_strategy(actor.registry.default_strategy, values or None)  # merge must be valid
        await actor._write(
            lambda s: (
                s.set_setting(_AGENT_STRATEGY_KEY, stored)
                if stored is not None
                else s.delete_setting(_AGENT_STRATEGY_KEY)
            )
        )
        actor._agent_strategy, actor._agent_strategy_loaded = (values or None), True
        actor._agent_strategy_generation += 1
    else:
        await _resolve(actor, values or None, None)  # the merge must be valid
        await actor._write(lambda s: s.update_session_fields(session_id, strategy=stored))
        actor._recent.strategy_changed(session_id, values or None)
    return await get_strategy(actor, session_id)


async def pressure_flag(
    actor: AgentActor, session_id: str, usage: Mapping[str, Any] | None
) -> bool | None:
    """``True`` when the provider-reported usage calls for compaction, else ``None``
    (leave the flag as it is). Raises ``InvalidParamsError`` on a malformed usage."""
    if usage is None:
        return None
    if not isinstance(usage, Mapping):
        raise InvalidParamsError("usage: must be an object", data={"field": "usage"})
    config = await _resolve(actor, await _session_strategy(actor, session_id), None)
    return True if token_pressure(usage, config).required else None


def _lock(actor: AgentActor, session_id: str) -> asyncio.Lock:
    return actor._compaction_locks.setdefault(session_id, asyncio.Lock())


async def _run(
    actor: AgentActor,
    session_id: str,
    config: StrategyConfig,
    instructions: Sequence[str],
    limit: int,
    *,
    force: bool,
) -> CompactionPlan:
    """Plan and, when there is something to do, append one compaction event.

    Runs as its own task: a caller cancelled mid-way does not release the session's
    compaction lock before the append finished (the flag is acted on exactly once).
    """
    task = asyncio.ensure_future(
        _run_locked(actor, session_id, config, instructions, limit, force=force)
    )
    return await asyncio.shield(task)


async def _run_locked(
    actor: AgentActor,
    session_id: str,
    config: StrategyConfig,
    instructions: Sequence[str],
    limit: int,
    *,
    force: bool,
) -> CompactionPlan:
    async with _lock(actor, session_id):
        view = await actor._view(session_id, limit)  # read again under the lock
        pressure = view.compaction_required
        if config.mode == "summarize":
            # Summaries cover every turn not yet summarised, not only the current window.
            window = await actor._read(
                lambda s: s.context_window(session_id, limit=None, from_record=True)
            )
            events: list[SessionEvent] = window.events
        else:
            events = view.events
        plan = await run_compaction(
            events,
            config,
            previous_record=view.record,
            summarizer=actor.registry.summarizer,
            force=force,
            pressure=pressure,
            system_instructions=instructions,
        )
        if plan.record is None:
            if pressure and config.mode != "compact":
                # Acted on (nothing to summarise): the flag must not fire on every build.
                await actor._append(session_id, [], compaction_required=False)
            return plan
        event = make_compaction_event(session_id, plan.record, plan.event_count)
        await actor._append(session_id, [event], compaction_required=False if pressure else None)
        actor.registry.metrics.observe(plan)
        return plan


async def build(
    actor: AgentActor,
    session_id: str,
    instructions: list[str],
    limit: int,
    strategy: Mapping[str, Any] | None,
    *,
    may_compact: bool = True,
) -> WorkingContext:
    """The working context under the session's strategy, compacting first when due
    (never with ``may_compact=False``: a read-only build, e.g. for an export)."""
    view = await actor._view(session_id, limit)
    config = await _resolve(actor, view.strategy, strategy)
    due = may_compact and (
        config.mode == "compact" or (config.mode == "summarize" and view.compaction_required)
    )
    if due:
        plan = await _run(actor, session_id, config, instructions, limit, force=False)
        if plan.record is not None or view.compaction_required:
            view = await actor._view(session_id, limit)
    ctx = build_compacted_context(
        view.events,
        record=view.record,
        system_instructions=instructions,
        base_seq=view.last_seq,
        config=config,
    )
    ctx.token_count = _token_total(view, ctx)
    return ctx


async def compact(
    actor: AgentActor,
    session_id: str,
    *,
    strategy: Mapping[str, Any] | None = None,
    system_instructions: Sequence[str] = (),
    limit: int,
) -> dict[str, Any]:
    """An explicit compaction (``memory.compact``); a no-op says why."""
    session = await _session_strategy(actor, session_id)
    config = await _resolve(actor, session, strategy)
    plan = await _run(actor, session_id, config, list(system_instructions), limit, force=True)
    record = plan.record or {}
    return {
        "compacted": plan.record is not None,
        "strategy": plan.strategy,
        "reason": plan.reason,
        "event_count": plan.event_count,
        "items_removed": plan.items_removed,
        "tokens_before": plan.tokens_before,
        "tokens_after": plan.tokens_after,
        "boundary_seq": record.get("boundary_seq"),
    }


def _token_total(view: SessionView, ctx: WorkingContext) -> int:
    """Tokens of ``ctx`` from the stored per-event counts; only messages a compaction
    rewrote, the memory block and the instructions are tokenised here."""
    counter = get_counter()
    from_seq = load_from_seq(view.record)  # events before it are behind the memory block
    included = [
        e
        for e in view.events
        if e.action != "compaction" and (from_seq is None or e.seq >= from_seq)
    ]
    total = sum(e.token_count or 0 for e in included)
    compacted = [m for m in ctx.messages if m.compacted]
    if compacted:
        by_key: dict[tuple[str, ...], SessionEvent] = {}
        for e in included:
            if e.action == "tool_result" and e.tool_call_id:
                by_key[("tool", e.tool_call_id)] = e
            elif e.action == "tool_call_request":
                by_key[("call", *(c.id for c in e.tool_calls or ()))] = e
        for m in compacted:
            original = by_key.get(_message_key(m))
            if original is not None:
                total += counter.count_message(m) - (original.token_count or 0)
    return total + sum(MESSAGE_OVERHEAD + counter.count(s) for s in ctx.system_instructions)


def _message_key(message: ContextMessage) -> tuple[str, ...]:
    if message.role == "tool":
        return ("tool", message.tool_call_id or "")
    return ("call", *(c.id for c in message.tool_calls or ()))
