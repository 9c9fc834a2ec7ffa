#!/usr/bin/env python
"""RPC benchmark: transport baseline vs ``turn.persist`` over the real server and client.

In one run, on 127.0.0.1 (server and client in this process, one event loop):

(a) sequential round trips per second against a bare ``websockets`` echo server, sending
    the same JSON text a ``turn.persist`` request carries;
(b) sequential ``turn.persist`` calls (``SessionClient.persist_turn``) of a 4-message turn
    (user, assistant tool call, tool result, assistant answer) with ``synchronous=NORMAL``;
(c) 16 concurrent connections on 16 agents, each doing sequential ``turn.persist`` calls
    (aggregate calls per second).

Prints each figure and the ratios b/a (target at least 0.60) and c/b, plus two
diagnostics that split (b): the RPC stack alone (framing and params validation of the same
request, no actor) and the local actor call alone (no RPC).

Run: ``.venv/bin/python scripts/bench_rpc.py [--calls 2000] [--agents 16]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from session_server.client import SessionClient
from session_server.core.context import WorkingContext
from session_server.core.events import ContextMessage, ToolCall
from session_server.rpc.methods import CallContext, MethodSpec, PersistParams, method_table
from session_server.rpc.table import ROWS
from session_server.runtime.registry import ActorRegistry
from session_server.server import SessionServer


async def validate_only(ctx: CallContext, p: PersistParams) -> dict[str, object]:
    """turn.persist's params validation and framing, without the actor (diagnostic)."""
    return {"seqs": [1, 2, 3, 4], "last_seq": 4, "compaction_required": False}


METHODS = method_table(
    ROWS, [MethodSpec("bench.validate_only", PersistParams, validate_only, scope="write")]
)


def turn(n: int) -> list[ContextMessage]:
    call_id = f"call-{n}"
    return [
        ContextMessage(role="user", content=f"What is the weather in city number {n}?"),
        ContextMessage(
            role="assistant",
            content="",
            tool_calls=[ToolCall(id=call_id, name="get_weather", arguments={"city": f"c{n}"})],
        ),
        ContextMessage(
            role="tool",
            content='{"temperature": 21, "conditions": "sunny"}',
            tool_call_id=call_id,
            name="get_weather",
        ),
        ContextMessage(role="assistant", content=f"It is sunny and 21 degrees in city {n}."),
    ]


def request_text(n: int) -> str:
    import msgspec

    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": n,
            "method": "turn.persist",
            "params": {
                "session_id": "s",
                "messages": msgspec.to_builtins(turn(n)),
                "idempotency_key": str(uuid.uuid4()),
            },
        }
    )


async def echo_rate(calls: int, warmup: int) -> float:
    async def echo(ws: ServerConnection) -> None:
        async for message in ws:
            await ws.send(message)

    async with serve(echo, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}") as ws:
            texts = [request_text(i) for i in range(calls + warmup)]
            for text in texts[:warmup]:
                await ws.send(text)
                await ws.recv()
            start = time.perf_counter()
            for text in texts[warmup:]:
                await ws.send(text)
                await ws.recv()
            return calls / (time.perf_counter() - start)


async def persist_rates(calls: int, warmup: int, agents: int) -> tuple[float, float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        async with ActorRegistry(Path(tmp), synchronous="NORMAL") as registry:
            server = SessionServer(registry, port=0, methods=METHODS)
            async with server:
                async with SessionClient(server.url, "bench-0") as client:
                    params = {"session_id": "s", "messages": turn(0), "idempotency_key": "k"}
                    for _ in range(warmup):
                        await client.call("bench.validate_only", params)
                    start = time.perf_counter()
                    for _ in range(calls):
                        await client.call("bench.validate_only", params)
                    stack_only = calls / (time.perf_counter() - start)

                    actor = await registry.get("bench-local")
                    local_sid = await actor.create_session()
                    start = time.perf_counter()
                    for i in range(calls):
                        ctx = WorkingContext()
                        ctx.add_messages(turn(i))
                        await actor.persist_working_context(
                            local_sid, ctx, idempotency_key=str(uuid.uuid4())
                        )
                    local = calls / (time.perf_counter() - start)

                    sid = await client.create_session()
                    for i in range(warmup):
                        await client.persist_turn(sid, turn(i))
                    start = time.perf_counter()
                    for i in range(calls):
                        await client.persist_turn(sid, turn(i))
                    sequential = calls / (time.perf_counter() - start)

                clients = [SessionClient(server.url, f"bench-c{k}") for k in range(agents)]
                for c in clients:
                    await c.connect()
                sids = [await c.create_session() for c in clients]
                per_client = max(1, calls // agents)

                async def run(c: SessionClient, sid: str) -> None:
                    for i in range(per_client):
                        await c.persist_turn(sid, turn(i))

                await asyncio.gather(
                    *(c.persist_turn(s, turn(0)) for c, s in zip(clients, sids, strict=True))
                )
                start = time.perf_counter()
                await asyncio.gather(*(run(c, s) for c, s in zip(clients, sids, strict=True)))
                concurrent = per_client * agents / (time.perf_counter() - start)
                for c in clients:
                    await c.close()
    return sequential, concurrent, stack_only, local


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per measurement")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--agents", type=int, default=16)
    args = parser.parse_args()

    a = await echo_rate(args.calls, args.warmup)
    b, c, stack, local = await persist_rates(args.calls, args.warmup, args.agents)
    print(f"(a) websockets echo, sequential:          {a:9.0f} round trips/s")
    print(f"(b) turn.persist (4 msgs, NORMAL), seq.:  {b:9.0f} calls/s")
    print(f"(c) turn.persist, {args.agents} connections/agents:  {c:9.0f} calls/s")
    print("diagnostics:")
    print(f"    RPC stack only (validate, no actor):  {stack:9.0f} calls/s  ({stack / a:.2f} of a)")
    print(f"    actor.persist_working_context, local: {local:9.0f} calls/s  (no RPC)")
    verdict = "OK" if b / a >= 0.60 else "BELOW TARGET"
    print(f"ratio b/a = {b / a:.2f} (target >= 0.60: {verdict})")
    print(f"ratio c/b = {c / b:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
