#!/usr/bin/env python3
"""Google ADK session services on session-server against ADK's own
``DatabaseSessionService`` on a SQLite file (``sqlite+aiosqlite``), in the same run.

    .venv-adk/bin/python scripts/bench_adk.py [--events 10000,100000] [--sessions 10000]
        [--rounds 20] [--recent 20] [--full-rounds 3]

For each history size N (``--events``): one session of N events (turns of user text,
function call, function response, model text, as ``Runner`` writes them), then the
median (p50) and p90 in ms of

- ``get_session`` (every event, what ADK's runner asks by default; ``--full-rounds``
  calls, no warm-up),
- ``get_session`` with ``GetSessionConfig(num_recent_events=--recent)``,
- ``append_event`` of one more event (to a session object read once, kept fresh).

Then ``list_sessions`` of one user with ``--sessions`` sessions. session-server runs as a
real ``session-server serve`` subprocess on 127.0.0.1 (the service is remote); the
histories are seeded in bulk before timing (session-server through an in-process
registry on the same files before the server starts, ADK through its own storage
classes), the sessions of ``list_sessions`` through each service's ``create_session``.
Figures on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from google.adk.events.event import Event  # noqa: E402
from google.adk.sessions.base_session_service import (  # noqa: E402
    BaseSessionService,
    GetSessionConfig,
)
from google.adk.sessions.database_session_service import DatabaseSessionService  # noqa: E402
from google.adk.sessions.schemas.v1 import StorageEvent  # noqa: E402
from google.adk.sessions.session import Session  # noqa: E402
from google.genai import types  # noqa: E402

from session_server.integrations.adk import (  # noqa: E402
    SessionServerSessionService,
    server_session_id,
)
from session_server.integrations.adk_events import event_to_records  # noqa: E402
from session_server.runtime.registry import ActorRegistry  # noqa: E402
from tests.support.server import ServerProcess  # noqa: E402

APP = "bench"
USER = "ada"
AGENT = "adk-bench"
BATCH = 1000


def turn_events(k: int, start: float) -> list[Event]:
    inv = f"inv-{k}"
    ts = start + k
    call = f"call-{k}"

    def event(author: str, role: str, part: types.Part, n: int) -> Event:
        return Event(
            invocation_id=inv,
            author=author,
            timestamp=ts + n / 10,
            content=types.Content(role=role, parts=[part]),
        )

    return [
        event("user", "user", types.Part(text=f"What is the weather in city {k}?"), 0),
        event(
            "agent",
            "model",
            types.Part(
                function_call=types.FunctionCall(
                    id=call, name="get_weather", args={"city": f"city {k}"}
                )
            ),
            1,
        ),
        event(
            "agent",
            "user",
            types.Part(
                function_response=types.FunctionResponse(
                    id=call, name="get_weather", response={"result": f"city {k}: sunny, 21 C"}
                )
            ),
            2,
        ),
        event("agent", "model", types.Part(text=f"It is sunny in city {k}."), 3),
    ]


def history(count: int) -> list[Event]:
    start = time.time() - count
    events: list[Event] = []
    k = 0
    while len(events) < count:
        events += turn_events(k, start)
        k += 1
    return events[:count]


async def seed_ours(memory_dir: Path, session_id: str, events: list[Event]) -> None:
    """The session's events written in batches through an in-process registry."""
    async with ActorRegistry(memory_dir) as registry:
        local = SessionServerSessionService(registry=registry, agent_id=AGENT)
        await local.create_session(app_name=APP, user_id=USER, session_id=session_id)
        actor = await registry.get(AGENT)
        for at in range(0, len(events), BATCH):
            records = [r for e in events[at : at + BATCH] for r in event_to_records(e)]
            result = await actor.append_events(server_session_id(APP, USER, session_id), records)
        # As append_event leaves it: the state is current as of the last event.
        sid = server_session_id(APP, USER, session_id)
        stored = await actor.get_session(sid)
        assert stored is not None
        await actor.update_session(sid, {**stored["metadata"], "adk_state_seq": result.last_seq})


async def seed_adk(db: DatabaseSessionService, session_id: str, events: list[Event]) -> None:
    session = await db.create_session(app_name=APP, user_id=USER, session_id=session_id)
    async with db.database_session_factory() as sql:
        for at in range(0, len(events), BATCH):
            sql.add_all([StorageEvent.from_event(session, e) for e in events[at : at + BATCH]])
            await sql.commit()


async def timed(
    call: Callable[[], Awaitable[object]], rounds: int, warmup: int = 1
) -> tuple[float, float]:
    """p50 and p90 in ms of ``rounds`` calls, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        await call()
    times: list[float] = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        await call()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.9))]


async def measure(
    service: BaseSessionService, session_id: str, rounds: int, recent: int, full_rounds: int
) -> dict[str, tuple[float, float]]:
    async def full() -> None:
        await service.get_session(app_name=APP, user_id=USER, session_id=session_id)

    async def tail() -> None:
        config = GetSessionConfig(num_recent_events=recent)
        await service.get_session(app_name=APP, user_id=USER, session_id=session_id, config=config)

    fresh = await service.get_session(
        app_name=APP,
        user_id=USER,
        session_id=session_id,
        config=GetSessionConfig(num_recent_events=1),
    )
    assert isinstance(fresh, Session)
    count = [0]

    async def append() -> None:
        count[0] += 1
        event = Event(
            invocation_id="bench",
            author="user",
            content=types.Content(role="user", parts=[types.Part(text=f"more {count[0]}")]),
        )
        await service.append_event(fresh, event)

    return {
        "get_session": await timed(full, full_rounds, warmup=0),
        f"get_session(num_recent_events={recent})": await timed(tail, rounds),
        "append_event": await timed(append, rounds),
    }


async def list_sessions(
    service: BaseSessionService, count: int, rounds: int
) -> tuple[float, float]:
    for i in range(count):
        await service.create_session(app_name=APP, user_id="lister", session_id=f"s{i:06d}")

    async def listed() -> None:
        response = await service.list_sessions(app_name=APP, user_id="lister")
        assert len(response.sessions) == count

    return await timed(listed, rounds)


def row(name: str, ours: tuple[float, float], theirs: tuple[float, float]) -> str:
    ratio = theirs[0] / ours[0] if ours[0] else float("inf")
    return (
        f"| {name} | {ours[0]:.2f} / {ours[1]:.2f} | {theirs[0]:.2f} / {theirs[1]:.2f} "
        f"| {ratio:.1f}x |"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", default="10000,100000")
    parser.add_argument("--sessions", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--recent", type=int, default=20)
    parser.add_argument(
        "--full-rounds", type=int, default=3, help="timed full get_session calls (no warm-up)"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.events.split(",") if s]
    print(
        "| measure (p50 / p90 ms) | session-server (remote) | ADK DatabaseSessionService (SQLite) | ADK / ours |"
    )
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for size in sizes:
            events = history(size)
            memory = root / f"memory-{size}"
            await seed_ours(memory, "big", events)
            db = DatabaseSessionService(f"sqlite+aiosqlite:///{root / f'adk-{size}.db'}")
            await seed_adk(db, "big", events)
            server = ServerProcess(memory)
            server.start()
            ours = SessionServerSessionService(url=server.url, agent_id=AGENT)
            try:
                mine = await measure(ours, "big", args.rounds, args.recent, args.full_rounds)
                theirs = await measure(db, "big", args.rounds, args.recent, args.full_rounds)
            finally:
                await ours.close()
                server.terminate()
                await db.close()
            for name in mine:
                print(row(f"{name}, {size} events", mine[name], theirs[name]), flush=True)
        if args.sessions:
            memory = root / "memory-list"
            server = ServerProcess(memory)
            server.start()
            ours = SessionServerSessionService(url=server.url, agent_id=AGENT)
            db = DatabaseSessionService(f"sqlite+aiosqlite:///{root / 'adk-list.db'}")
            try:
                mine_list = await list_sessions(ours, args.sessions, max(3, args.rounds // 4))
                theirs_list = await list_sessions(db, args.sessions, max(3, args.rounds // 4))
            finally:
                await ours.close()
                server.terminate()
                await db.close()
            print(row(f"list_sessions, {args.sessions} sessions", mine_list, theirs_list))


if __name__ == "__main__":
    asyncio.run(main())
