#!/usr/bin/env python
"""Compaction benchmark (pure; not part of the tests).

1. Tokens of the built context for each strategy on a generated 200-turn, tool-heavy
   session (``session_server.values.tokens``, o200k_base), against no compaction.
2. Pure build time (``build_compacted_context``) and planning time (``plan_compact``)
   at 1k and 100k events. The store-backed timing is measured elsewhere.

Run: ``.venv/bin/python scripts/bench_compaction.py`` (``TIKTOKEN_CACHE_DIR`` defaults to the
shared cache ``../shared/tiktoken`` when that exists; the token mode is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from session_server.compaction import (
    StrategyConfig,
    build_compacted_context,
    load_from_seq,
    plan_compact,
)
from session_server.runtime.compaction_run import run_compaction
from session_server.values.events import SessionEvent, ToolCall
from session_server.values.tokens import count_messages
from tests.support.bench_env import token_mode, use_shared_tiktoken

use_shared_tiktoken()

TOOLS = ("search", "read_file", "run_code", "weather_api")
CODE = "import pandas as pd\ndf = pd.read_csv('data.csv')\nprint(df.describe())\n" * 3
SYSTEM = ["You are a data analyst agent. Use tools when needed and answer briefly."]


def generate(
    turns: int, *, payload_words: int = 300, session_id: str = "bench"
) -> list[SessionEvent]:
    """A tool-heavy session: each turn is a question, two tool calls with large results,
    and an answer (6 events per turn); events carry seq and turn like the store's."""
    events: list[SessionEvent] = []

    def add(turn: int, **fields: Any) -> None:
        seq = len(events) + 1
        events.append(
            SessionEvent(
                id=f"e{seq}", session_id=session_id, seq=seq, timestamp=seq, turn=turn, **fields
            )
        )

    for t in range(1, turns + 1):
        add(t, action="user_message", content=f"Turn {t}: analyse dataset {t} and compare it.")
        calls = [
            ToolCall(
                id=f"c{t}_{k}",
                name=TOOLS[(t + k) % len(TOOLS)],
                arguments={"query": f"dataset {t} part {k}", "code": CODE},
            )
            for k in range(2)
        ]
        add(t, action="tool_call_request", content="", tool_calls=calls)
        for call in calls:
            body = " ".join(f"row{t}_{i}={i * t % 97}" for i in range(payload_words))
            add(t, action="tool_result", content=body, tool_call_id=call.id, tool_name=call.name)
        add(t, action="agent_message", content=f"Dataset {t} looks consistent with {t - 1}.")
        add(t, action="agent_message", content="Anything else?")
    return events


def tokens(ctx_system: list[str], messages: list[Any]) -> int:
    return count_messages(messages, ctx_system).tokens


def strategy_table(turns: int) -> list[tuple[str, int, int]]:
    events = generate(turns)
    rows: list[tuple[str, int, int]] = []
    base = build_compacted_context(events, record=None, system_instructions=SYSTEM)
    rows.append(("none", len(base.messages), tokens(base.system_instructions, base.messages)))
    for label, cfg in (
        ("compact (keep 2)", StrategyConfig(mode="compact")),
        (
            "compact (keep 2, clear inputs)",
            StrategyConfig(mode="compact", compact_clear_tool_inputs=True),
        ),
        ("compact (keep 10)", StrategyConfig(mode="compact", compact_keep=10)),
    ):
        plan = plan_compact(events, cfg, force=True, system_instructions=SYSTEM)
        ctx = build_compacted_context(
            events, record=plan.record, system_instructions=SYSTEM, config=cfg
        )
        rows.append((label, len(ctx.messages), tokens(ctx.system_instructions, ctx.messages)))
    cfg = StrategyConfig(mode="summarize")
    plan = asyncio.run(run_compaction(events, cfg, previous_record=None, force=True))
    start = load_from_seq(plan.record)
    window = [e for e in events if start is None or e.seq >= start]
    ctx = build_compacted_context(
        window, record=plan.record, system_instructions=SYSTEM, config=cfg
    )
    rows.append(
        (
            "summarize (tail 4, extractive)",
            len(ctx.messages),
            tokens(ctx.system_instructions, ctx.messages),
        )
    )
    return rows


def best_of(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _timings(n: int) -> list[tuple[str, int, float]]:
    events = generate(max(1, n // 6), payload_words=20)
    repeat = 5 if n <= 10_000 else 2
    cfg = StrategyConfig(mode="compact")
    rec = plan_compact(events, cfg, force=True, token_count=0).record
    summ = asyncio.run(
        run_compaction(
            events,
            StrategyConfig(mode="summarize"),
            previous_record=None,
            force=True,
            token_count=0,
        )
    ).record
    start = load_from_seq(summ) or 0
    tail = [e for e in events if e.seq >= start]
    return [
        (
            "build, no record",
            len(events),
            best_of(lambda: build_compacted_context(events, record=None), repeat),
        ),
        (
            "build, compact record",
            len(events),
            best_of(lambda: build_compacted_context(events, record=rec), repeat),
        ),
        (
            "build, summarize record (tail loaded)",
            len(tail),
            best_of(lambda: build_compacted_context(tail, record=summ), repeat),
        ),
        (
            "plan_compact (token_count given)",
            len(events),
            best_of(
                lambda: plan_compact(events, cfg, previous_record=rec, force=True, token_count=0),
                repeat,
            ),
        ),
    ]


def timing_table(sizes: list[int]) -> list[tuple[str, int, float]]:
    return [row for n in sizes for row in _timings(n)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--sizes", type=int, nargs="*", default=[1_000, 100_000])
    args = parser.parse_args()

    rows = strategy_table(args.turns)
    base = rows[0][2]
    print(
        f"\nTokens of the built context, {args.turns}-turn tool-heavy session"
        f" (token counts: {token_mode()})"
    )
    print(f"{'strategy':<34} {'messages':>8} {'tokens':>10} {'vs none':>8}")
    for label, msgs, toks in rows:
        print(f"{label:<34} {msgs:>8} {toks:>10} {toks / base:>8.3f}")

    print("\nPure build/plan time")
    print(f"{'operation':<40} {'events':>8} {'ms':>10} {'us/event':>9}")
    for label, n, seconds in timing_table(args.sizes):
        print(f"{label:<40} {n:>8} {seconds * 1000:>10.2f} {seconds * 1e6 / max(n, 1):>9.2f}")


if __name__ == "__main__":
    main()
