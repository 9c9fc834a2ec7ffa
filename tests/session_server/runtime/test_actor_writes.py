"""``AgentActor``: the public persist is DESIGN §3's; the RPC layer's wire entry
(``persist_from_wire``) is apart from it."""

from __future__ import annotations

import inspect
from pathlib import Path

import msgspec

from session_server import ActorRegistry
from session_server.runtime.actor import AgentActor, persist_from_wire
from session_server.values.context import WorkingContext
from session_server.values.validation import parse_client_messages
from tests.support.server import turn_messages


def test_persist_working_context_has_the_design_signature() -> None:
    """DESIGN §3 (plus ``strategy``, §11, and ``model``, §12): no wire hints in the public
    method."""
    params = inspect.signature(AgentActor.persist_working_context).parameters
    assert list(params) == [
        "self",
        "session_id",
        "ctx",
        "idempotency_key",
        "usage",
        "on_conflict",
        "strategy",
        "model",
    ]
    assert [params[name].default for name in list(params)[3:]] == [
        None,
        None,
        "append",
        None,
        None,
    ]
    assert all(params[name].kind is inspect.Parameter.KEYWORD_ONLY for name in list(params)[3:])


async def test_the_wire_entry_writes_what_the_public_method_writes(tmp_path: Path) -> None:
    raw = msgspec.to_builtins(turn_messages(1))
    async with ActorRegistry(tmp_path) as registry:
        actor = await registry.get("agent")
        local, wire = await actor.create_session(), await actor.create_session()
        ctx = WorkingContext()
        ctx.add_messages(turn_messages(1))
        first = await actor.persist_working_context(local, ctx, idempotency_key="k")
        wire_ctx = WorkingContext()
        wire_ctx.add_messages(parse_client_messages(raw, "params.messages"))
        second = await persist_from_wire(
            actor, wire, wire_ctx, idempotency_key="k", content_bound=len(msgspec.json.encode(raw))
        )
        assert first.seqs == second.seqs
        loaded = [await actor.load_events(sid, limit=None) for sid in (local, wire)]
        assert [(e.action, e.content) for e in loaded[0]] == [
            (e.action, e.content) for e in loaded[1]
        ]
