"""The ``session-server`` parser and entry point: every command in ``COMMANDS``."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from ..storage import file_modes
from .backups import backup_arguments, restore_arguments, run_backup, run_restore
from .data import (
    export_arguments,
    import_arguments,
    inspect_arguments,
    run_export,
    run_import,
    run_inspect,
)
from .options import Command
from .recall import reindex_arguments, run_reindex
from .serve import run_serve, serve_arguments
from .tokens import run_token, token_arguments

__all__ = ["COMMANDS", "build_parser", "main"]


COMMANDS: dict[str, tuple[str, Command]] = {
    "serve": (
        "run the WebSocket JSON-RPC server (prints its address once it accepts connections)",
        (serve_arguments, run_serve),
    ),
    "export": (
        "write one session in the reference layout plus session_rows.jsonl "
        "(OUT/agents/<name>/...; works while a server runs)",
        (export_arguments, run_export),
    ),
    "import": (
        "load an export (losslessly: ids and seqs kept) or a reference-layout folder",
        (import_arguments, run_import),
    ),
    "inspect": (
        "print a readable dump of an agent's memory view (works while a server runs)",
        (inspect_arguments, run_inspect),
    ),
    "backup": (
        "copy whole agents, consistently, into a backup folder (works while a server runs)",
        (backup_arguments, run_backup),
    ),
    "restore": (
        "put agents back from a backup folder (refuses to replace one unless --force)",
        (restore_arguments, run_restore),
    ),
    "reindex": (
        "rebuild an agent's recall (full-text search) index; --url: on a running server",
        (reindex_arguments, run_reindex),
    ),
    "token": (
        "print a signed token (HS256 JWT) for the server's --token-secret-file",
        (token_arguments, run_token),
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
    mode = getattr(args, "file_mode", None)
    if mode is not None:
        # Private by default: also what SQLite, tempfile and the like create follows.
        file_modes.set_file_mode(mode)
        os.umask(0o777 & ~file_modes.dir_mode())
    try:
        return run(args)
    except BrokenPipeError:
        # The reader went away (``session-server inspect ... | head``): not an error of
        # ours. Python's own advice: point stdout at devnull so the flush at exit does not
        # raise again, and exit as a process killed by SIGPIPE would.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE
