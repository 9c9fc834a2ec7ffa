"""``SessionWrites``: the actor's writes that the core plans (I/O shell).

A mixin of ``AgentActor``: a new session, appended and imported events and the end of a
turn are planned by the core (``plan_events``, ``prepare_turn``/``plan_turn``), then
queued for the actor's group commit; only the plans of a large content run on a worker
thread.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, Final, Literal, Protocol, TypeVar

import msgspec

from ..compaction.triggers import usage_prompt_tokens
from ..core.agent_core import AgentCore
from ..core.decisions import AppendPlan, PreparedTurn
from ..core.needs import Known, Need
from ..mirror_io.writer import validate_new_session_id
from ..storage.store import AgentStore
from ..values.context import WorkingContext
from ..values.errors import InvalidParamsError
from ..values.events import ContextMessage, SessionEvent
from ..values.plans import AppendResult, NewSession
from .compaction_turns import CompactionTurns
from .mirror_link import MirrorLink
from .off_loop import (
    LARGE_CONTENT_CHARS,
    ExecutorHost,
    instructions_counted,
    off_loop_if_large,
)
from .usage_ledger import UsageLedger

__all__ = [
    "SessionWrites",
    "WriteRunner",
    "persist_from_wire",
]

T = TypeVar("T")

_encode = msgspec.json.encode


ITEM_CHARS: Final = 128
"""What planning one item costs, in characters counted: validating, numbering and
counting an event takes about 3-5 us here, as counting about 128 characters does
(10,000 small events were planned on the event loop in 27-57 ms)."""


def _plan_size(
    items: Sequence[SessionEvent | ContextMessage], content_bound: int | None = None
) -> int:
    """The size ``off_loop_if_large`` weighs: the characters of the items' content and
    arguments plus ``ITEM_CHARS`` per item. Enough items are large by their number alone
    (their characters are not walked on the loop: 200,000 messages took 80 ms).

    ``content_bound``: the size of the text the items were decoded from (the RPC frame's).
    What the walk counts is at most ``REENCODED_GROWTH`` times that (arguments given as
    objects are counted re-encoded, and a number may come back longer than it was sent).
    When that keeps the items small, it is the size given and their characters are not
    walked: what the size decides (below ``LARGE_CONTENT_CHARS`` or not) is the same, and
    the walk was a tenth of a sequential persist's loop time."""
    weight = ITEM_CHARS * len(items)
    if weight >= LARGE_CONTENT_CHARS:
        return weight
    if content_bound is not None:
        most = weight + REENCODED_GROWTH * content_bound
        if most < LARGE_CONTENT_CHARS:
            return most
    return weight + _content_chars(items)


REENCODED_GROWTH: Final = 5
"""How much longer than its JSON text a value may be once decoded and encoded again by
msgspec: whitespace and escapes only shrink, a number grows at most 4.5-fold (``1e15``
comes back as ``1000000000000000.0``)."""


def _content_chars(items: Iterable[SessionEvent | ContextMessage]) -> int:
    """Characters of content and tool-call arguments (not validated yet: a local caller
    may pass anything the validation accepts, objects too, or refuses, naming the field;
    a value of the wrong type counts as nothing)."""
    total = 0
    for item in items:  # a loop, not a generator: this runs for every persist
        if isinstance(item, ContextMessage | SessionEvent):
            content, calls = item.content, item.tool_calls
        elif isinstance(item, dict):
            content, calls = item.get("content"), item.get("tool_calls")
        else:
            continue
        if isinstance(content, str):
            total += len(content)
        if calls and isinstance(calls, list | tuple):
            total += _arguments_chars(calls)
    return total


def _arguments_chars(calls: Sequence[Any]) -> int:
    total = 0
    for call in calls:
        if isinstance(call, dict):
            arguments = call.get("arguments")
        else:
            arguments = getattr(call, "arguments", None)
        if isinstance(arguments, str):
            total += len(arguments)
        elif isinstance(arguments, dict | list) and arguments:
            # Not JSON: nothing here; the validation refuses it, naming its field.
            with contextlib.suppress(TypeError, ValueError, OverflowError, msgspec.EncodeError):
                total += len(_encode(arguments))
    return total


def _no_prompt_size(usage: Mapping[str, Any] | None) -> bool:
    """Whether a persist's pressure check counts the context itself: no ``usage``, or
    one without a prompt size (only output tokens, say). A malformed count is refused
    by the check, before any count."""
    if usage is None:
        return True
    try:
        return usage_prompt_tokens(usage) is None
    except InvalidParamsError:
        return False


class WriteRunner(Protocol):
    """What the writes need of their actor."""

    @property
    def agent_id(self) -> str: ...

    @property
    def context_limit(self) -> int: ...

    @property
    def host(self) -> ExecutorHost: ...

    @property
    def core(self) -> AgentCore: ...

    @property
    def mirror(self) -> MirrorLink: ...

    @property
    def compactions(self) -> CompactionTurns: ...

    async def decide(
        self,
        ask: Callable[[Known], T | Need],
        known: Known | None = None,
        first: Need | None = None,
    ) -> T: ...

    async def commit(self, plan: AppendPlan) -> AppendResult: ...

    @property
    def usage(self) -> UsageLedger: ...

    async def run_write(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T: ...

    async def run_read(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T: ...


class SessionWrites:
    """Create sessions, append and import events, persist the end of a turn."""

    async def create_session(
        self: WriteRunner, metadata: dict[str, Any] | None = None, session_id: str | None = None
    ) -> str:
        """Create a session and return its id (``ConflictError`` if the id exists)."""
        if session_id is not None:
            validate_new_session_id(session_id)  # it names the session's mirror folder
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidParamsError("metadata: must be an object")
        sid = session_id or str(uuid.uuid4())
        return await self.run_write(lambda s: s.create_session(metadata, sid))

    async def append_events(
        self: WriteRunner,
        session_id: str,
        events: Sequence[SessionEvent],
        *,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        """Append events atomically (all or none); the callers' seq and session_id are ignored.

        Ids and timestamps are kept when given, assigned otherwise. An empty list is a
        no-op (even for an unknown session). A repeated ``idempotency_key`` returns the
        first call's result without writing; an ``expected_last_seq`` that is not the
        session's last seq raises ``ConflictError`` with ``data["last_seq"]``.
        """
        plan = await off_loop_if_large(
            self.host.executor,
            _plan_size(events),
            lambda: self.core.plan_events(
                session_id,
                events,
                expected_last_seq=expected_last_seq,
                idempotency_key=idempotency_key,
            ),
        )
        if plan.batch.writes_nothing:
            return await self.decide(lambda known: self.core.unwritten(plan, known))
        return await self.commit(plan)

    async def import_events(
        self: WriteRunner,
        events: Sequence[SessionEvent],
        *,
        session_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> tuple[str, AppendResult]:
        """Create a session holding ``events`` in one transaction (all of it, or nothing)."""
        if session_id is not None:
            validate_new_session_id(session_id)
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidParamsError("metadata: must be an object")
        sid = session_id or str(uuid.uuid4())
        create = NewSession(self.agent_id, metadata)
        # An import is planned as an append is: a folder of many events on a worker.
        plan = await off_loop_if_large(
            self.host.executor,
            _plan_size(events),
            lambda: self.core.plan_events(sid, events, create=create),
        )
        return sid, await self.commit(plan)

    async def persist_working_context(
        self: WriteRunner,
        session_id: str,
        ctx: WorkingContext,
        *,
        idempotency_key: str | None = None,
        usage: dict[str, Any] | None = None,
        on_conflict: Literal["append", "reject"] = "append",
        strategy: Mapping[str, Any] | None = None,
        model: str | None = None,
    ) -> AppendResult:
        """Write exactly ``ctx.get_new_messages()`` as events, in one transaction.

        ``on_conflict="reject"`` fails with ``ConflictError`` (writing nothing) when the
        session moved past ``ctx.base_seq``; ``"append"`` appends after whatever is there.
        The session's pressure flag is set when the prompt size calls for compaction under
        the effective strategy (``strategy`` is the request level): the size ``usage``
        reports in any provider shape, or the server's own count of the context. A flag
        set under ``summarize`` starts the summary in the background at once. The end of
        the turn writes ``working_context_snapshot.json`` (with the mirror on).
        ``usage`` (any provider shape) is stored with the turn, with ``model``; the answer's
        ``budget_exceeded`` says the session or agent is now past its budget.
        """
        return await _persist(
            self, session_id, ctx, idempotency_key, usage, on_conflict, strategy, False, None,
            model,
        )  # fmt: skip


def persist_from_wire(
    actor: WriteRunner,
    session_id: str,
    ctx: WorkingContext,
    *,
    idempotency_key: str | None = None,
    usage: dict[str, Any] | None = None,
    on_conflict: Literal["append", "reject"] = "append",
    strategy: Mapping[str, Any] | None = None,
    content_bound: int | None = None,
    model: str | None = None,
) -> Coroutine[Any, Any, AppendResult]:
    """``actor.persist_working_context`` for the RPC layer (``turn.persist``): the new
    messages come straight from ``values.validation.parse_messages`` (the params model
    ran it), so they are not checked again; ``content_bound`` is the size of the frame
    they were decoded from, so a small turn is known to be small without a walk of its
    text (``_plan_size``). Wire concerns, kept out of the actor's public method."""
    return _persist(
        actor, session_id, ctx, idempotency_key, usage, on_conflict, strategy, True, content_bound,
        model,
    )  # fmt: skip


async def _persist(
    actor: WriteRunner,
    session_id: str,
    ctx: WorkingContext,
    idempotency_key: str | None,
    usage: dict[str, Any] | None,
    on_conflict: Literal["append", "reject"],
    strategy: Mapping[str, Any] | None,
    validated: bool,
    content_bound: int | None,
    model: str | None = None,
) -> AppendResult:
    """The end of a turn (``persist_working_context``); ``validated``: the new messages
    are ``parse_messages``' own (not checked again)."""
    size = _plan_size(ctx.get_new_messages(), content_bound)

    def prepare() -> PreparedTurn:
        return actor.core.prepare_turn(
            session_id,
            ctx,
            usage=usage,
            on_conflict=on_conflict,
            idempotency_key=idempotency_key,
            validated=validated,
            strategy=strategy,
            count=size >= LARGE_CONTENT_CHARS,  # off the loop, then
            model=model,
        )

    # The small turn (the sequential path) is prepared, planned and queued without
    # a coroutine or a context manager of its own: each step awaits only what it must.
    if size < LARGE_CONTENT_CHARS:
        turn = prepare()
    else:
        turn = await off_loop_if_large(actor.host.executor, size, prepare)
    # The pressure check counts the instructions, unless the caller reported a size.
    counted = turn.instructions if _no_prompt_size(usage) else ()
    step: AppendPlan | AppendResult
    if not counted:
        known = Known()
        first = actor.core.plan_turn(turn, known)
        if isinstance(first, Need):  # a read first (a cold cache): the pump
            step = await actor.decide(lambda k: actor.core.plan_turn(turn, k), known, first)
        else:
            step = first
    else:
        async with instructions_counted(actor.host.executor, counted):
            step = await actor.decide(lambda known: actor.core.plan_turn(turn, known))
    if isinstance(step, AppendResult):
        return step
    result = await actor.commit(step)
    if step.batch.compaction_required:
        actor.compactions.prime(actor, session_id, list(ctx.system_instructions), strategy)
    actor.compactions.report_futile(session_id)
    if (
        turn.recorded is not None
        and result.seqs
        and await actor.usage.after_turn(actor, session_id, turn.recorded)
    ):
        result = msgspec.structs.replace(result, budget_exceeded=True)
    return result
