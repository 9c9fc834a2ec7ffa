"""Where a sequential ``turn.persist`` spends its round trip, ours against the minimal server.

Run: ``.venv/bin/python scripts/bench_rpc_segments.py [--synchronous NORMAL] [--calls N]
[--rounds R]``. Each round runs ``bench_rpc``'s bare client in another process against
session-server (mirror and idempotency keys on, as (b-xr)) and against the minimal server
keeping the contract ((m-xkm)), in turn, and timestamps four points of every call in the
server process: the frame's bytes arriving (``data_received``), the writer thread starting
and ending the transaction, and the answer handed to the socket. Printed: the median of
each segment over the calls (the first tenth dropped as warm-up), and the writer thread's
CPU time inside the transaction (``time.thread_time``) beside its wall time, which tells
work from waiting (for the GIL, say).

The probes wrap functions in place (``sqlite_ops.write_txn``, ``Connection.send``, the
minimal server's commit and send); they add the same few microseconds to both servers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import bench_rpc  # noqa: E402
import minimal_server  # noqa: E402
import websockets.asyncio.connection as ws_connection  # noqa: E402
import websockets.asyncio.server as ws_server  # noqa: E402

import session_server.server.connection_pump as pump  # noqa: E402
import session_server.storage.sqlite_ops as ops  # noqa: E402
from tests.support.bench_env import use_shared_tiktoken  # noqa: E402

SEGMENTS = ("frame -> writer", "writer", "writer -> answer", "answer -> next frame")
log: list[tuple[str, float]] = []
writer_times: list[tuple[float, float]] = []  # (wall, thread CPU) of each transaction


def _timed(fn: Any) -> Any:
    def timed(*args: Any, **kwargs: Any) -> Any:
        wall, cpu = time.perf_counter(), time.thread_time()
        log.append(("start", wall))
        try:
            return fn(*args, **kwargs)
        finally:
            end = time.perf_counter()
            log.append(("end", end))
            writer_times.append((end - wall, time.thread_time() - cpu))

    return timed


def _install_probes() -> None:
    received = ws_connection.Connection.data_received

    def data_received(self: Any, data: bytes) -> None:
        log.append(("in", time.perf_counter()))
        received(self, data)

    ws_connection.Connection.data_received = data_received  # type: ignore[method-assign]
    ops.write_txn = _timed(ops.write_txn)
    minimal_server._Store.commit = _timed(minimal_server._Store.commit)  # type: ignore[method-assign]
    ours_send = pump.Connection.send

    def send(self: Any, data: bytes, callback: Any = None) -> None:
        log.append(("out", time.perf_counter()))
        ours_send(self, data, callback)

    pump.Connection.send = send  # type: ignore[method-assign]
    minimal_send = ws_server.ServerConnection.send

    async def send_minimal(self: Any, *args: Any, **kwargs: Any) -> None:
        log.append(("out", time.perf_counter()))
        await minimal_send(self, *args, **kwargs)

    ws_server.ServerConnection.send = send_minimal  # type: ignore[method-assign]


def segments(entries: list[tuple[str, float]]) -> dict[str, float]:
    """Medians (µs) of the segments of the calls in ``entries`` (each call: in, start,
    end, out; a frame's later ``in`` events and writes outside a call are ignored), the
    first tenth of each dropped as warm-up."""
    spans: dict[str, list[float]] = {name: [] for name in SEGMENTS}
    call: dict[str, float] = {}
    last_out: float | None = None
    for kind, at in entries:
        if kind == "in" and "in" not in call:
            call["in"] = at
            if last_out is not None:
                spans["answer -> next frame"].append(at - last_out)
                last_out = None
        elif kind in ("start", "end") and "in" in call and kind not in call:
            call[kind] = at
        elif kind == "out" and "end" in call:
            spans["frame -> writer"].append(call["start"] - call["in"])
            spans["writer"].append(call["end"] - call["start"])
            spans["writer -> answer"].append(at - call["end"])
            last_out, call = at, {}
    return {name: statistics.median(v[len(v) // 10 :]) * 1e6 for name, v in spans.items() if v}


async def main(args: argparse.Namespace) -> None:
    rpc_args = bench_rpc.parse_args(["--synchronous", args.synchronous, "--calls", str(args.calls)])
    print(f"synchronous={args.synchronous}, {args.calls} calls a run; medians in µs")
    print("| round | server | calls/s | " + " | ".join(SEGMENTS) + " | writer CPU |")
    print("|---|---|---:|" + "---:|" * (len(SEGMENTS) + 1))
    for n in range(1, args.rounds + 1):
        for name in ("(m-xkm)", "ours (b-xr)"):
            log.clear()
            writer_times.clear()
            if name == "ours (b-xr)":
                apart = await bench_rpc.ours_apart(rpc_args, mirror=True, keyed=True)
            else:
                apart = await bench_rpc.contract_apart(rpc_args, contract=True, mirror=True)
            medians = segments(log)
            times = writer_times[len(writer_times) // 10 :]
            cpu = statistics.median(t[1] for t in times) * 1e6
            cells = " | ".join(f"{medians.get(s, float('nan')):.1f}" for s in SEGMENTS)
            print(f"| {n} | {name} | {apart.rate:,.0f} | {cells} | {cpu:.1f} |", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synchronous", choices=("FULL", "NORMAL"), default="NORMAL")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    use_shared_tiktoken()
    _install_probes()
    bench_rpc.run_with_loop("auto", main(parser.parse_args()))
