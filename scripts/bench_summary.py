#!/usr/bin/env python
"""The README's five-row benchmark table, read from the report ``scripts/bench_all.py`` writes.

The table sits in ``README.md`` between ``<!-- bench-summary:start -->`` and
``<!-- bench-summary:end -->``. ``bench_all.py`` rewrites it after each run; run this file
to rewrite it from the ``BENCHMARKS.md`` there is (no measurement). Every figure is taken
from the report's own tables, so the README never states a figure the report does not.
A row the report lacks is an error naming it.

Run: ``.venv/bin/python scripts/bench_summary.py [--report BENCHMARKS.md] [--readme README.md]``
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START = "<!-- bench-summary:start -->"
END = "<!-- bench-summary:end -->"
_BLOCK = re.compile(re.escape(START) + r"\n.*?" + re.escape(END), re.S)


class MissingFigure(LookupError):
    """The report has no section or row the summary reads."""


def section(report: str, heading: str) -> str:
    """The lines under the first heading that starts with ``heading``, up to the next
    heading of the same or a higher level."""
    lines = report.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("#") and line.startswith(heading):
            level = len(line) - len(line.lstrip("#"))
            body = []
            for later in lines[i + 1 :]:
                stripped = later.lstrip("#")
                if later.startswith("#") and len(later) - len(stripped) <= level:
                    break
                body.append(later)
            return "\n".join(body)
    raise MissingFigure(f"no section {heading!r} in the report")


def cells(text: str, label: str) -> list[str]:
    """The cells of the table row whose first cell starts with ``label``."""
    for line in text.split("\n"):
        if line.startswith(f"| {label}"):
            return [cell.strip() for cell in line.strip().strip("|").split("|")]
    raise MissingFigure(f"no row {label!r} in the report")


def summary_table(report: str) -> str:
    """Five rows: the store sequential and concurrent, RPC, load, compaction."""
    seq = section(report, "### Sequential, synchronous=FULL")
    raw = cells(seq, "cost (b)/(a)")[1]
    sdk = cells(seq, "speed (b) vs (c)")[1]
    ours_seq = cells(seq, "(b) session-server |")[1]
    writers = section(report, "### 32 concurrent writers, one session each, synchronous=FULL")
    w_rate = cells(writers, "(b) session-server, 32 writers on one agent")[1]
    w_sdk = cells(writers, "32 writers: ours / SQLiteSession")[1]
    rpc = section(report, "### synchronous=FULL")
    b_xr = cells(rpc, "(b-xr) turn.persist")
    m_xkm = cells(rpc, "(m-xkm)")
    load = section(report, "### Closed loop")
    turns = cells(load, "turns acknowledged")[1]
    rate = re.search(r"\(([\d,]+)/s\)", turns)
    if rate is None:
        raise MissingFigure(f"no rate in {turns!r}")
    p99 = cells(load, "turn.persist p99")[1].split()[0]
    compaction = section(report, "## 4. Compaction")
    none = cells(compaction, "none")[2]
    compact = cells(compaction, "compact (keep 2) |")
    summarize = cells(compaction, "summarize")
    rows = [
        "| measure (synchronous=FULL) | figure | against |",
        "|---|---:|---|",
        f"| sequential build + persist of a 4-message turn, in process | {ours_seq} turns/s "
        f"| {raw} the cost of raw sqlite3; {sdk} the speed of the Agents SDK's `SQLiteSession` |",
        f"| 32 writers on one agent (group commit) | {w_rate} turns/s "
        f"| {w_sdk} `SQLiteSession` under the same concurrency |",
        f"| sequential `turn.persist` over RPC, client in another process | {b_xr[1]} calls/s "
        f"| {b_xr[2]} of its bound (echo + raw commit); the least server keeping the "
        f"contract: {m_xkm[2]} |",
        f"| load: 64 connections over 16 agents, closed loop | {rate.group(1)} turns/s, "
        f"p99 {p99} ms | saturation of a server subprocess |",
        f"| context tokens of a 200-turn tool-heavy session | compact {compact[2]}, "
        f"summarize {summarize[2]} | {none} tokens without compaction |",
    ]
    return "\n".join(rows)


def with_summary(readme: str, report: str) -> str:
    """``readme`` with the table between the markers replaced (the markers must be there)."""
    if not _BLOCK.search(readme):
        raise MissingFigure(f"no {START} ... {END} block in the README")
    block = f"{START}\n{summary_table(report)}\n{END}"
    return _BLOCK.sub(lambda _m: block, readme)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--report", type=Path, default=ROOT / "BENCHMARKS.md")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    args = parser.parse_args(argv)
    text = args.readme.read_text(encoding="utf-8")
    new = with_summary(text, args.report.read_text(encoding="utf-8"))
    if new != text:
        args.readme.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    main()
