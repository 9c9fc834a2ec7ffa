"""Options and argument types shared by the ``session-server`` commands.

Every option has a ``SESSION_SERVER_<OPTION>`` environment variable as its default
(``env``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

from ..storage import file_modes

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "Command",
    "add_memory_dir",
    "add_remote",
    "add_secret_file",
    "env",
    "file_mode",
    "path_env",
    "port_number",
    "positive_int",
    "positive_seconds",
]

DEFAULT_PORT: Final = 8765
DEFAULT_HOST: Final = "127.0.0.1"

Command = tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]


def env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"SESSION_SERVER_{name}") or default


def add_memory_dir(parser: argparse.ArgumentParser) -> None:
    """``--memory-dir`` as every subcommand accepts it."""
    parser.add_argument(
        "--memory-dir",
        type=Path,
        default=Path(env("MEMORY_DIR", "memory") or "memory"),
        help="folder holding agents/<agent_id>/agent.sqlite and the JSONL mirror "
        "(env SESSION_SERVER_MEMORY_DIR; default ./memory)",
    )
    parser.add_argument(
        "--file-mode",
        type=file_mode,
        default=file_mode(env("FILE_MODE", "600") or "600"),
        help="octal mode of every file written (folders get x where r is given; the umask "
        "is narrowed to match) (env SESSION_SERVER_FILE_MODE; default 600: files 0600, "
        "folders 0700)",
    )


def file_mode(value: str) -> int:
    """An octal file mode for ``--file-mode`` (``storage.file_modes.parse_file_mode``)."""
    try:
        return file_modes.parse_file_mode(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from exc
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def positive_seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from exc
    if not number > 0:
        raise argparse.ArgumentTypeError("must be more than 0 seconds")
    return number


def port_number(value: str) -> int:
    try:
        number = int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from exc
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError("must be between 0 and 65535")
    return number


def add_secret_file(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--token-secret-file",
        type=Path,
        default=path_env("TOKEN_SECRET_FILE"),
        metavar="FILE",
        help="accept signed tokens (HS256 JWTs) made with the secret in FILE: one secret of "
        "at least 32 bytes per line, the first signs, all verify; re-read on SIGHUP and when "
        "it changes (env SESSION_SERVER_TOKEN_SECRET_FILE; SESSION_SERVER_TOKEN_SECRET may "
        "hold the secret itself)",
    )


def path_env(name: str) -> Path | None:
    value = env(name)
    return Path(value) if value else None


def add_remote(parser: argparse.ArgumentParser) -> None:
    """``--url``/``--token``: go through a running server instead of the memory dir."""
    parser.add_argument(
        "--url",
        default=env("URL"),
        help="do it through the server at this address (ws://HOST:PORT) instead of reading "
        "--memory-dir (env SESSION_SERVER_URL)",
    )
    parser.add_argument(
        "--token", default=env("TOKEN"), help="bearer token for --url (env SESSION_SERVER_TOKEN)"
    )
