"""``SessionClient``: one method per RPC method, over an ``RpcConnection``."""

from __future__ import annotations

import contextlib
import uuid
import warnings
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal, overload

import msgspec

from ..values.codec import new_event_id
from ..values.context import WorkingContext
from ..values.events import ContextMessage, SessionEvent
from ..values.plans import AppendResult
from .connection import RpcConnection
from .errors import ConnectionLostError
from .live import LiveSubscription, StreamWriter
from .subscription import Subscription

__all__ = ["SessionClient", "SessionPage", "strategy_args"]


def strategy_args(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str | None, dict[str, Any] | None, bool]:
    """``(session_id, strategy, old_order)`` of a ``set_strategy`` call.

    The order is ``(session_id, strategy)``; the old ``(strategy, session_id=None)`` is
    told apart by type (a dict first, or a string second, or a dict with ``session_id``
    given by name) and reported by ``old_order``. A lone ``None`` clears the agent
    default in either order. ``TypeError`` names what is wrong otherwise."""
    unknown = set(kwargs) - {"session_id", "strategy"}
    if unknown or len(args) + len(kwargs) > 2 or len(args) > 2:
        raise TypeError(
            "set_strategy(session_id, strategy) takes two arguments"
            + (f"; unknown: {', '.join(sorted(unknown))}" if unknown else "")
        )
    named = dict(kwargs)
    old = False
    if len(args) == 2:
        first, second = args
        old = isinstance(first, dict) or isinstance(second, str)
        named = (
            {"strategy": first, "session_id": second}
            if old
            else dict(session_id=first, strategy=second)
        )
    elif len(args) == 1:
        (first,) = args
        if "strategy" in named:  # set_strategy(session_id, strategy=...)
            if "session_id" in named:
                raise TypeError("set_strategy: session_id given twice")
            named["session_id"] = first
        elif "session_id" in named or isinstance(first, dict):  # the old order
            named["strategy"], old = first, True
        elif first is None:  # set_strategy(None): clear the agent default
            named = {"session_id": None, "strategy": None}
        else:
            named["session_id"] = first
    if "strategy" not in named:
        raise TypeError("set_strategy: strategy is missing (None clears it)")
    session_id, strategy = named.get("session_id"), named["strategy"]
    if session_id is not None and not isinstance(session_id, str):
        raise TypeError(f"session_id: expected a string or None, not {type(session_id).__name__}")
    if strategy is not None and not isinstance(strategy, dict):
        raise TypeError(f"strategy: expected a dict or None, not {type(strategy).__name__}")
    return session_id, strategy, old


def _set(**params: Any) -> dict[str, Any]:
    """The params that are not ``None`` (omitted params take the server's default)."""
    return {k: v for k, v in params.items() if v is not None}


class SessionPage(msgspec.Struct):
    """One page of ``session.list``; ``next_offset`` and ``next_cursor`` are ``None`` on
    the last page."""

    sessions: list[dict[str, Any]]
    total: int | None  # None: asked with count=False
    next_offset: int | None = None
    next_cursor: str | None = None


class SessionClient(RpcConnection):
    """A connection to one agent (or to ``/v1`` with ``agent_id=None``).

    ``SessionClient(url, agent_id, *, token=None, max_size=16 MiB, open_timeout=10.0,
    reconnect_budget=30.0, retry_delay=0.05, max_retry_delay=2.0, connect_retries=None)``;
    the connection itself is ``RpcConnection``'s (``connect``, ``close``, ``call``), and
    reconnects on its own within ``reconnect_budget`` seconds (see ``connection``).
    ``url`` may be a list of URLs (the nodes of a cluster): the client uses the first that
    answers and moves on to the next after a dropped connection or a ``not_owner``
    refusal (``failover``); idempotency keys keep resent writes exactly-once.
    """

    # -- sessions ------------------------------------------------------------------------
    async def create_session(
        self,
        metadata: dict[str, Any] | None = None,
        session_id: str | None = None,
        *,
        if_exists: Literal["error", "return"] = "error",
    ) -> str:
        """Create a session and return its id. An existing ``session_id`` raises
        ``ConflictError``, or with ``if_exists="return"`` is simply returned.

        Without ``session_id`` the client draws one (a random UUID, as the server would)
        and asks ``if_exists="return"``: no other session can have it, and a request
        resent after a lost connection returns the session the first one made instead of
        making a second (``replay``)."""
        if session_id is None:
            session_id, if_exists = str(uuid.uuid4()), "return"
        result = await self.call(
            "session.create",
            _set(
                metadata=metadata,
                session_id=session_id,
                if_exists=None if if_exists == "error" else if_exists,
            ),
        )
        return str(result["session_id"])

    async def get_or_create_session(
        self, session_id: str, metadata: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The session ``session_id``, created (with ``metadata``) when it does not exist:
        ``session.create`` with ``if_exists: "return"``. ``created`` says which happened."""
        params = _set(session_id=session_id, metadata=metadata, if_exists="return")
        return dict(await self.call("session.create", params))

    async def get_session(self, session_id: str) -> dict[str, Any]:
        """The session object; ``NotFoundError`` when it does not exist."""
        return dict(await self.call("session.get", {"session_id": session_id}))

    async def list_sessions(
        self,
        *,
        metadata: dict[str, Any] | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Sessions, most recently updated first (one page with ``limit``/``offset``; every
        one, page after page, without them), keeping those whose metadata has every key of
        ``metadata`` with that exact value."""
        if limit is None and not offset:
            return [s async for s in self.iter_sessions(metadata=metadata, page_size=1000)]
        return (await self.session_page(metadata=metadata, limit=limit, offset=offset)).sessions

    async def session_page(
        self,
        *,
        metadata: dict[str, Any] | None = None,
        limit: int | None = None,
        offset: int = 0,
        cursor: str | None = None,
        count: bool = True,
    ) -> SessionPage:
        """One page of ``session.list`` (the server's default size without ``limit``):
        sessions, the total matching (``None`` with ``count=False``, which spares the
        server reading every matching session), the next offset and the next cursor."""
        params = _set(metadata=metadata, limit=limit, offset=offset or None, cursor=cursor)
        if not count:
            params["count"] = False
        result = await self.call("session.list", params)
        sessions = list(result["sessions"])
        raw = result.get("total", offset + len(sessions))
        total = None if raw is None else int(raw)
        return SessionPage(sessions, total, result.get("next_offset"), result.get("next_cursor"))

    async def iter_sessions(
        self, *, metadata: dict[str, Any] | None = None, page_size: int = 100
    ) -> AsyncIterator[dict[str, Any]]:
        """Every matching session, fetched ``page_size`` at a time (by cursor: sessions
        created meanwhile shift nothing)."""
        page = await self.session_page(metadata=metadata, limit=page_size, count=False)
        while True:
            for session in page.sessions:
                yield session
            if page.next_cursor is None:
                return
            page = await self.session_page(
                metadata=metadata, limit=page_size, cursor=page.next_cursor, count=False
            )

    async def update_session(
        self, session_id: str, metadata: dict[str, Any] | None, *, merge: bool = False
    ) -> dict[str, Any]:
        """Replace the session's metadata (``None`` clears it); with ``merge`` set only
        the given keys, the others kept (atomic on the server). The updated session."""
        params: dict[str, Any] = {"session_id": session_id, "metadata": metadata}
        if merge:
            params["merge"] = True
        return dict(await self.call("session.update", params))

    async def delete_session(self, session_id: str) -> bool:
        return bool((await self.call("session.delete", {"session_id": session_id}))["deleted"])

    async def clear_session(self, session_id: str) -> int:
        """Delete every event of the session at once; the session (metadata, strategy)
        stays. Returns how many events were deleted."""
        return int((await self.call("session.clear", {"session_id": session_id}))["deleted"])

    # -- branches ------------------------------------------------------------------------
    async def fork_session(
        self,
        session_id: str,
        *,
        at_seq: int | None = None,
        new_session_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A new session whose history is ``session_id``'s up to ``at_seq`` (default: all
        of it): ``{session_id, parent_session_id, fork_seq, last_seq}``."""
        params = _set(
            session_id=session_id, at_seq=at_seq, new_session_id=new_session_id,
            metadata=metadata,
        )  # fmt: skip
        return dict(await self.call("session.fork", params))

    async def rewind_session(
        self, session_id: str, to_seq: int, *, reason: str | None = None, erase: bool = False
    ) -> dict[str, Any]:
        """Make the session continue from ``to_seq``: ``{session_id, to_seq, rewind_seq,
        abandoned, branch_session_id, requested_to_seq, moved_to_turn_start, erased}``."""
        params = _set(session_id=session_id, to_seq=to_seq, reason=reason, erase=erase)
        return dict(await self.call("session.rewind", params))

    async def session_branches(self, session_id: str) -> list[dict[str, Any]]:
        """The forks and rewind branches of the session: ``[{session_id, fork_seq, kind}]``."""
        result = await self.call("session.branches", {"session_id": session_id})
        return list(result["branches"])

    # -- events --------------------------------------------------------------------------
    async def append_events(
        self,
        session_id: str,
        events: Sequence[SessionEvent | dict[str, Any]],
        *,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
        usage: dict[str, Any] | None = None,
        model: str | None = None,
    ) -> AppendResult:
        """``events.append``; ``usage`` (any provider shape) and ``model`` are stored with
        the last event, as ``persist_turn``'s are with its turn."""
        key = idempotency_key or new_event_id()
        params = _set(
            session_id=session_id,
            events=list(events),
            expected_last_seq=expected_last_seq,
            idempotency_key=key,
            usage=usage,
            model=model,
        )
        return msgspec.convert(await self._write("events.append", params, key), AppendResult)

    async def _write(self, method: str, params: dict[str, Any], key: str) -> Any:
        """A keyed write; a connection error names the key (retry with it: at most once)."""
        try:
            return await self.call(method, params)
        except ConnectionLostError as exc:
            exc.idempotency_key = key
            raise

    async def load_events(
        self,
        session_id: str,
        *,
        limit: int | None = 50,
        tail: bool = True,
        since: int | None = None,
        after_seq: int | None = None,
        actions: Sequence[str] | None = None,
    ) -> list[SessionEvent]:
        """Events oldest first (see ``AgentActor.load_events``)."""
        params = _set(
            session_id=session_id,
            tail=tail,
            since=since,
            after_seq=after_seq,
            actions=list(actions) if actions is not None else None,
        )
        params["limit"] = limit  # null means no limit
        result = await self.call("events.load", params)
        return msgspec.convert(result["events"], list[SessionEvent])

    async def delete_events(self, session_id: str, event_ids: Sequence[str]) -> int:
        result = await self.call(
            "events.delete", {"session_id": session_id, "event_ids": list(event_ids)}
        )
        return int(result["deleted"])

    async def pop_event(
        self,
        session_id: str,
        *,
        event_id: str | None = None,
        replace_with: SessionEvent | dict[str, Any] | None = None,
    ) -> SessionEvent | None:
        """Remove the newest event that is not a compaction record (``replace_with``:
        rewrite it in place instead), atomically; the event as it was, ``None`` if none.
        With ``event_id`` it must be the newest such event (``ConflictError`` otherwise)."""
        params = _set(session_id=session_id, event_id=event_id, replace_with=replace_with)
        result = await self.call("events.pop", params)
        event = result["event"]
        return None if event is None else msgspec.convert(event, SessionEvent)

    # -- contexts ------------------------------------------------------------------------
    async def build_context(
        self,
        session_id: str,
        *,
        system_instructions: str | Sequence[str] | None = None,
        limit: int | None = None,
        strategy: dict[str, Any] | None = None,
        override_budget: bool = False,
    ) -> WorkingContext:
        """The working context for the next model call. Its messages are history: add the
        turn's messages with ``add_message`` and send them with ``persist_context``.
        A session past its budget is ``BudgetExceededError`` unless ``override_budget``."""
        if isinstance(system_instructions, str):
            system_instructions = [system_instructions]
        result = await self.call(
            "context.build",
            _set(
                session_id=session_id,
                system_instructions=None
                if system_instructions is None
                else list(system_instructions),
                limit=limit,
                strategy=strategy,
                override_budget=override_budget or None,
            ),
        )
        return WorkingContext(
            result["system_instructions"],
            msgspec.convert(result["messages"], list[ContextMessage]),
            base_seq=int(result["base_seq"]),
            token_count=result.get("token_count"),
            omitted_events=int(result.get("omitted_events") or 0),
        )

    async def persist_turn(
        self,
        session_id: str,
        messages: Sequence[ContextMessage | dict[str, Any]],
        *,
        base_seq: int | None = None,
        idempotency_key: str | None = None,
        usage: dict[str, Any] | None = None,
        strategy: dict[str, Any] | None = None,
        model: str | None = None,
    ) -> AppendResult:
        """Persist one turn atomically; with ``base_seq`` a moved session is a conflict.
        ``strategy`` is the request level of the strategy the pressure check uses.
        ``usage`` (any provider shape) is stored with the turn, with ``model``; the
        answer's ``budget_exceeded`` says a budget is now exceeded."""
        key = idempotency_key or new_event_id()
        params = _set(
            session_id=session_id,
            messages=list(messages),
            base_seq=base_seq,
            idempotency_key=key,
            usage=usage,
            strategy=strategy,
            model=model,
        )
        return msgspec.convert(await self._write("turn.persist", params, key), AppendResult)

    async def persist_context(
        self,
        session_id: str,
        ctx: WorkingContext,
        *,
        idempotency_key: str | None = None,
        usage: dict[str, Any] | None = None,
        on_conflict: Literal["append", "reject"] = "append",
        strategy: dict[str, Any] | None = None,
        model: str | None = None,
    ) -> AppendResult:
        """``persist_turn`` of ``ctx.get_new_messages()``, like the local
        ``AgentActor.persist_working_context``."""
        return await self.persist_turn(
            session_id,
            ctx.get_new_messages(),
            base_seq=ctx.base_seq if on_conflict == "reject" else None,
            idempotency_key=idempotency_key,
            usage=usage,
            strategy=strategy,
            model=model,
        )

    async def render_context(
        self,
        session_id: str,
        adapter: str,
        *,
        system_instructions: str | Sequence[str] | None = None,
        limit: int | None = None,
        strategy: dict[str, Any] | None = None,
        override_budget: bool = False,
    ) -> dict[str, Any]:
        """``context.render``: ``{adapter, payload, base_seq, token_count}``, ``payload``
        ready for the provider's SDK (``adapters.names()`` lists the adapters)."""
        if isinstance(system_instructions, str):
            system_instructions = [system_instructions]
        params = _set(
            session_id=session_id,
            adapter=adapter,
            system_instructions=None if system_instructions is None else list(system_instructions),
            limit=limit,
            strategy=strategy,
            override_budget=override_budget or None,
        )
        return dict(await self.call("context.render", params))

    # -- usage, budgets, retention ---------------------------------------------------------

    async def memory_usage(
        self,
        *,
        session_id: str | None = None,
        since: int | None = None,
        until: int | None = None,
        group_by: Literal["session", "model", "day"] | None = None,
    ) -> dict[str, Any]:
        """``memory.usage``: ``{totals, groups?}`` of the agent or one session."""
        params = _set(session_id=session_id, since=since, until=until, group_by=group_by)
        return dict(await self.call("memory.usage", params))

    async def usage_chart(self, session_id: str, *, limit: int = 500) -> dict[str, Any]:
        """``memory.usage_chart``: a session's newest turns with usage, its compactions,
        totals, budget and expiry."""
        return dict(
            await self.call("memory.usage_chart", {"session_id": session_id, "limit": limit})
        )

    async def set_budget(self, budget: dict[str, Any] | None) -> dict[str, Any]:
        """``memory.set_budget``: the agent's budget (``None`` clears it)."""
        return dict(await self.call("memory.set_budget", {"budget": budget}))

    async def get_budget(self) -> dict[str, Any]:
        """``memory.get_budget``: ``{budget}`` of the agent."""
        return dict(await self.call("memory.get_budget", {}))

    async def set_session_budget(
        self, session_id: str, budget: dict[str, Any] | None
    ) -> dict[str, Any]:
        """``session.update {session_id, budget}`` (``None`` clears it); the session."""
        return dict(await self.call("session.update", {"session_id": session_id, "budget": budget}))

    async def retention_set(
        self, policy: dict[str, Any] | None, *, session_id: str | None = None
    ) -> dict[str, Any]:
        """``retention.set``: a policy for the agent or one session (``None`` clears it)."""
        params = {"policy": policy, **_set(session_id=session_id)}
        return dict(await self.call("retention.set", params))

    async def retention_get(self, *, session_id: str | None = None) -> dict[str, Any]:
        """``retention.get``: the agent's policy, or a session's with its expiry."""
        return dict(await self.call("retention.get", _set(session_id=session_id)))

    async def retention_preview(
        self, policy: dict[str, Any] | None = None, *, session_id: str | None = None
    ) -> dict[str, Any]:
        """``retention.preview``: what the stored policies (or ``policy``) would remove."""
        params = _set(policy=policy, session_id=session_id)
        return dict(await self.call("retention.preview", params))

    # -- memory ------------------------------------------------------------------------------
    async def get_strategy(self, session_id: str | None = None) -> dict[str, Any]:
        """``{server, agent, session, effective}`` strategies (no session: the agent's)."""
        return dict(await self.call("memory.get_strategy", _set(session_id=session_id)))

    @overload
    async def set_strategy(
        self, session_id: str | None, strategy: dict[str, Any] | None
    ) -> dict[str, Any]: ...

    @overload
    async def set_strategy(
        self, strategy: dict[str, Any] | None, session_id: str | None = None
    ) -> dict[str, Any]: ...

    async def set_strategy(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """``set_strategy(session_id, strategy)``: persist the strategy of ``session_id``
        (``None``: the agent default); a ``strategy`` of ``None`` clears it. Session first,
        as in every other method; the old order ``set_strategy(strategy, session_id=None)``
        still works (told apart by type) and warns (``DeprecationWarning``)."""
        session_id, strategy, old_order = strategy_args(args, kwargs)
        if old_order:
            warnings.warn(
                "set_strategy(strategy, session_id) is deprecated: call "
                "set_strategy(session_id, strategy) (None as session_id: the agent default)",
                DeprecationWarning,
                stacklevel=2,
            )
        params = {"strategy": strategy, **_set(session_id=session_id)}
        return dict(await self.call("memory.set_strategy", params))

    async def compact(
        self,
        session_id: str,
        *,
        strategy: dict[str, Any] | None = None,
        system_instructions: str | Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Compact now (``memory.compact``); ``compacted: false`` with a ``reason`` when
        there was nothing to do."""
        if isinstance(system_instructions, str):
            system_instructions = [system_instructions]
        params = _set(
            session_id=session_id,
            strategy=strategy,
            system_instructions=None if system_instructions is None else list(system_instructions),
        )
        return dict(await self.call("memory.compact", params))

    async def memory_view(self, session_id: str | None = None, **options: Any) -> dict[str, Any]:
        """``memory.view`` of a session (the latest one when ``None``); ``options`` are its
        flags (``include_raw_traces=False``, ``raw_trace_limit=20``, ...)."""
        return dict(await self.call("memory.view", _set(session_id=session_id, **options)))

    async def export_session(self, session_id: str, *, name: str | None = None) -> dict[str, Any]:
        """``export.session``: ``{name, files: {file name: text}, trace_count}``."""
        return dict(await self.call("export.session", _set(session_id=session_id, name=name)))

    async def import_session(
        self,
        files: dict[str, str],
        *,
        session_id: str | None = None,
        new_ids: bool = False,
        **options: Any,
    ) -> dict[str, Any]:
        """``import.session`` of exported files (as ``export_session`` gives them): ids and
        seqs kept when ``session_rows.jsonl`` is among them; ``new_ids`` makes a copy."""
        params = _set(files=files, session_id=session_id, new_ids=new_ids or None, **options)
        return dict(await self.call("import.session", params))

    async def backup_agent(self) -> dict[str, Any]:
        """``agent.backup`` (admin): a consistent copy of this agent's SQLite file,
        ``{file, bytes, sha256, sessions, events, ..., data}`` with ``data`` in base64.
        Connect with a ``max_size`` above the file's size (x 4/3) for a large agent."""
        return dict(await self.call("agent.backup", {}))

    async def restore_agent(self, data: str, sha256: str, *, force: bool = False) -> dict[str, Any]:
        """``agent.restore`` (admin): replace this agent's file with a backup's ``data``
        (base64) whose SHA-256 is ``sha256``; ``force`` when the agent exists."""
        params = {"data": data, "sha256": sha256, "force": force}
        return dict(await self.call("agent.restore", params))

    # -- subscriptions ---------------------------------------------------------------------
    async def subscribe(self, session_id: str, *, after_seq: int | None = None) -> Subscription:
        """Start receiving the session's new events: ``async for event in sub``. With
        ``after_seq`` (say the last seq seen before a reconnect) the events after it come
        first, with no gap and no duplicate. When the connection is replaced (a server
        restart) the subscription resumes by itself after the last seq it received;
        :func:`session_server.client.follow.follow` also outlives a spent reconnect budget."""
        sub = Subscription(self, session_id)
        self._subs.setdefault(session_id, []).append(sub)  # before the request: no gap
        try:
            params = _set(session_id=session_id, after_seq=after_seq)
            result = await self.call("events.subscribe", params)
        except BaseException:
            self._forget(sub)
            raise
        sub.last_seq = int(result["last_seq"])
        sub.started(sub.last_seq if after_seq is None else after_seq)
        return sub

    def _forget(self, sub: Subscription) -> bool:
        """Drop ``sub``; true when it was the last one of its session."""
        subs = self._subs.get(sub.session_id, [])
        if sub in subs:
            subs.remove(sub)
        if subs:
            return False
        self._subs.pop(sub.session_id, None)
        return True

    async def unsubscribe(self, sub: Subscription) -> None:
        """Stop the notifications of ``sub`` (``Subscription.close`` calls this)."""
        if self._forget(sub) and self._lost is None:
            with contextlib.suppress(ConnectionLostError):
                await self.call("events.unsubscribe", {"session_id": sub.session_id})

    # -- live turns (``client.live``) ---------------------------------------------------
    async def stream_open(self, session_id: str, *, base_seq: int | None = None) -> dict[str, Any]:
        """``stream.open``: ``{stream_id, generation, cursor, base_seq}`` (a second open
        of the session takes its stream over with a higher generation)."""
        params = _set(session_id=session_id, base_seq=base_seq)
        return dict(await self.call("stream.open", params))

    async def stream_append(
        self,
        stream_id: str,
        generation: int,
        chunks: Sequence[dict[str, Any]],
        *,
        after_cursor: int | None = None,
    ) -> int:
        """``stream.append``: the cursor of the last chunk, once stored. With
        ``after_cursor`` a lost call is sent again (the server skips what it has)."""
        params = _set(
            stream_id=stream_id, generation=generation, chunks=list(chunks),
            after_cursor=after_cursor,
        )  # fmt: skip
        return int((await self.call("stream.append", params))["cursor"])

    async def stream_close(
        self, stream_id: str, generation: int, turn: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """``stream.close``: with ``turn`` (``{messages, idempotency_key?, usage?}``) the
        ``turn.persist`` answer, else ``{abandoned: true}``."""
        params = _set(stream_id=stream_id, generation=generation, turn=turn)
        return dict(await self.call("stream.close", params))

    async def stream(self, session_id: str, *, base_seq: int | None = None) -> StreamWriter:
        """Open the session's live turn and write it: ``await w.write({"type": "text",
        "text": "Hel"})``, then ``await w.close(messages)``."""
        return StreamWriter(self, session_id, await self.stream_open(session_id, base_seq=base_seq))

    async def subscribe_live(
        self,
        session_id: str,
        *,
        after_seq: int | None = None,
        stream_cursor: int | None = None,
    ) -> LiveSubscription:
        """``events.subscribe`` with live turns: one async iterator of stored events,
        ``StreamChunk`` and ``StreamClosed`` values, resumed across reconnects after
        the last seq and the last chunk cursor received."""
        sub = LiveSubscription(self, session_id, stream_cursor)
        self._subs.setdefault(session_id, []).append(sub)
        try:
            params = _set(session_id=session_id, after_seq=after_seq, stream_cursor=stream_cursor)
            result = await self.call("events.subscribe", params)
        except BaseException:
            self._forget(sub)
            raise
        sub.last_seq = int(result["last_seq"])
        sub.started(sub.last_seq if after_seq is None else after_seq)
        return sub

    # -- server endpoint -------------------------------------------------------------------
    async def list_agents(self) -> list[str]:
        """Agent ids, every page (server endpoint: construct the client with
        ``agent_id=None``)."""
        agents: list[str] = []
        params: dict[str, Any] = {}
        while True:
            page = await self.call("agents.list", params)
            agents += page["agents"]
            if page.get("next_after") is None:
                return agents
            params = {"after": page["next_after"]}

    async def list_snapshots(
        self,
        *,
        search: str | None = None,
        page: int = 1,
        page_size: int = 50,
        group: Literal["folder", "agent"] = "folder",
    ) -> dict[str, Any]:
        """A page of memory snapshot summaries, newest first (server endpoint); ``group=
        "agent"`` gives one entry per agent (its latest session)."""
        params = _set(search=search, page=page, page_size=page_size, group=group)
        return dict(await self.call("memory.list_snapshots", params))

    async def list_adapters(self) -> list[str]:
        """Names of the provider adapters ``render_context`` accepts (server endpoint)."""
        return list((await self.call("adapters.list"))["adapters"])

    async def get_metrics(self) -> dict[str, Any]:
        """Compaction counters and open agents (server endpoint)."""
        return dict(await self.call("metrics.get"))

    async def cluster_status(self) -> dict[str, Any]:
        """``{node_id, nodes: [{node_id, url, alive}], owned_agents}`` of the node this
        client is connected to (server endpoint; ``node_id`` null on a single node)."""
        return dict(await self.call("cluster.status"))

    async def cluster_owner(self, agent_id: str) -> dict[str, Any]:
        """``{node_id, generation}`` of the agent's live owner (server endpoint); an agent
        with none is claimed by the node asked. Single node: both null."""
        return dict(await self.call("cluster.owner", {"agent_id": agent_id}))

    # -- memory blocks ----------------------------------------------------------------------

    async def set_block(
        self,
        label: str,
        value: str,
        *,
        session_id: str | None = None,
        description: str | None = None,
        max_tokens: int | None = None,
        reason: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        """``memory.blocks.set``: a new revision of the agent's block (or ``session_id``'s)
        -> ``{label, session_id, revision, tokens, max_tokens}``; -32602 past
        ``max_tokens``, -32002 when ``expected_revision`` is stale (0: must not exist)."""
        params = _set(
            label=label,
            value=value,
            session_id=session_id,
            description=description,
            max_tokens=max_tokens,
            reason=reason,
            expected_revision=expected_revision,
        )
        return dict(await self.call("memory.blocks.set", params))

    async def get_block(self, label: str, *, session_id: str | None = None) -> dict[str, Any]:
        """``memory.blocks.get``: the block's current revision (-32001 when none)."""
        return dict(await self.call("memory.blocks.get", _set(label=label, session_id=session_id)))

    async def list_blocks(self, *, session_id: str | None = None) -> list[dict[str, Any]]:
        """``memory.blocks.list``: the agent's blocks, then ``session_id``'s, by label."""
        answer = await self.call("memory.blocks.list", _set(session_id=session_id))
        return list(answer["blocks"])

    async def block_history(
        self,
        label: str,
        *,
        session_id: str | None = None,
        before_revision: int | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """``memory.blocks.history``: ``{revisions, next_before_revision}``, newest first."""
        params = _set(
            label=label, session_id=session_id, before_revision=before_revision, limit=limit
        )
        return dict(await self.call("memory.blocks.history", params))

    async def revert_block(
        self,
        label: str,
        revision: int,
        *,
        session_id: str | None = None,
        reason: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        """``memory.blocks.revert``: a new revision equal to ``revision``."""
        params = _set(
            label=label,
            revision=revision,
            session_id=session_id,
            reason=reason,
            expected_revision=expected_revision,
        )
        return dict(await self.call("memory.blocks.revert", params))

    async def delete_block(self, label: str, *, session_id: str | None = None) -> bool:
        """``memory.blocks.delete``: erase every revision; false when there was none."""
        answer = await self.call("memory.blocks.delete", _set(label=label, session_id=session_id))
        return bool(answer["deleted"])

    # -- recall --------------------------------------------------------------------------
    async def search(
        self,
        query: str,
        *,
        session_id: str | None = None,
        limit: int | None = None,
        after_seq: int | None = None,
        before_seq: int | None = None,
        actions: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Full-text search over the agent's events: ``{hits, indexing}``, best first
        (``memory.search``)."""
        params = _set(
            query=query,
            session_id=session_id,
            limit=limit,
            after_seq=after_seq,
            before_seq=before_seq,
            actions=None if actions is None else list(actions),
        )
        return dict(await self.call("memory.search", params))

    async def expand(
        self, session_id: str, from_seq: int, to_seq: int, *, limit: int | None = None
    ) -> dict[str, Any]:
        """The raw events of ``from_seq..to_seq`` and their messages (``memory.expand``)."""
        params = _set(session_id=session_id, from_seq=from_seq, to_seq=to_seq, limit=limit)
        return dict(await self.call("memory.expand", params))

    async def memory_tools(self, adapter: str) -> list[dict[str, Any]]:
        """The model tools (``recall_search``, ``recall_expand``, ...) in ``adapter``'s
        provider format (``memory.tools``)."""
        return list((await self.call("memory.tools", {"adapter": adapter}))["tools"])

    async def tool_call(
        self,
        session_id: str,
        name: str,
        arguments: dict[str, Any] | str | None = None,
        *,
        tool_call_id: str | None = None,
    ) -> dict[str, Any]:
        """Run one model tool: ``{content, is_error}`` (``memory.tool_call``);
        ``arguments`` as the model sent them (an object or a JSON string), ``tool_call_id``
        the model's id of the call (recorded on a memory block it writes)."""
        params: dict[str, Any] = {
            "session_id": session_id,
            "name": name,
            "arguments": arguments or {},
        }
        if tool_call_id is not None:
            params["tool_call_id"] = tool_call_id
        return dict(await self.call("memory.tool_call", params))

    async def reindex(self) -> int:
        """Rebuild the agent's recall index (in the background); the events to index."""
        return int((await self.call("memory.reindex"))["events"])
