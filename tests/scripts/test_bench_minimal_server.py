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


async def test_the_contract_minimal_server_keeps_keys_calls_and_the_mirror(tmp_path: Path) -> None:
    # (m-xk) and (m-xkm): the rows the store writes for a keyed turn, a replay answered
    # from the key's row (nothing written twice), and the JSONL mirror of every event.
    db, memory = tmp_path / "minimal.sqlite", tmp_path / "memory"
    async with (
        minimal_server(db, "FULL", contract=True, mirror_dir=memory) as server,
        connect(server.url) as ws,
    ):
        texts = [request_text(n) for n in range(3)]
        for n, text in enumerate(texts):
            await ws.send(text)
            assert json.loads(await ws.recv())["result"] == {"last_seq": 4 * (n + 1)}
        await ws.send(texts[1])  # a retry of the second turn
        assert json.loads(await ws.recv())["result"] == {"last_seq": 8}
        assert server.last_seq() == 12
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (12,)
        keys = conn.execute("SELECT key, result FROM idempotency ORDER BY created_at").fetchall()
        calls = conn.execute("SELECT call_id, turn FROM tool_calls ORDER BY turn").fetchall()
    assert sorted(k for k, _ in keys) == sorted(
        json.loads(t)["params"]["idempotency_key"] for t in texts
    )
    assert all(len(json.loads(r)["digest"]) == 64 for _, r in keys)
    assert calls == [("call-0", 1), ("call-1", 2), ("call-2", 3)]
    (traces,) = memory.rglob("raw_traces.jsonl")
    lines = [json.loads(line) for line in traces.read_text(encoding="utf-8").splitlines()]
    assert [line["trace_type"] for line in lines[:4]] == [
        "user", "tool_call", "tool_result", "assistant",
    ]  # fmt: skip
    assert len(lines) == 12
    (snapshot,) = memory.rglob("working_context_snapshot.json")
    # Written at the first flush (at most once a second after): the turns committed by then.
    written = json.loads(snapshot.read_text(encoding="utf-8"))
    assert written["last_seq"] in (4, 8, 12)
    assert len(written["messages"]) == written["last_seq"]
