#!/usr/bin/env python3
"""The OpenAI Agents SDK session read ``get_items(limit=20)`` (what ``Runner.run`` does
with ``SessionSettings(limit=20)``) on a history of ``--items`` items (800), for
``SessionServerSession`` remote (a real ``session-server serve`` subprocess on 127.0.0.1)
and in-process (``registry=``), against the SDK's own file-backed ``SQLiteSession``, in
the same run. A full ``get_items()`` is timed beside it for scale.

    .venv/bin/python scripts/bench_sdk_session.py [--items 800] [--limit 20] [--rounds 200]

The history is turns of four items (user message, function call, its output, assistant
message), each turn one ``add_items``. Every read is timed ``--rounds`` times after
``--warmup`` untimed reads; the table gives the median and the 90th percentile in ms and
the median's ratio to ``SQLiteSession``'s. Figures on a shared machine are noisy.
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents import SQLiteSession  # noqa: E402

from session_server.integrations.openai_agents import SessionServerSession  # noqa: E402
from session_server.runtime.registry import ActorRegistry  # noqa: E402
from tests.support.server import ServerProcess  # noqa: E402


def turn(k: int) -> list[Any]:
    """The four items of turn ``k``."""
    call = f"call_{k}"
    return [
        {"role": "user", "content": f"question {k}: what is the weather in city {k}?"},
        {
            "type": "function_call",
            "call_id": call,
            "name": "get_weather",
            "arguments": f'{{"city": "city {k}"}}',
        },
        {"type": "function_call_output", "call_id": call, "output": f"city {k}: sunny, 21 C"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": f"It is sunny in city {k}."}],
        },
    ]


async def timed(read: Callable[[], Awaitable[object]], rounds: int, warmup: int) -> list[float]:
    """Milliseconds of each of ``rounds`` calls of ``read``, after ``warmup`` untimed."""
    for _ in range(warmup):
        await read()
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        await read()
        out.append((time.perf_counter() - start) * 1000)
    return out


def row(name: str, ms: list[float], base: float) -> str:
    median = statistics.median(ms)
    p90 = statistics.quantiles(ms, n=10)[-1]
    return f"| {name} | {median:.2f} | {p90:.2f} | {median / base:.1f}x |"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=800)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    turns = [turn(k) for k in range(args.items // 4)]
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(Path(tmp) / "served") as proc:
        async with ActorRegistry(Path(tmp) / "local") as registry:
            sessions: dict[str, Any] = {
                "SQLiteSession (file)": SQLiteSession("bench", Path(tmp) / "sdk.db"),
                "SessionServerSession remote": SessionServerSession(
                    "bench", url=proc.url, agent_id="bench"
                ),
                "SessionServerSession in-process": SessionServerSession(
                    "bench", registry=registry, agent_id="bench"
                ),
            }
            for session in sessions.values():
                for items in turns:
                    await session.add_items(items)
                got = await session.get_items(limit=args.limit)
                assert got == [i for t in turns for i in t][-args.limit :], "items differ"
            results: dict[str, tuple[list[float], list[float]]] = {}
            for name, session in sessions.items():
                limited = await timed(
                    lambda s=session: s.get_items(limit=args.limit), args.rounds, args.warmup
                )
                full = await timed(session.get_items, max(args.rounds // 10, 5), 2)
                results[name] = (limited, full)
            for session in sessions.values():
                if isinstance(session, SessionServerSession):
                    await session.aclose()
                else:
                    session.close()
    base_limited, base_full = (statistics.median(r) for r in results["SQLiteSession (file)"])
    print(f"{args.items} items ({len(turns)} turns of 4), {args.rounds} timed reads each")
    print(f"\n`get_items(limit={args.limit})`\n")
    print("| session | median ms | p90 ms | vs SQLiteSession |\n|---|---|---|---|")
    for name, (limited, _) in results.items():
        print(row(name, limited, base_limited))
    print("\n`get_items()` (all items)\n")
    print("| session | median ms | p90 ms | vs SQLiteSession |\n|---|---|---|---|")
    for name, (_, full) in results.items():
        print(row(name, full, base_full))


if __name__ == "__main__":
    asyncio.run(main())
