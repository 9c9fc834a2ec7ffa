"""The OpenAI Agents SDK's ``Session`` protocol, backed by session-server.

Two lines, as with the SDK's own ``SQLiteSession``::

    session = SessionServerSession("user-42", url="ws://127.0.0.1:8765", agent_id="support")
    result = await Runner.run(agent, "Hello", session=session)

or, in the server's process, with no RPC: ``SessionServerSession("user-42",
registry=registry, agent_id="support")``. A third, optional line reports each model call's
token usage so the server's token-pressure triggers fire (the SDK passes no usage to
``add_items``)::

    result = await Runner.run(agent, "Hello", session=session, hooks=session.usage_hooks())

Semantics (those of ``SQLiteSession``; the differences are listed last):

- ``add_items(items)`` is one ``turn.persist``: the batch is written atomically or not at
  all. Items map to messages with :func:`adapters.openai_responses.from_items`: the items
  of one model turn (reasoning, text, parallel function calls, hosted-tool calls, items of
  unknown types) become one assistant message, tool outputs ``tool`` messages, and every
  message keeps its items verbatim in ``metadata["provider_items"]`` when its fields do not
  give them back, so nothing is lost and the events stay usable by compaction, rendering
  for other providers and the memory view.
- ``get_items(limit=None)`` without a strategy gives back exactly the items ``add_items``
  got, in order (read from the stored events, compaction records skipped); ``limit`` (or
  ``session_settings.limit``) keeps the newest ``limit`` items (0: none; negative: all),
  read from the newest events only (``events.load`` with ``tail``), so a limited read costs
  what the limit costs, not what the history does.
- ``pop_item()`` removes and returns the newest item, atomically (``events.pop`` guarded
  by the id of the event it read: a concurrent writer makes it retry, never lose an
  item). When that event holds several items (one model turn), the event is rewritten in
  place without its last item. Compaction records are never popped or returned.
- ``clear_session()`` deletes every event at once (``session.clear``); the session, its
  metadata and its strategy stay.

With ``strategy`` (for example ``{"mode": "summarize"}`` or ``{"mode": "compact"}``) the
strategy is stored on the session when it is first written, and ``get_items`` returns the
compacted history as valid items: the working context that ``context.build`` gives for
that strategy (placeholders for old tool outputs, the memory block as a leading ``system``
message, the raw tail), so the SDK gets token-bounded memory without OpenAI's compaction
endpoint. Items the compaction replaced are rendered from the message fields; the rest
stay verbatim.

``session_settings`` is taken as the SDK takes it: a ``SessionSettings`` or a dict of its
fields (``{"limit": 20}``), normalised to ``SessionSettings``; an unknown key or another
type is refused with the SDK's ``TypeError`` ("Unknown session settings: ...").

Remote sessions talk over a :class:`session_server.client.sync_client.SyncSessionClient`, whose
connection lives on its own thread: the session works from ``Runner.run`` on any loop and
from ``Runner.run_sync`` (a new loop per call). One session object holds one connection,
whatever the concurrency (concurrent first calls share one connect); ``close()`` (or
``await aclose()`` from async code) ends it. ``reconnect_budget`` (seconds, 30 by default)
is how long a call waits for a server that is down or restarting before it raises; it is
given to the client.

An in-process session (``registry=``) runs its calls on the loop of the registry (the loop
running when the session was made, or else the loop of its first call), so it too works
from ``Runner.run_sync`` or from threads with loops of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, cast

from agents import RunHooks
from agents.items import ModelResponse, TResponseInputItem
from agents.memory import SessionSettings

from session_server.adapters.openai_responses import from_items, to_input_items
from session_server.concurrency.worker_threads import default_threads
from session_server.integrations.home_loop import HomeLoop
from session_server.values.codec import event_to_message, message_to_event, new_event_id
from session_server.values.context import WorkingContext
from session_server.values.errors import ConflictError, InvalidParamsError, NotFoundError
from session_server.values.events import ACTIONS, ContextMessage, SessionEvent

if TYPE_CHECKING:
    from agents import Agent
    from agents.run_context import RunContextWrapper

    from session_server.client.sync_client import SyncSessionClient
    from session_server.runtime.actor import AgentActor
    from session_server.runtime.registry import ActorRegistry

__all__ = ["SessionServerSession", "SessionUsageHooks"]

_ITEM_ACTIONS: Final = [a for a in ACTIONS if a != "compaction"]
_PAGE: Final = 500
# Conversion is linear in the items and ran on the caller's event loop (the server's own,
# for a local session): 200k items read held it 390 ms, 50k added 200 ms. Reads convert
# each message on its own, so they go in pieces of this many, yielding to the loop
# between; adding groups items across messages, so more than this many are converted on
# a worker thread.
ON_LOOP_ITEMS: Final = 256
T = TypeVar("T")
S = TypeVar("S")


async def _converted(count: int, convert: Callable[[], T]) -> T:
    """``convert()``, on a worker thread when it converts more than ``ON_LOOP_ITEMS``."""
    if count <= ON_LOOP_ITEMS:
        return convert()
    return await default_threads().run(convert)


async def _in_pieces(
    values: Sequence[S], convert: Callable[[Sequence[S]], list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """``convert(values)`` for a ``convert`` that maps each value on its own, run on
    ``ON_LOOP_ITEMS`` values at a time with a yield to the event loop between."""
    out: list[dict[str, Any]] = []
    for start in range(0, len(values), ON_LOOP_ITEMS):
        if start:
            await asyncio.sleep(0)
        out += convert(values[start : start + ON_LOOP_ITEMS])
    return out


_POP_ATTEMPTS: Final = 8
RECONNECT_BUDGET: Final = 30.0
"""Seconds a remote session's call waits for its server by default."""


def coerce_session_settings(value: SessionSettings | dict[str, Any] | None) -> SessionSettings:
    """``SessionSettings`` from what the SDK's sessions accept: ``None`` (the defaults), a
    ``SessionSettings`` (kept as given) or a dict of its fields; anything else, or a dict
    with an unknown key, is the ``TypeError`` the SDK raises."""
    if value is None:
        return SessionSettings()
    if isinstance(value, SessionSettings):
        return value
    if not isinstance(value, dict):
        raise TypeError(
            f"session must be a SessionSettings instance or a dict, got {type(value).__name__}"
        )
    known = {f.name for f in dataclasses.fields(SessionSettings) if f.init}
    unknown = sorted(str(name) for name in value if name not in known)
    if unknown:
        raise TypeError(f"Unknown session settings: {', '.join(unknown)}")
    return SessionSettings(**value)


class _Backend(Protocol):
    """What the session needs from session-server, remote or local."""

    async def ensure(self, session_id: str, metadata: dict[str, Any] | None) -> None: ...
    async def set_strategy(self, session_id: str, strategy: dict[str, Any]) -> None: ...
    async def persist(
        self, session_id: str, messages: list[ContextMessage], usage: dict[str, Any] | None
    ) -> None: ...
    async def load(
        self, session_id: str, *, limit: int | None, after_seq: int | None
    ) -> list[SessionEvent]: ...
    async def build(self, session_id: str, strategy: dict[str, Any]) -> WorkingContext: ...
    async def pop(
        self, session_id: str, event_id: str, replace_with: SessionEvent | None
    ) -> SessionEvent | None: ...
    async def clear(self, session_id: str) -> None: ...
    async def fork(
        self, session_id: str, at_seq: int | None, new_session_id: str | None
    ) -> str: ...
    async def tools(self, adapter: str) -> list[dict[str, Any]]: ...
    async def tool_call(self, session_id: str, name: str, arguments: Any) -> dict[str, Any]: ...
    def close(self) -> None: ...
    async def aclose(self) -> None: ...


class _Remote:
    def __init__(
        self, url: str | Sequence[str], agent_id: str, token: str | None, budget: float
    ) -> None:
        from session_server.client.sync_client import SyncSessionClient

        self.client: SyncSessionClient = SyncSessionClient(
            url, agent_id, token=token, reconnect_budget=budget
        )

    async def ensure(self, session_id: str, metadata: dict[str, Any] | None) -> None:
        await self.client.acall("get_or_create_session", session_id, metadata)

    async def set_strategy(self, session_id: str, strategy: dict[str, Any]) -> None:
        await self.client.acall("set_strategy", session_id, strategy)

    async def persist(
        self, session_id: str, messages: list[ContextMessage], usage: dict[str, Any] | None
    ) -> None:
        await self.client.acall(
            "persist_turn", session_id, messages, usage=usage, idempotency_key=new_event_id()
        )

    async def load(
        self, session_id: str, *, limit: int | None, after_seq: int | None
    ) -> list[SessionEvent]:
        events: list[SessionEvent] = await self.client.acall(
            "load_events",
            session_id,
            limit=limit,
            tail=after_seq is None,
            after_seq=after_seq,
            actions=_ITEM_ACTIONS,
        )
        return events

    async def build(self, session_id: str, strategy: dict[str, Any]) -> WorkingContext:
        ctx: WorkingContext = await self.client.acall(
            "build_context", session_id, strategy=strategy
        )
        return ctx

    async def pop(
        self, session_id: str, event_id: str, replace_with: SessionEvent | None
    ) -> SessionEvent | None:
        event: SessionEvent | None = await self.client.acall(
            "pop_event", session_id, event_id=event_id, replace_with=replace_with
        )
        return event

    async def clear(self, session_id: str) -> None:
        await self.client.acall("clear_session", session_id)

    async def fork(self, session_id: str, at_seq: int | None, new_session_id: str | None) -> str:
        result: dict[str, Any] = await self.client.acall(
            "fork_session", session_id, at_seq=at_seq, new_session_id=new_session_id
        )
        return str(result["session_id"])

    async def tools(self, adapter: str) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = await self.client.acall("memory_tools", adapter)
        return tools

    async def tool_call(self, session_id: str, name: str, arguments: Any) -> dict[str, Any]:
        result: dict[str, Any] = await self.client.acall("tool_call", session_id, name, arguments)
        return result

    def close(self) -> None:
        self.client.close()

    async def aclose(self) -> None:
        await self.client.aclose()


class _Local:
    """The registry's actor, called on the registry's loop whatever loop the caller is on
    (``Runner.run_sync`` runs each call on a new loop; the registry's actors, stores and
    locks belong to the loop they were made on)."""

    def __init__(self, registry: ActorRegistry, agent_id: str) -> None:
        self.registry = registry
        self.agent_id = agent_id
        self.home = HomeLoop()

    async def _on_home(self, call: Coroutine[Any, Any, T]) -> T:
        return await self.home.run(call)

    async def _actor(self) -> AgentActor:
        return await self.registry.get(self.agent_id)

    async def ensure(self, session_id: str, metadata: dict[str, Any] | None) -> None:
        await self._on_home(self._ensure(session_id, metadata))

    async def _ensure(self, session_id: str, metadata: dict[str, Any] | None) -> None:
        actor = await self._actor()
        if await actor.get_session(session_id) is None:
            # Created meanwhile by another writer: that is all we wanted.
            with contextlib.suppress(ConflictError):
                await actor.create_session(metadata=metadata, session_id=session_id)

    async def set_strategy(self, session_id: str, strategy: dict[str, Any]) -> None:
        await self._on_home(self._set_strategy(session_id, strategy))

    async def _set_strategy(self, session_id: str, strategy: dict[str, Any]) -> None:
        await (await self._actor()).set_strategy(strategy, session_id)

    async def persist(
        self, session_id: str, messages: list[ContextMessage], usage: dict[str, Any] | None
    ) -> None:
        await self._on_home(self._persist(session_id, messages, usage))

    async def _persist(
        self, session_id: str, messages: list[ContextMessage], usage: dict[str, Any] | None
    ) -> None:
        ctx = WorkingContext()
        ctx.add_messages(messages)
        await (await self._actor()).persist_working_context(session_id, ctx, usage=usage)

    async def load(
        self, session_id: str, *, limit: int | None, after_seq: int | None
    ) -> list[SessionEvent]:
        return await self._on_home(self._load(session_id, limit=limit, after_seq=after_seq))

    async def _load(
        self, session_id: str, *, limit: int | None, after_seq: int | None
    ) -> list[SessionEvent]:
        actor = await self._actor()
        if await actor.get_session(session_id) is None:
            raise NotFoundError.session(session_id)
        return await actor.load_events(
            session_id,
            limit=limit,
            tail=after_seq is None,
            after_seq=after_seq,
            actions=_ITEM_ACTIONS,
        )

    async def build(self, session_id: str, strategy: dict[str, Any]) -> WorkingContext:
        return await self._on_home(self._build(session_id, strategy))

    async def _build(self, session_id: str, strategy: dict[str, Any]) -> WorkingContext:
        return await (await self._actor()).build_working_context(session_id, strategy=strategy)

    async def pop(
        self, session_id: str, event_id: str, replace_with: SessionEvent | None
    ) -> SessionEvent | None:
        return await self._on_home(self._pop(session_id, event_id, replace_with))

    async def _pop(
        self, session_id: str, event_id: str, replace_with: SessionEvent | None
    ) -> SessionEvent | None:
        actor = await self._actor()
        return await actor.pop_event(session_id, event_id=event_id, replace_with=replace_with)

    async def clear(self, session_id: str) -> None:
        await self._on_home(self._clear(session_id))

    async def _clear(self, session_id: str) -> None:
        await (await self._actor()).clear_session(session_id)

    async def fork(self, session_id: str, at_seq: int | None, new_session_id: str | None) -> str:
        return await self._on_home(self._fork(session_id, at_seq, new_session_id))

    async def _fork(self, session_id: str, at_seq: int | None, new_session_id: str | None) -> str:
        actor = await self._actor()
        result = await actor.fork_session(session_id, at_seq=at_seq, new_session_id=new_session_id)
        return result.session_id

    async def tools(self, adapter: str) -> list[dict[str, Any]]:
        from session_server.adapters.tools import tool_definitions
        from session_server.runtime.model_tools import MODEL_TOOLS

        return tool_definitions(adapter, (t.spec for t in MODEL_TOOLS.values()))

    async def tool_call(self, session_id: str, name: str, arguments: Any) -> dict[str, Any]:
        return await self._on_home(self._tool_call(session_id, name, arguments))

    async def _tool_call(self, session_id: str, name: str, arguments: Any) -> dict[str, Any]:
        return await (await self._actor()).tool_call(session_id, name, arguments)

    def close(self) -> None:
        return None  # the registry belongs to the caller

    async def aclose(self) -> None:
        return None


def _items_of(events: Sequence[SessionEvent]) -> list[dict[str, Any]]:
    messages = [m for m in (event_to_message(e) for e in events) if m is not None]
    return to_input_items(messages)


class SessionServerSession:
    """An OpenAI Agents SDK session stored in session-server (see the module docstring).

    Remote: ``SessionServerSession(session_id, url=..., agent_id=..., token=None,
    strategy=None, reconnect_budget=30.0)``; local: ``SessionServerSession(session_id,
    registry=..., agent_id=...)``. ``metadata`` is given to the session when this object
    creates it; ``session_settings`` as for ``SQLiteSession`` (a ``SessionSettings`` or a
    dict of its fields).
    """

    session_id: str
    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        *,
        agent_id: str,
        url: str | Sequence[str] | None = None,
        registry: ActorRegistry | None = None,
        token: str | None = None,
        strategy: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        reconnect_budget: float = RECONNECT_BUDGET,
    ) -> None:
        if (url is None) == (registry is None):
            raise InvalidParamsError(
                "url/registry: give exactly one (url for a server, registry for in-process)",
                data={"field": "url"},
            )
        if strategy is not None and not isinstance(strategy, dict):
            raise InvalidParamsError("strategy: must be an object", data={"field": "strategy"})
        if (
            isinstance(reconnect_budget, bool)
            or not isinstance(reconnect_budget, int | float)
            or not 0 <= reconnect_budget < math.inf
        ):
            raise InvalidParamsError(
                "reconnect_budget: must be a number of seconds, 0 or more",
                data={"field": "reconnect_budget"},
            )
        self.session_id = session_id
        self.agent_id = agent_id
        self.strategy = strategy
        self.metadata = metadata
        self.session_settings = coerce_session_settings(session_settings)
        self.reconnect_budget = float(reconnect_budget)
        self._backend: _Backend = (
            _Remote(url, agent_id, token, self.reconnect_budget)
            if url is not None
            else _Local(registry, agent_id)  # type: ignore[arg-type]
        )
        self._ensured = False
        self._usage: dict[str, Any] | None = None
        # What ``fork`` needs to make a session object like this one.
        self._url, self._registry, self._token = url, registry, token

    # -- the Session protocol ------------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The history as items: exactly what was added (no strategy), or the compacted
        working context (with a strategy); the newest ``limit`` items when given."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        if limit == 0:
            return []
        limited = limit is not None and limit > 0
        try:
            if self.strategy is not None:
                items = await self._built_items()
            elif limited:
                assert limit is not None
                items = await self._newest_items(limit)
            else:
                items = await self._all_items()
        except NotFoundError:
            return []  # nothing was ever added
        if limited:
            items = items[-cast(int, limit) :]
        return cast(list[TResponseInputItem], items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Write ``items`` as one atomic turn (with the usage reported since the last one)."""
        if not items:
            return
        given = list(items)
        messages = await _converted(len(given), lambda: from_items(given))
        await self._ensure()
        usage, self._usage = self._usage, None
        try:
            await self._backend.persist(self.session_id, messages, usage)
        except NotFoundError:  # deleted behind our back: create it again, once
            self._ensured = False
            await self._ensure()
            await self._backend.persist(self.session_id, messages, usage)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item (compaction records are skipped), atomically."""
        for _ in range(_POP_ATTEMPTS):
            try:
                tail = await self._backend.load(self.session_id, limit=1, after_seq=None)
            except NotFoundError:
                return None
            if not tail:
                return None
            event = tail[-1]
            items = _items_of([event])
            replacement = None
            if len(items) > 1:
                [rest] = from_items(items[:-1])  # one event's items form one message
                replacement = message_to_event(self.session_id, rest)
            try:
                await self._backend.pop(self.session_id, event.id, replacement)
            except ConflictError:
                continue  # another writer changed the tail: read it again
            return cast(TResponseInputItem, items[-1])
        raise ConflictError(
            f"pop_item: the tail of session {self.session_id!r} kept changing",
            data={"field": "session_id"},
        )

    async def clear_session(self) -> None:
        """Delete every item at once; the session, its metadata and strategy stay."""
        try:
            await self._backend.clear(self.session_id)
        except NotFoundError:
            return

    # -- recall tools ------------------------------------------------------------------------
    async def memory_tools(self, adapter: str = "openai-responses") -> list[dict[str, Any]]:
        """The server's model tools (``recall_search``, ``recall_expand``, ...) in the
        format of ``adapter`` (``memory.tools``); the Agents SDK's own ``FunctionTool``
        can wrap each one, running it with ``tool_call``."""
        return await self._backend.tools(adapter)

    async def tool_call(self, name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
        """Run one model tool in this session: ``{content, is_error}``
        (``memory.tool_call``); ``arguments`` as the model sent them."""
        await self._ensure()
        return await self._backend.tool_call(self.session_id, name, arguments)

    # -- usage -----------------------------------------------------------------------------
    def report_usage(self, usage: dict[str, Any]) -> None:
        """Usage of a model call (``input_tokens``/``prompt_tokens``, ...), sent with the
        next ``add_items`` so the server's token-pressure trigger sees it."""
        self._usage = dict(usage)

    def usage_hooks(self) -> SessionUsageHooks:
        """``RunHooks`` that report each model call's usage to this session."""
        return SessionUsageHooks(self)

    # -- branches ----------------------------------------------------------------------------
    async def fork(
        self, *, at_seq: int | None = None, new_session_id: str | None = None
    ) -> SessionServerSession:
        """A new session object on a fork of this session (``session.fork``): its items
        are this session's (up to ``at_seq``, default all), and from then on the two
        diverge. It has this object's server or registry, strategy and settings; a remote
        one opens its own connection (close it as this one)."""
        await self._ensure()
        new_id = await self._backend.fork(self.session_id, at_seq, new_session_id)
        if self._url is not None:
            return SessionServerSession(
                new_id, agent_id=self.agent_id, url=self._url, token=self._token,
                strategy=self.strategy, session_settings=self.session_settings,
                reconnect_budget=self.reconnect_budget,
            )  # fmt: skip
        return SessionServerSession(
            new_id, agent_id=self.agent_id, registry=self._registry, strategy=self.strategy,
            session_settings=self.session_settings,
        )  # fmt: skip

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Close the remote connection (a local session has nothing to close). From async
        code prefer ``await aclose()``, which does not block the running loop."""
        self._backend.close()

    async def aclose(self) -> None:
        """Close the remote connection without blocking the running loop."""
        await self._backend.aclose()

    async def __aenter__(self) -> SessionServerSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- internals ---------------------------------------------------------------------------
    async def _ensure(self) -> None:
        if self._ensured:
            return
        await self._backend.ensure(self.session_id, self.metadata)
        if self.strategy is not None:
            # Stored on the session so the pressure check of each persist uses it too.
            await self._backend.set_strategy(self.session_id, self.strategy)
        self._ensured = True

    async def _all_items(self) -> list[dict[str, Any]]:
        events: list[SessionEvent] = []
        cursor = 0
        while True:
            page = await self._backend.load(self.session_id, limit=_PAGE, after_seq=cursor)
            events.extend(page)
            if len(page) < _PAGE:
                return await _in_pieces(events, _items_of)
            cursor = page[-1].seq

    async def _newest_items(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` items (or all there are), read from the newest events: an
        event holds one item or more (a model turn's), so the last ``limit`` events hold
        enough unless some hold none; then twice as many are read, up to a page, beyond
        which the history is read in pages."""
        count = limit
        while count <= _PAGE:
            events = await self._backend.load(self.session_id, limit=count, after_seq=None)
            items = await _in_pieces(events, _items_of)
            if len(items) >= limit or len(events) < count:
                return items[-limit:]
            count *= 2
        return (await self._all_items())[-limit:]

    async def _built_items(self) -> list[dict[str, Any]]:
        assert self.strategy is not None
        ctx = await self._backend.build(self.session_id, self.strategy)
        memory = [ContextMessage(role="system", content=s) for s in ctx.system_instructions]
        messages = [*memory, *ctx.messages]
        return await _in_pieces(messages, to_input_items)


class SessionUsageHooks(RunHooks[Any]):
    """Reports every model call's usage to a :class:`SessionServerSession`.

    ``Runner.run(agent, input, session=session, hooks=session.usage_hooks())``. To combine
    with hooks of your own, subclass this class and call ``super().on_llm_end(...)``.
    """

    def __init__(self, session: SessionServerSession) -> None:
        self.session = session

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        usage = response.usage
        report: dict[str, Any] = {
            "input_tokens": int(usage.input_tokens),
            "output_tokens": int(usage.output_tokens),
        }
        cached = getattr(usage.input_tokens_details, "cached_tokens", None)
        if isinstance(cached, int):
            report["cached_tokens"] = cached
        self.session.report_usage(report)
