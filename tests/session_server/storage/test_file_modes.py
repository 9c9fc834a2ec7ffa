"""Files are 0600 and folders 0700 by default, whatever the umask (issue 13, item 8).

A real ``session-server serve`` subprocess started under ``umask 022`` runs a workload
(sessions, appends, persisted turns, builds, a compaction, a delete), and the CLI exports
and backs up beside it; then every entry under the memory dir, the export folder and the
backup folder is walked: SQLite files with their ``-wal``/``-shm``, lock files, mirror
JSONL files, snapshots, exports and backups. ``--file-mode 640`` gives 0640/0750.
"""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from session_server.client import SessionClient
from session_server.storage import file_modes
from tests.support.server import ROOT, ServerProcess, turn_messages

AGENT = "modes-agent"


def under_umask(proc: ServerProcess, umask: str) -> ServerProcess:
    proc.argv = ["sh", "-c", f'umask {umask} && exec "$@"', "sh", *proc.argv]
    return proc


def modes(*roots: Path) -> dict[str, tuple[bool, int]]:
    """``{path: (is a folder, permission bits)}`` of every entry under ``roots`` (and
    the roots)."""
    found: dict[str, tuple[bool, int]] = {}
    for root in roots:
        for folder, _dirs, files in os.walk(root):
            found[folder] = (True, stat.S_IMODE(os.stat(folder).st_mode))
            for name in files:
                path = os.path.join(folder, name)
                found[path] = (False, stat.S_IMODE(os.lstat(path).st_mode))
    return found


def cli(*args: str, memory: Path) -> None:
    umask = ["sh", "-c", 'umask 022 && exec "$@"', "sh"]
    done = subprocess.run(
        [*umask, sys.executable, "-m", "session_server", *args, "--memory-dir", str(memory)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


async def workload(url: str) -> str:
    async with SessionClient(url, AGENT) as client:
        sid = await client.create_session(metadata={"kind": "modes"})
        for n in range(3):
            await client.persist_turn(sid, turn_messages(n))
        await client.append_events(sid, [{"content": "note"}])
        await client.build_context(sid)
        await client.compact(sid, strategy={"mode": "compact"})
        other = await client.create_session()
        await client.append_events(other, [{"content": "gone"}])
        await client.delete_session(other)
        await client.memory_view(sid)
        return sid


@pytest.mark.parametrize(
    ("option", "file_mode", "dir_mode"),
    [((), 0o600, 0o700), (("--file-mode", "640"), 0o640, 0o750)],
)
async def test_every_file_and_folder_gets_the_private_mode(
    tmp_path: Path, option: tuple[str, ...], file_mode: int, dir_mode: int
) -> None:
    memory = tmp_path / "memory"
    proc = under_umask(ServerProcess(memory, *option), "022")
    url = await asyncio.to_thread(proc.start)
    try:
        sid = await workload(url)
        running = modes(memory)  # with the server up: -wal, -shm and the locks exist
        out = tmp_path / "out"
        await asyncio.to_thread(
            cli, "export", AGENT, "--session", sid, "--out", str(out / "export"), *option,
            memory=memory,
        )  # fmt: skip
        await asyncio.to_thread(
            cli, "backup", AGENT, "--out", str(out / "backup"), *option, memory=memory
        )
        assert await asyncio.to_thread(proc.terminate) == 0
    finally:
        proc.kill()
    stopped = modes(memory, out / "export", out / "backup")
    names = {Path(p).name for p in {**running, **stopped}}
    for expected in ("agent.sqlite", "agent.sqlite-wal", "agent.sqlite-shm", "server.lock"):
        assert expected in names, sorted(names)
    assert any(n.endswith(".jsonl") for n in names), sorted(names)
    assert any(n.endswith(".json") for n in names), sorted(names)  # snapshots, manifests
    wrong = {
        path: oct(mode)
        for path, (is_dir, mode) in {**running, **stopped}.items()
        if mode != (dir_mode if is_dir else file_mode)
    }
    assert not wrong, wrong


def test_a_mode_must_leave_the_owner_read_write_and_nothing_executable() -> None:
    assert file_modes.parse_file_mode("0640") == 0o640
    for bad in ("400", "700", "4600", "1666"):
        with pytest.raises(ValueError, match="owner read and write"):
            file_modes.parse_file_mode(bad)
