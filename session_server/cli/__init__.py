"""``session-server`` command line.

Subcommands register themselves in ``COMMANDS`` (name -> (add_arguments, run)); ``run``
takes the parsed namespace and returns the exit code. Every option has a
``SESSION_SERVER_<OPTION>`` environment variable as its default.

One module per command group: ``serve``, ``data`` (export, import, inspect), ``backups``
(backup, restore), ``tokens`` (token); ``options`` holds the shared options and argument
types, ``jobs`` how a command's work runs, ``main`` the parser and the entry point.
"""

from __future__ import annotations

from .main import COMMANDS, build_parser, main

__all__ = ["COMMANDS", "build_parser", "main"]
