"""``session-server`` command line.

Subcommands register themselves in ``COMMANDS`` (name -> (add_arguments, run)); ``run``
takes the parsed namespace and returns the exit code. Every option has a
``SESSION_SERVER_<OPTION>`` environment variable as its default.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from .auth import (
    MAX_TTL_SECONDS,
    SCOPES,
    Authenticator,
    mint_token,
    parse_token_spec,
    split_env_specs,
)
from .auth_files import AuthSources

__all__ = ["COMMANDS", "build_parser", "main"]

DEFAULT_PORT: Final = 8765
DEFAULT_HOST: Final = "127.0.0.1"

Command = tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"SESSION_SERVER_{name}") or default


def add_memory_dir(parser: argparse.ArgumentParser) -> None:
    """``--memory-dir`` as every subcommand accepts it."""
    parser.add_argument(
        "--memory-dir",
        type=Path,
        default=Path(_env("MEMORY_DIR", "memory") or "memory"),
        help="folder holding agents/<agent_id>/agent.sqlite and the JSONL mirror "
        "(env SESSION_SERVER_MEMORY_DIR; default ./memory)",
    )


def _token(value: str) -> str:
    try:
        parse_token_spec(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return value


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from exc
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def _positive_seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from exc
    if not number > 0:
        raise argparse.ArgumentTypeError("must be more than 0 seconds")
    return number


def _port(value: str) -> int:
    try:
        number = int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from exc
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError("must be between 0 and 65535")
    return number


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host",
        default=_env("HOST"),
        help="interface to listen on (env SESSION_SERVER_HOST; default 127.0.0.1). "
        "Without tokens the server stays on 127.0.0.1 unless --host is given",
    )
    p.add_argument(
        "--port",
        type=_port,
        default=_port(_env("PORT", str(DEFAULT_PORT)) or str(DEFAULT_PORT)),
        help=f"TCP port; 0 lets the system choose (env SESSION_SERVER_PORT; default {DEFAULT_PORT})",
    )
    add_memory_dir(p)
    p.add_argument(
        "--token",
        action="append",
        type=_token,
        metavar="TOKEN[:PATTERN,...]",
        help="accept this bearer token; repeat for several. TOKEN:agent-a-*,agent-b limits "
        "it to agent ids matching those fnmatch patterns (env SESSION_SERVER_TOKENS: "
        "plain tokens comma-separated, restricted specs separated by ';' or spaces). "
        "Without any token, authentication is off",
    )
    _secret_file_argument(p)
    p.add_argument(
        "--token-file",
        type=Path,
        default=_path_env("TOKEN_FILE"),
        metavar="FILE",
        help="also accept the token specs in FILE (one TOKEN[:PATTERN,...[:SCOPE]] per line, "
        "# comments); re-read on SIGHUP and when it changes (env SESSION_SERVER_TOKEN_FILE)",
    )
    p.add_argument(
        "--token-reload-interval",
        type=float,
        default=float(_env("TOKEN_RELOAD_INTERVAL", "2") or "2"),
        metavar="SECONDS",
        help="how often to check the token and secret files for changes; 0: only on SIGHUP "
        "(env SESSION_SERVER_TOKEN_RELOAD_INTERVAL; default 2)",
    )
    p.add_argument(
        "--max-connections",
        type=_positive_int,
        default=_positive_int(_env("MAX_CONNECTIONS") or "") if _env("MAX_CONNECTIONS") else None,
        help="most simultaneous connections; more are refused with HTTP 503 "
        "(env SESSION_SERVER_MAX_CONNECTIONS; default derived from the descriptor limit)",
    )
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=float(_env("IDLE_TIMEOUT", "300") or "300"),
        help="close a connection that sent nothing, has nothing in flight and no "
        "subscription for this many seconds (env SESSION_SERVER_IDLE_TIMEOUT; default 300)",
    )
    p.add_argument(
        "--stop-timeout",
        type=float,
        default=float(_env("STOP_TIMEOUT", "10") or "10"),
        help="on SIGTERM/SIGINT, stop within this many seconds whatever the clients do "
        "(env SESSION_SERVER_STOP_TIMEOUT; default 10)",
    )
    p.add_argument(
        "--synchronous",
        choices=("FULL", "NORMAL"),
        default=(_env("SYNCHRONOUS", "FULL") or "FULL").upper(),
        help="SQLite synchronous level: FULL survives power loss, NORMAL (WAL) survives "
        "process crashes and is faster (env SESSION_SERVER_SYNCHRONOUS; default FULL)",
    )
    p.add_argument(
        "--max-frame-bytes",
        type=_positive_int,
        default=_positive_int(_env("MAX_FRAME_BYTES", str(16 * 1024 * 1024)) or "16777216"),
        help="largest accepted WebSocket message; bigger ones close the connection with "
        "1009 (env SESSION_SERVER_MAX_FRAME_BYTES; default 16777216 = 16 MiB)",
    )
    p.add_argument(
        "--context-limit",
        type=_positive_int,
        default=_positive_int(_env("CONTEXT_LIMIT", "200") or "200"),
        help="events a context.build without limit or strategy takes (the latest ones; "
        "older turns are left out and counted in omitted_events) "
        "(env SESSION_SERVER_CONTEXT_LIMIT; default 200)",
    )
    p.add_argument(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        default=(_env("LOOP", "auto") or "auto").lower(),
        help="event loop: uvloop (faster; the 'fast' extra installs it), asyncio's own, or "
        "auto: uvloop when it is installed (env SESSION_SERVER_LOOP; default auto)",
    )
    p.add_argument(
        "--compaction-wait",
        type=_positive_seconds,
        default=_positive_seconds(_env("COMPACTION_WAIT", "2") or "2"),
        help="seconds a context.build / context.render waits for a summary before it "
        "answers with the previous compaction record (the summary goes on in the "
        "background) (env SESSION_SERVER_COMPACTION_WAIT; default 2)",
    )
    p.add_argument(
        "--compaction-timeout",
        type=_positive_seconds,
        default=_positive_seconds(_env("COMPACTION_TIMEOUT", "120") or "120"),
        help="seconds a background summary may take before it counts as failed and is "
        "retried later with backoff (env SESSION_SERVER_COMPACTION_TIMEOUT; default 120)",
    )
    p.add_argument(
        "--no-mirror",
        action="store_true",
        default=(_env("MIRROR", "1") or "1").lower() in ("0", "false", "no", "off"),
        help="do not keep the JSONL mirror in the reference layout next to SQLite "
        "(env SESSION_SERVER_MIRROR=0; default: keep it)",
    )
    p.add_argument(
        "--log-level",
        default=(_env("LOG_LEVEL", "WARNING") or "WARNING").upper(),
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="logging level on stderr (env SESSION_SERVER_LOG_LEVEL; default WARNING)",
    )


def _secret_file_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--token-secret-file",
        type=Path,
        default=_path_env("TOKEN_SECRET_FILE"),
        metavar="FILE",
        help="accept signed tokens (HS256 JWTs) made with the secret in FILE: one secret of "
        "at least 32 bytes per line, the first signs, all verify; re-read on SIGHUP and when "
        "it changes (env SESSION_SERVER_TOKEN_SECRET_FILE; SESSION_SERVER_TOKEN_SECRET may "
        "hold the secret itself)",
    )


def _path_env(name: str) -> Path | None:
    value = _env(name)
    return Path(value) if value else None


def _auth_sources(args: argparse.Namespace) -> AuthSources:
    specs = args.token or split_env_specs(_env("TOKENS"))
    return AuthSources(
        specs=tuple(specs),
        token_file=args.token_file,
        secret_file=args.token_secret_file,
        secret=_env("TOKEN_SECRET"),
    )


def _run_serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, args.log_level), format="%(levelname)s %(name)s: %(message)s"
    )
    sources = _auth_sources(args)
    try:
        auth = sources.load()
    except ValueError as exc:
        print(f"session-server: {exc}", file=sys.stderr)
        return 2
    if sources.configured and not auth.enabled:
        print("session-server: the token file holds no token", file=sys.stderr)
        return 2
    try:
        factory = _loop_factory(args.loop)
    except ImportError as exc:
        print(f"session-server: --loop {args.loop}: {exc}", file=sys.stderr)
        return 2
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(_serve(args, sources, auth))
    except KeyboardInterrupt:  # a signal before the handlers were installed
        return 130


def _loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop for ``uvloop`` (``ImportError`` when it is not installed) and
    for ``auto`` when it is installed; ``None`` (asyncio's own) otherwise."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ImportError(
                "uvloop is not installed (pip install 'session-server[fast]')"
            ) from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


async def _serve(args: argparse.Namespace, sources: AuthSources, auth: Authenticator) -> int:
    from .auth_files import AuthReloader
    from .core.errors import MemoryDirInUseError
    from .limits import derive_limits, raise_nofile_limit
    from .rpc.table import BUILTIN_METHODS
    from .runtime.registry import ActorRegistry
    from .server import SessionServer, quiet_accept_errors

    # Descriptors bound both open agents and connections: take what the system allows.
    limits = derive_limits(raise_nofile_limit())

    host = args.host or DEFAULT_HOST
    tokens = auth.enabled
    if not tokens and args.host is None:
        print(
            "session-server: no tokens configured, so listening on 127.0.0.1 only "
            "(pass --host to listen elsewhere, --token to require a token)",
            file=sys.stderr,
            flush=True,
        )
    elif not tokens:
        print(
            f"session-server: WARNING: no tokens configured and listening on {host}: "
            "anyone who can reach this port can read and write every agent's memory",
            file=sys.stderr,
            flush=True,
        )
    memory_dir = args.memory_dir.resolve()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    quiet_accept_errors(loop)
    async with ActorRegistry(
        memory_dir,
        synchronous=args.synchronous,
        mirror=not args.no_mirror,
        context_limit=args.context_limit,
        max_open=limits.max_open_agents,
        compaction_wait=args.compaction_wait,
        compaction_timeout=args.compaction_timeout,
    ) as registry:
        server = SessionServer(
            registry,
            host=host,
            port=args.port,
            auth=auth,
            max_frame_bytes=args.max_frame_bytes,
            methods=BUILTIN_METHODS,
            max_connections=args.max_connections or limits.max_connections,
            idle_timeout=args.idle_timeout if args.idle_timeout > 0 else None,
            stop_timeout=args.stop_timeout,
        )
        try:
            await server.start()
        except MemoryDirInUseError as exc:
            print(f"session-server: cannot start: {exc.message}", file=sys.stderr, flush=True)
            return 2
        except OSError as exc:
            print(f"session-server: cannot listen on {host}:{args.port}: {exc}", file=sys.stderr)
            return 2
        watcher: asyncio.Task[None] | None = None
        if sources.configured:
            reloader = AuthReloader(sources, server)
            loop.add_signal_handler(signal.SIGHUP, reloader.reload)
            if args.token_reload_interval > 0 and (sources.token_file or sources.secret_file):
                watcher = asyncio.create_task(reloader.watch(args.token_reload_interval))
        print(
            f"session-server listening on {server.url} (memory dir {memory_dir})",
            flush=True,
        )
        await stop.wait()
        if watcher is not None:
            watcher.cancel()
        print("session-server: stopping (finishing requests in flight)", file=sys.stderr)
        await server.stop()
    print("session-server: stopped", file=sys.stderr, flush=True)
    return 0


def add_remote(parser: argparse.ArgumentParser) -> None:
    """``--url``/``--token``: go through a running server instead of the memory dir."""
    parser.add_argument(
        "--url",
        default=_env("URL"),
        help="do it through the server at this address (ws://HOST:PORT) instead of reading "
        "--memory-dir (env SESSION_SERVER_URL)",
    )
    parser.add_argument(
        "--token", default=_env("TOKEN"), help="bearer token for --url (env SESSION_SERVER_TOKEN)"
    )


def _export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("agent_id", help="the agent whose session to export")
    p.add_argument("--session", required=True, help="the session id")
    p.add_argument("--out", required=True, type=Path, help="output root (OUT/agents/<name>/)")
    p.add_argument("--name", help="folder name under OUT/agents (default: the agent id)")
    add_memory_dir(p)
    add_remote(p)


def _import_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", type=Path, help="an export folder (or a root with one agent)")
    p.add_argument("--agent", required=True, help="the agent to import into")
    p.add_argument(
        "--session",
        help="session id to import as (default: the exported session's id; a new uuid for "
        "a folder without session_rows.jsonl)",
    )
    p.add_argument(
        "--new-ids",
        action="store_true",
        help="a copy: fresh session and event ids (to import beside the original)",
    )
    add_memory_dir(p)
    add_remote(p)


def _inspect_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("agent_id", help="the agent to show")
    p.add_argument("--session", help="the session (default: the most recently updated)")
    p.add_argument("--json", action="store_true", help="print the memory view as JSON")
    p.add_argument("--limit", type=_positive_int, help="at most this many raw traces")
    add_memory_dir(p)
    add_remote(p)


def _backup_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("agent_ids", nargs="+", metavar="AGENT_ID", help="the agents to back up")
    p.add_argument(
        "--out", required=True, type=Path, help="backup folder (AGENT_ID.sqlite, manifest.json)"
    )
    add_memory_dir(p)
    add_remote(p)


def _restore_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", type=Path, help="a backup folder (with manifest.json)")
    p.add_argument(
        "--agent",
        action="append",
        dest="agent_ids",
        metavar="AGENT_ID",
        help="restore only this agent (repeat for several; default: every agent)",
    )
    p.add_argument("--force", action="store_true", help="replace agents that already exist")
    add_memory_dir(p)
    add_remote(p)


def _fail(args: argparse.Namespace, exc: Exception) -> int:
    message = getattr(exc, "message", None) or str(exc)
    print(f"session-server {args.command}: {message}", file=sys.stderr)
    return 1


def _run(args: argparse.Namespace, job: Callable[[], Any]) -> int:
    """Run the coroutine ``job()``; project errors exit 1 with their message."""
    from .core.errors import SessionServerError

    try:
        result = asyncio.run(job())
    except (SessionServerError, OSError) as exc:
        return _fail(args, exc)
    if result is not None:
        print(result)
    return 0


def _run_offline(
    args: argparse.Namespace, job: Any, *, must_exist: bool = True, readonly: bool = False
) -> int:
    """Run ``job(actor)`` on a registry over ``--memory-dir``; errors exit 1 with a message.

    ``readonly``: open the agent read-only, without its lock, so this works beside a server
    that holds it (WAL: readers never block the writer). Otherwise a server holding the
    agent makes this fail with a clear message rather than write beside it.
    ``must_exist``: refuse an unknown agent instead of creating it.
    """
    from .core.errors import NotFoundError
    from .runtime.registry import ActorRegistry

    agent_id = args.agent_id if hasattr(args, "agent_id") else args.agent

    async def run() -> Any:
        async with ActorRegistry(args.memory_dir, idle_timeout=None, readonly=readonly) as reg:
            if must_exist and not (reg.agent_dir(agent_id) / "agent.sqlite").is_file():
                raise NotFoundError(f"agent {agent_id!r} not found in {args.memory_dir}")
            return await job(await reg.get(agent_id))

    return _run(args, run)


def _client(args: argparse.Namespace, agent_id: str, *, max_size: int | None = None) -> Any:
    from .client import SessionClient
    from .server import DEFAULT_MAX_FRAME_BYTES

    return SessionClient(
        args.url, agent_id, token=args.token, max_size=max_size or DEFAULT_MAX_FRAME_BYTES
    )


def _run_export(args: argparse.Namespace) -> int:
    from .runtime import transfer

    if args.url:

        async def remote() -> str:
            from .mirror_io.jsonl import atomic_write_bytes

            async with _client(args, args.agent_id) as client:
                params = {"session_id": args.session}
                if args.name:
                    params["name"] = args.name
                out = await client.call("export.session", params)
            folder = args.out / "agents" / out["name"]
            folder.mkdir(parents=True, exist_ok=True)
            for name in transfer.REFERENCE_FILES:
                if name in out["files"]:
                    atomic_write_bytes(folder / name, out["files"][name].encode("utf-8"))
                else:
                    (folder / name).unlink(missing_ok=True)
            return f"exported session {args.session} to {folder}"

        return _run(args, remote)

    async def job(actor: Any) -> str:
        info = await transfer.export_session(actor, args.session, args.out, name=args.name)
        return f"exported {info['event_count']} events to {info['folder']}"

    return _run_offline(args, job, readonly=True)


def _imported(info: dict[str, Any]) -> str:
    how = "losslessly" if info.get("lossless") else f"from the reference files ({info['note']})"
    return (
        f"imported {info['event_count']} events into session {info['session_id']} "
        f"(last seq {info['last_seq']}) {how}"
    )


def _run_import(args: argparse.Namespace) -> int:
    from .runtime import transfer

    if args.url:

        async def remote() -> str:
            from .mirror_io.import_ import find_reference_folder

            folder = find_reference_folder(args.folder)
            files = {
                name: (folder / name).read_text(encoding="utf-8")
                for name in transfer.REFERENCE_FILES
                if (folder / name).is_file()
            }
            params: dict[str, Any] = {"files": files, "new_ids": args.new_ids}
            if args.session:
                params["session_id"] = args.session
            async with _client(args, args.agent) as client:
                return _imported(await client.call("import.session", params))

        return _run(args, remote)

    async def job(actor: Any) -> str:
        info = await transfer.import_session(
            actor, args.folder, session_id=args.session, new_ids=args.new_ids
        )
        return _imported(info)

    return _run_offline(args, job, must_exist=False)


def _run_inspect(args: argparse.Namespace) -> int:
    from .core.codec import encode_json
    from .mirror.view import MemoryViewOptions, format_memory_view
    from .mirror_io.view_files import read_memory_view
    from .storage.backup import agent_held

    if args.url:

        async def remote() -> str:
            params: dict[str, Any] = {}
            if args.session:
                params["session_id"] = args.session
            if args.limit:
                params["raw_trace_limit"] = args.limit
            async with _client(args, args.agent_id) as client:
                view = await client.call("memory.view", params)
            return encode_json(view) if args.json else format_memory_view(view)

        return _run(args, remote)

    async def job(actor: Any) -> str:
        # Touching the agent repairs a mirror a crash left behind; drain writes it out.
        # (Read-only beside a server: the server keeps the mirror current itself.)
        await actor.list_sessions()
        await actor.mirror.drain()
        view = read_memory_view(
            args.memory_dir,
            actor.agent_id,
            session_id=args.session,
            options=MemoryViewOptions(raw_trace_limit=args.limit),
        )
        return encode_json(view) if args.json else format_memory_view(view)

    held = agent_held(args.memory_dir / "agents" / args.agent_id)
    return _run_offline(args, job, readonly=held)


def _run_backup(args: argparse.Namespace) -> int:
    from .runtime.backups import RPC_MAX_BACKUP_BYTES, backup_agents

    if args.url:

        async def remote() -> str:
            import base64

            from .storage.backup import BackupEntry, save_backup

            lines = []
            for agent_id in args.agent_ids:
                async with _client(args, agent_id, max_size=2 * RPC_MAX_BACKUP_BYTES) as client:
                    out = await client.backup_agent()
                data = base64.b64decode(out.pop("data"))
                out.pop("agent_id")
                save_backup(args.out, agent_id, data, BackupEntry(**out))
                lines.append(f"backed up {agent_id}: {out['bytes']} bytes, {out['events']} events")
            return "\n".join(lines)

        return _run(args, remote)

    async def local() -> str:
        done = backup_agents(args.memory_dir, args.agent_ids, args.out)
        return "\n".join(
            f"backed up {d['agent_id']}: {d['bytes']} bytes, {d['sessions']} sessions, "
            f"{d['events']} events -> {args.out / d['file']}"
            for d in done
        )

    return _run(args, local)


def _run_restore(args: argparse.Namespace) -> int:
    from .runtime.backups import RPC_MAX_BACKUP_BYTES, restore_agents

    if args.url:

        async def remote() -> str:
            import base64

            from .storage.backup import read_manifest, verify_backup_file

            manifest = read_manifest(args.folder)
            lines = []
            for agent_id in args.agent_ids or list(manifest.agents):
                entry = manifest.agents.get(agent_id)
                if entry is None:
                    raise FileNotFoundError(f"agent {agent_id!r} is not in {args.folder}")
                path = args.folder / entry.file
                verify_backup_file(path, entry, agent_id)
                data = base64.b64encode(path.read_bytes()).decode("ascii")
                async with _client(args, agent_id, max_size=2 * RPC_MAX_BACKUP_BYTES) as client:
                    out = await client.restore_agent(data, entry.sha256, force=args.force)
                lines.append(f"restored {agent_id}: {out['sessions']} sessions")
            return "\n".join(lines)

        return _run(args, remote)

    async def local() -> str:
        done = restore_agents(args.folder, args.memory_dir, args.agent_ids, force=args.force)
        return "\n".join(
            f"restored {d['agent_id']}: {d['sessions']} sessions, {d['events']} events"
            for d in done
        )

    return _run(args, local)


def _ttl(value: str) -> int:
    number = _positive_int(value)
    if number > MAX_TTL_SECONDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_TTL_SECONDS} (366 days)")
    return number


def _token_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--agents",
        nargs="+",
        required=True,
        metavar="PATTERN",
        help="agent ids the token may address (fnmatch patterns, e.g. 'support-*')",
    )
    p.add_argument(
        "--sessions",
        nargs="+",
        metavar="SID",
        help="limit the token to these session ids (default: every session of those agents)",
    )
    p.add_argument(
        "--scope",
        required=True,
        choices=SCOPES,
        help="read: only methods that change nothing; write: also appends, persists, "
        "compaction, session create/update; admin: also deletes, import and cross-agent methods",
    )
    p.add_argument(
        "--ttl",
        required=True,
        type=_ttl,
        metavar="SECONDS",
        help=f"seconds until the token expires (at most {MAX_TTL_SECONDS})",
    )
    _secret_file_argument(p)


def _run_token(args: argparse.Namespace) -> int:
    sources = AuthSources(secret_file=args.token_secret_file, secret=_env("TOKEN_SECRET"))
    try:
        secrets = sources.secrets()
        if not secrets:
            raise ValueError(
                "no secret: pass --token-secret-file or set SESSION_SERVER_TOKEN_SECRET"
            )
        token = mint_token(
            secrets[0], agents=args.agents, sessions=args.sessions, scope=args.scope, ttl=args.ttl
        )
    except ValueError as exc:
        print(f"session-server token: {exc}", file=sys.stderr)
        return 2
    print(token)
    return 0


COMMANDS: dict[str, tuple[str, Command]] = {
    "serve": (
        "run the WebSocket JSON-RPC server (prints its address once it accepts connections)",
        (_serve_arguments, _run_serve),
    ),
    "export": (
        "write one session in the reference layout plus session_rows.jsonl "
        "(OUT/agents/<name>/...; works while a server runs)",
        (_export_arguments, _run_export),
    ),
    "import": (
        "load an export (losslessly: ids and seqs kept) or a reference-layout folder",
        (_import_arguments, _run_import),
    ),
    "inspect": (
        "print a readable dump of an agent's memory view (works while a server runs)",
        (_inspect_arguments, _run_inspect),
    ),
    "backup": (
        "copy whole agents, consistently, into a backup folder (works while a server runs)",
        (_backup_arguments, _run_backup),
    ),
    "restore": (
        "put agents back from a backup folder (refuses to replace one unless --force)",
        (_restore_arguments, _run_restore),
    ),
    "token": (
        "print a signed token (HS256 JWT) for the server's --token-secret-file",
        (_token_arguments, _run_token),
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="session-server",
        description="Durable per-agent session memory for LLM agents, served over "
        "WebSocket JSON-RPC 2.0. Options default to SESSION_SERVER_* environment variables.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    sections = []
    for name, (summary, (add_arguments, _run)) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=summary, description=summary)
        add_arguments(command_parser)
        sections.append(command_parser.format_help())
    # `session-server --help` documents every option of every command.
    parser.epilog = "\n".join(sections)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    _summary, (_add, run) = COMMANDS[args.command]
    return run(args)
