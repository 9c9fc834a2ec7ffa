"""The documentation stays short where a newcomer starts, its links lead somewhere, and the
tables generated from the code (options, strategy keys, the README's benchmark rows) are
the ones their scripts write now."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import bench_summary  # noqa: E402
import gen_reference  # noqa: E402

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
README_MAX_LINES = 250
# Links that leave the repository: the shared folder beside it (the design contract). A
# checkout may lack it, so these are checked by name, not on disk.
OUTSIDE = {"../shared/DESIGN.md"}

# [text](target) and ![alt](target); a target ends at the first space or closing bracket.
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")


def relative_links(page: Path) -> list[str]:
    """Link targets outside code that are neither URLs nor pure anchors."""
    text = _CODE.sub("", _FENCE.sub("", page.read_text(encoding="utf-8")))
    targets = [m.group(1) for m in _LINK.finditer(text)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and t[0] != "#"]


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown page."""
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    found = set()
    for line in text.split("\n"):
        match = re.match(r"^#{1,6}\s+(.*)$", line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            found.add(slug)
    return found


def local_anchors(page: Path) -> list[str]:
    text = _CODE.sub("", _FENCE.sub("", page.read_text(encoding="utf-8")))
    return [m.group(1)[1:] for m in _LINK.finditer(text) if m.group(1).startswith("#")]


def leads_somewhere(page: Path, target: str, root: Path = ROOT) -> bool:
    """An existing file (and heading, for an anchor into a Markdown page), or a known
    place outside the repository."""
    path, _, anchor = target.partition("#")
    resolved = (page.parent / path).resolve()
    if not resolved.is_relative_to(root):
        return os.path.relpath(resolved, root) in OUTSIDE
    if not resolved.exists():
        return False
    return not (anchor and resolved.suffix == ".md" and anchor not in anchors(resolved))


def test_readme_fits_a_newcomer() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file(page: Path) -> None:
    broken = [target for target in relative_links(page) if not leads_somewhere(page, target)]
    broken += [f"#{a}" for a in local_anchors(page) if a not in anchors(page)]
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


def test_the_link_checker_sees_links_and_anchors(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# A title, `code`\n[ok](page.md#a-title-code) [gone](missing.md) "
        "![img](pic.png) [web](https://example.com) [self](#nowhere)\n"
        "```\n[in code](ignored.md)\n```\n",
        encoding="utf-8",
    )
    assert relative_links(page) == ["page.md#a-title-code", "missing.md", "pic.png"]
    assert anchors(page) == {"a-title-code"}
    assert local_anchors(page) == ["nowhere"]
    assert leads_somewhere(page, "page.md#a-title-code", tmp_path)
    assert not leads_somewhere(page, "page.md#no-such-heading", tmp_path)
    assert not leads_somewhere(page, "missing.md", tmp_path)
    assert not leads_somewhere(page, "../elsewhere.md", tmp_path)
    assert leads_somewhere(page, "../shared/DESIGN.md", tmp_path)


def test_no_session_narratives() -> None:
    """Docs state what is true now; no "session 14 did ..." or "round 3"."""
    narrative = re.compile(r"\b(?:session|round)s? \d+\b(?![,.]\d)", re.I)
    found = [
        f"{page.relative_to(ROOT)}: {m.group(0)}"
        for page in PAGES
        for m in narrative.finditer(page.read_text(encoding="utf-8"))
    ]
    assert not found, found


def test_reference_tables_match_the_code() -> None:
    """docs/reference.md's option and strategy tables are what scripts/gen_reference.py
    writes from the argparse parser and StrategyConfig today."""
    text = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    assert gen_reference.missing_markers(text) == []
    assert gen_reference.render(text) == text, "run .venv/bin/python scripts/gen_reference.py"


def test_reference_names_every_option_and_strategy_key() -> None:
    from session_server.cli.main import COMMANDS
    from session_server.compaction.config import StrategyConfig

    text = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    for command in COMMANDS:
        assert f"<!-- gen:options-{command}:start -->" in text
    assert "`--idle-timeout" in text and "`SESSION_SERVER_IDLE_TIMEOUT`" in text
    for key in StrategyConfig.model_fields:
        assert f"| `{key}` |" in text, key


def test_option_defaults_ignore_the_callers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference shows built-in defaults even when SESSION_SERVER_* is set."""
    before = gen_reference.option_table("serve")
    monkeypatch.setenv("SESSION_SERVER_PORT", "9999")
    assert gen_reference.option_table("serve") == before
    assert "`8765`" in before and "9999" not in before


def test_readme_benchmark_table_comes_from_the_report() -> None:
    report = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    assert bench_summary.with_summary(readme, report) == readme, (
        "run .venv/bin/python scripts/bench_summary.py"
    )
    table = bench_summary.summary_table(report)
    assert table.count("\n") == 6  # a header, its rule, five rows


def test_benchmark_summary_names_a_missing_row() -> None:
    with pytest.raises(bench_summary.MissingFigure, match="Sequential"):
        bench_summary.summary_table("# Benchmarks\n\nnothing measured\n")
