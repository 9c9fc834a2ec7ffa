"""Faults other than a crash: a client vanishing mid-request, a full disk, a corrupt agent file.

- (b) A client sends a large ``turn.persist`` and drops the TCP connection at a random moment
  (abort, no close frame) against a real server subprocess: after a graceful stop every
  session holds the whole turn or nothing, and retrying with the same idempotency key
  stores it exactly once.
- (c) One agent's folder is a small tmpfs mount (a real file system that runs out of
  space): once it is full, writes to that agent fail with a JSON-RPC error saying the disk
  is full, write nothing, other agents (on the regular file system) keep working, and the
  agent works again once space is freed; after a restart its mirror equals a fresh export.
- (d) A corrupt agent file (garbage instead of SQLite, or a valid header over garbage
  pages): only that agent fails, with an error naming the problem; others keep working.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import random
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from session_server.client import SessionClient
from session_server.values.errors import InternalError
from session_server.values.events import ContextMessage
from tests.support.mirror_check import activate_and_close, expected_mirror, mirror_files
from tests.support.server import ServerProcess, running_server, turn_messages

# -- (b) a client disconnecting mid-request ---------------------------------------------


def big_turn(n: int, size: int) -> list[ContextMessage]:
    """One user message then ``size`` tool rounds: a long write, so drops land inside it."""
    out = [turn_messages(n)[0]]
    for i in range(size):
        out.extend(turn_messages(n * 1000 + i)[1:])
    return out


def persist_frame(session_id: str, messages: list[ContextMessage], key: str) -> str:
    from msgspec import to_builtins

    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "turn.persist",
            "params": {
                "session_id": session_id,
                "messages": to_builtins(messages),
                "idempotency_key": key,
            },
        }
    )


async def send_half_then_drop(ws: ClientConnection, frame: str) -> None:
    """Send the first fragment of a fragmented message, then reset the connection."""
    first_sent = asyncio.Event()
    never = asyncio.Event()

    async def fragments() -> AsyncIterator[str]:
        yield frame[: len(frame) // 2]
        first_sent.set()  # resumed: the first fragment was handed to the transport
        await never.wait()
        yield frame[len(frame) // 2 :]

    sending = asyncio.create_task(ws.send(fragments()))
    await first_sent.wait()
    ws.transport.abort()
    sending.cancel()
    with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
        await sending
    await ws.wait_closed()


async def test_client_disconnect_mid_request_writes_whole_turn_or_nothing(
    tmp_path: Path, soak: int
) -> None:
    rng = random.Random(int(os.environ.get("FAULT_SEED", random.SystemRandom().randrange(2**32))))
    memory_dir = tmp_path / "memory"
    agent = "disconnect-agent"
    attempts = 30 * soak
    turn = big_turn(1, 40)
    server = ServerProcess(memory_dir)
    url = await asyncio.to_thread(server.start)
    try:
        async with SessionClient(url, agent) as client:
            sessions = [await client.create_session(session_id=f"s{i}") for i in range(attempts)]
        for i, sid in enumerate(sessions):
            ws = await connect(f"{url}/v1/agents/{agent}")
            frame = persist_frame(sid, turn, f"key-{sid}")
            if i % 3 == 0:
                await send_half_then_drop(ws, frame)
                continue
            await ws.send(frame)
            # Spread the drop over the request's life: just after sending, during the
            # write, after the answer. Not a synchronisation: nothing waits on it.
            if i % 3 == 2:
                await asyncio.sleep(rng.uniform(0, 0.02))
            ws.transport.abort()  # TCP reset, no close frame
            await ws.wait_closed()
        assert server.terminate() == 0  # graceful: writes in flight complete
    finally:
        server.kill()
    stored = (await activate_and_close(memory_dir, [agent]))[agent]
    outcomes = {len(stored[sid]) for sid in sessions}
    # A request the server never received whole wrote nothing.
    assert all(not stored[sid] for sid in sessions[::3])
    assert outcomes <= {0, len(turn)}, f"partial turns stored: {sorted(outcomes)}"
    for sid in sessions:
        events = stored[sid]
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert [e.content for e in events] == [m.content for m in turn][: len(events)]
    # A retry with the same key stores each turn exactly once.
    async with running_server(memory_dir) as running, SessionClient(running.url, agent) as client:
        for sid in sessions:
            result = await client.persist_turn(sid, turn, idempotency_key=f"key-{sid}")
            assert result.seqs == list(range(1, len(turn) + 1))
            assert len(await client.load_events(sid, limit=None)) == len(turn)


# -- (c) the disk refusing writes ---------------------------------------------------------


@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A real, small file system mounted at ``path`` (needs root: this suite runs as root)."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"cannot mount a tmpfs (root needed): {done.stderr}"
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def fill(folder: Path) -> Path:
    """Write a file until the file system says ENOSPC; return it (delete it to free space)."""
    filler = folder / "filler.bin"
    chunk = b"\0" * 4096
    with filler.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


def sized_turn(n: int, pad: int) -> list[ContextMessage]:
    msgs = turn_messages(n)
    msgs[0] = ContextMessage(role="user", content=f"question {n} " + "x" * pad)
    return msgs


async def test_full_disk_fails_one_agent_cleanly_and_recovers(tmp_path: Path) -> None:
    memory_dir = tmp_path / "memory"
    small, other = "small-disk", "other-disk"
    with tmpfs(memory_dir / "agents" / small, "1m") as mount:
        async with (
            running_server(memory_dir) as running,
            SessionClient(running.url, small) as sc,
            SessionClient(running.url, other) as oc,
        ):
            sid = await sc.create_session(session_id="s")
            osid = await oc.create_session(session_id="o")
            await sc.persist_turn(sid, sized_turn(1, 100))
            filler = fill(mount)
            acked, failed_key, error = 1, None, None
            for n in range(2, 200):  # SQLite may still have room in its pages or WAL
                key = f"small-{n}"
                try:
                    await sc.persist_turn(sid, sized_turn(n, 4000), idempotency_key=key)
                except InternalError as exc:
                    failed_key, error = key, exc
                    break
                acked = n
            assert error is not None, "the full disk never refused a write"
            assert "disk is full" in error.message, error.message
            assert "nothing was written" in error.message
            assert error.code == -32603
            assert error.data is not None and error.data["reason"] == "disk_full"
            # Nothing partial: exactly the acknowledged turns.
            events = await sc.load_events(sid, limit=None)
            assert [e.seq for e in events] == list(range(1, 4 * acked + 1))
            # Other agents keep working, reads of the full agent too.
            for n in range(1, 6):
                result = await oc.persist_turn(osid, turn_messages(n))
                assert result.seqs == list(range(4 * n - 3, 4 * n + 1))
            async with SessionClient(running.url, "another-new-agent") as nc:
                await nc.persist_turn(await nc.create_session(), turn_messages(1))
            assert len(await sc.load_events(sid, limit=None)) == 4 * acked
            # Space returns: the refused turn, retried with its key, is stored once.
            filler.unlink()
            n = acked + 1
            result = await sc.persist_turn(sid, sized_turn(n, 4000), idempotency_key=failed_key)
            assert result.seqs == list(range(4 * n - 3, 4 * n + 1))
            result = await sc.persist_turn(sid, sized_turn(n + 1, 100))
            assert result.last_seq == 4 * (n + 1)
        # Restarted (activation repairs the mirror the full disk left behind).
        stored = await activate_and_close(memory_dir, [small, other])
        events = stored[small]["s"]
        assert [e.seq for e in events] == list(range(1, 4 * (acked + 2) + 1))
        assert mirror_files(memory_dir, small, "s") == expected_mirror(events)
        assert mirror_files(memory_dir, other, "o") == expected_mirror(stored[other]["o"])


# -- (d) a corrupt agent file --------------------------------------------------------------


def corrupt_whole(db: Path) -> None:
    db.write_bytes(random.Random(1).randbytes(64 * 1024))


def corrupt_pages(db: Path) -> None:
    """Keep the 100-byte header and the first page; overwrite every later page."""
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    assert len(data) > 2 * page, "the file is too small to corrupt its pages"
    noise = random.Random(2).randbytes(len(data) - page)
    data[page:] = noise
    db.write_bytes(bytes(data))


def damage(db: Path, corrupt: Callable[[Path], None]) -> None:
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    corrupt(db)


@pytest.mark.parametrize("corrupt", [corrupt_whole, corrupt_pages])
async def test_corrupt_agent_file_fails_only_that_agent(tmp_path: Path, corrupt: object) -> None:
    memory_dir = tmp_path / "memory"
    bad, good = "corrupt-agent", "healthy-agent"
    async with running_server(memory_dir) as running:
        for agent in (bad, good):
            async with SessionClient(running.url, agent) as client:
                sid = await client.create_session(session_id="s")
                for n in range(1, 31):
                    await client.persist_turn(sid, sized_turn(n, 300))
    db = memory_dir / "agents" / bad / "agent.sqlite"
    assert callable(corrupt)
    await asyncio.to_thread(damage, db, corrupt)
    async with (
        running_server(memory_dir) as running,
        SessionClient(running.url, bad) as bc,
        SessionClient(running.url, good) as gc,
    ):
        calls = {
            "session.list": {},
            "events.load": {"session_id": "s", "limit": None},
            "context.build": {"session_id": "s"},
            "turn.persist": {
                "session_id": "s",
                "messages": [{"role": "user", "content": "hello"}],
            },
        }
        for _ in range(2):  # the same answer again: nothing stuck, nothing crashed
            for method, params in calls.items():
                with pytest.raises(InternalError) as info:
                    await bc.call(method, params)
                message = info.value.message
                assert "unusable" in message or "malformed" in message, (method, message)
                # Meanwhile the healthy agent answers normally.
                assert len(await gc.load_events("s", limit=None)) == 120
        result = await gc.persist_turn("s", turn_messages(31))
        assert result.seqs == [121, 122, 123, 124]
        async with SessionClient(running.url, "brand-new-agent") as nc:
            await nc.create_session(session_id="n")


def test_tmpfs_helper_unmounts(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "m", "64k") as mount:
        fill(mount)
        assert shutil.disk_usage(mount).free < 8192
    assert not os.path.ismount(tmp_path / "m")
