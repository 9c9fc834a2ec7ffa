"""``session-server`` command line (placeholder until the server lands)."""

from __future__ import annotations

import argparse

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="session-server", description=__doc__)
    parser.parse_args(argv)
    parser.print_help()
    return 0
