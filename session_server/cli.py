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
from typing import Final

from .auth import TokenSet, parse_token_spec

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
        "--log-level",
        default=(_env("LOG_LEVEL", "WARNING") or "WARNING").upper(),
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="logging level on stderr (env SESSION_SERVER_LOG_LEVEL; default WARNING)",
    )


def _run_serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, args.log_level), format="%(levelname)s %(name)s: %(message)s"
    )
    tokens = (
        TokenSet([parse_token_spec(t) for t in args.token])
        if args.token
        else TokenSet.from_env(_env("TOKENS"))
    )
    try:
        return asyncio.run(_serve(args, tokens))
    except KeyboardInterrupt:  # a signal before the handlers were installed
        return 130


async def _serve(args: argparse.Namespace, tokens: TokenSet) -> int:
    from .registry import ActorRegistry
    from .server import SessionServer

    host = args.host or DEFAULT_HOST
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
    async with ActorRegistry(memory_dir, synchronous=args.synchronous) as registry:
        server = SessionServer(
            registry,
            host=host,
            port=args.port,
            tokens=tokens,
            max_frame_bytes=args.max_frame_bytes,
        )
        try:
            await server.start()
        except OSError as exc:
            print(f"session-server: cannot listen on {host}:{args.port}: {exc}", file=sys.stderr)
            return 2
        print(
            f"session-server listening on {server.url} (memory dir {memory_dir})",
            flush=True,
        )
        await stop.wait()
        print("session-server: stopping (finishing requests in flight)", file=sys.stderr)
        await server.stop()
    print("session-server: stopped", file=sys.stderr, flush=True)
    return 0


COMMANDS: dict[str, tuple[str, Command]] = {
    "serve": (
        "run the WebSocket JSON-RPC server (prints its address once it accepts connections)",
        (_serve_arguments, _run_serve),
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
