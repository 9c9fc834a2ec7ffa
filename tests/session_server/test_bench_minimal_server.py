"""The RPC benchmark's minimal ``turn.persist`` server (``scripts/minimal_server.py``),
the measured limit that (b-xr) is compared with: it must do the required work for real
(each answer after its commit, every row stored with its token count), or the limit it
gives would be too high."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

from websockets.asyncio.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bench_rpc import Apart, ours_apart, parse_args, request_text, thread_cpu_s
from minimal_server import minimal_server


async def test_each_answer_follows_its_commit(tmp_path: Path) -> None:
    db = tmp_path / "minimal.sqlite"
    async with minimal_server(db, "FULL") as server, connect(server.url) as ws:
        for n in range(3):
            await ws.send(request_text(n))
            answer = json.loads(await ws.recv())
            assert answer == {"jsonrpc": "2.0", "id": n, "result": {"last_seq": 4 * (n + 1)}}
            # Read by another connection: the rows are committed when the answer comes.
            with sqlite3.connect(db) as other:
                assert other.execute("SELECT count(*) FROM events").fetchone() == (4 * (n + 1),)
        assert server.last_seq() == 12
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT seq, action, turn, token_count FROM events ORDER BY seq")
        stored = rows.fetchall()
    assert [r[0] for r in stored] == list(range(1, 13))
    assert [r[1] for r in stored[:4]] == [
        "user_message", "tool_call_request", "tool_result", "agent_message",
    ]  # fmt: skip
    assert [r[2] for r in stored] == [1] * 4 + [2] * 4 + [3] * 4
    assert all(r[3] > 0 for r in stored)


def test_thread_cpu_and_means() -> None:
    cpu = thread_cpu_s()
    assert cpu is not None and cpu  # Linux: this process's threads
    assert all(seconds >= 0 for seconds in cpu.values())
    mean = Apart.mean([Apart(100.0, 10.0, 20.0), Apart(300.0, 30.0, 40.0)])
    assert mean == Apart(200.0, 20.0, 30.0)
    assert Apart.mean([Apart(100.0, 10.0, 20.0), Apart(300.0)]).loop_cpu_us is None


def test_request_texts_with_and_without_keys() -> None:
    keyed = json.loads(request_text(3))["params"]
    plain = json.loads(request_text(3, keyed=False))["params"]
    assert isinstance(keyed.pop("idempotency_key"), str)
    assert "idempotency_key" not in plain
    assert keyed == plain  # the same turn either way


async def test_ablation_servers_store_every_turn() -> None:
    # (b-xr-m) and (b-xr-mk): ours without the mirror, with and without keys, called by
    # the bare client in another process; ``ours_apart`` refuses a run that lost a turn.
    args = parse_args(["--calls", "5", "--warmup", "2", "--synchronous", "FULL"])
    for keyed in (True, False):
        apart = await ours_apart(args, mirror=False, keyed=keyed)
        assert apart.rate > 0
