"""Move the modules of ``session_server`` (and their tests) into folders that say what
each file is (issue 34, item 1), rewriting every import and module path that names them.

Run from the repository root: ``python scripts/house_moves.py`` (``--dry-run`` prints the
plan and changes nothing). It then wants ``ruff check --fix`` and ``ruff format`` (import
order), mypy and the tests.

What it does, in order:

1. Checks the plan against the tree: a planned module that does not exist (and was not
   moved already) is reported and skipped; a loose module at the top of
   ``session_server/`` that the plan does not place makes it fail (exit 1) before it
   changes anything, naming the module, so a module added since the plan was written is
   placed by a person.
2. ``git mv`` of every planned source and test module whose old file exists and new file
   does not; creates the new packages' ``__init__.py`` files.
3. Rewrites, in ``session_server/``, ``tests/``, ``scripts/``, ``examples/``,
   ``docs/*.md``, ``README.md``, ``BENCHMARKS.md`` and ``pyproject.toml``: every import
   statement (absolute and relative, ``from pkg import module`` included; read with
   ``ast``), then every other dotted module path (``"session_server.x.y"`` in strings,
   ``python -m``, logger names, docs), file path (``session_server/x.py``,
   ``tests/session_server/test_x.py``) and package-relative name in double backticks
   (````core.events````), and ``Path(__file__).parents[n]`` of a test that moved deeper.

It is idempotent: a move already made is not made again, and a module path already
rewritten names no old module. Old paths that are a prefix of their new path
(``session_server.server`` -> ``session_server.server.server``) are rewritten only in the
run that moves them, since afterwards the old name is the new package.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "session_server"

# The DESIGN §3 import paths and the package's own entry files stay at the top.
TOP_LEVEL_KEEP = {"__init__", "__main__", "events", "codec", "context", "errors"}

SERVER = [
    "server",
    "connection_pump",
    "connection_host",
    "connection_subscriptions",
    "intake",
    "ws_compat",
    "handshake",
    "handshake_guard",
    "origins",
    "fanout",
    "answers",
    "http_routes",
    "rate_limited_log",
]
# The value types and rules that compaction/ and mirror/ import (computed from the import
# graph: the closure, inside core/, of what those two folders import) and file_shape,
# which storage/ imports and which imports nothing of AgentCore.
VALUES = [
    "agent_ids",
    "cache_budget",
    "codec",
    "context",
    "errors",
    "events",
    "file_shape",
    "json_depth",
    "plans",
    "recent",
    "records",
    "repair",
    "session_rows",
    "tail_index",
    "tokens",
    "turns",
    "validation",
]

# old module (relative to session_server) -> new module
SOURCE_PLAN: dict[str, str] = {
    **{m: f"server.{m}" for m in SERVER},
    "auth": "auth.tokens",
    "auth_files": "auth.token_files",
    "sync_client": "client.sync_client",
    "follow": "client.follow",
    "budget": "concurrency.budget",
    "inflight_window": "concurrency.inflight_window",
    "flow": "concurrency.flow",
    "runtime.eager_tasks": "concurrency.eager_tasks",
    "storage.io_threads": "concurrency.io_threads",
    "storage.thread_calls": "concurrency.thread_calls",
    "limits": "process.limits",
    "process_memory": "process.memory",
    "runtime.ops_metrics": "process.ops_metrics",
    "log_redact": "process.log_redact",
    "progress": "process.progress",
    **{f"core.{m}": f"values.{m}" for m in VALUES},
}

NEW_PACKAGES: dict[str, str] = {
    "server": (
        '"""The WebSocket server: accepting, the handshake, one connection\'s pump, intake\n'
        "bounds, fan-out, answers and the HTTP routes (I/O shell).\n\n"
        "``SessionServer`` and ``lock_memory_dir`` are importable from here.\n"
        '"""\n\n'
        "from __future__ import annotations\n\n"
        "from .server import SessionServer, lock_memory_dir\n\n"
        '__all__ = ["SessionServer", "lock_memory_dir"]\n'
    ),
    "auth": (
        '"""Access tokens: the rules (``tokens``, pure: parsing, signing, checking a grant)\n'
        "and their files (``token_files``: reading them, reloading on change).\n\n"
        "Every name of ``tokens`` is importable from here.\n"
        '"""\n\n'
        "from __future__ import annotations\n\n"
        "from .tokens import *  # noqa: F403\n"
        "from .tokens import __all__ as __all__\n"
    ),
    "concurrency": (
        '"""asyncio and thread primitives with no knowledge of sessions, events or agents."""\n'
    ),
    "process": (
        '"""Process-wide operations: file-descriptor limits, malloc, operational metrics,\n'
        'log redaction and progress bars."""\n'
    ),
    "values": (
        '"""The value types and pure rules every folder shares: events, codec, errors,\n'
        "validation, token counts, turns, the recent-events cache and the plans the core\n"
        'hands to the shell. Imports nothing of ``core``, ``compaction`` or ``mirror``."""\n'
    ),
}

# Tests: old path (relative to tests/session_server, no .py) -> new path.
TEST_PLAN: dict[str, str] = {
    "test_answers": "server/test_answers",
    "test_connection_pump_answers": "server/test_connection_pump_answers",
    "test_connection_pump_idle": "server/test_connection_pump_idle",
    "test_handshake_guard": "server/test_handshake_guard",
    "test_http_routes": "server/test_http_routes",
    "test_origins": "server/test_origins",
    "test_ws_compat": "server/test_ws_compat",
    "test_auth": "auth/test_tokens",
    "test_budget": "concurrency/test_budget",
    "test_inflight_window": "concurrency/test_inflight_window",
    "runtime/test_eager_tasks": "concurrency/test_eager_tasks",
    "storage/test_io_threads": "concurrency/test_io_threads",
    "storage/test_thread_calls": "concurrency/test_thread_calls",
    "test_progress": "process/test_progress",
    "test_sync_client": "client/test_sync_client",
    "test_client": "client/test_client",
    "test_client_imports": "client/test_client_imports",
    "test_client_methods": "client/test_client_methods",
    "test_client_retries": "client/test_client_retries",
    "test_file_modes": "storage/test_file_modes",
    "test_idempotency_retention": "storage/test_idempotency_retention",
    "test_cli_data": "cli/test_cli_data",
    "test_cli_memory": "cli/test_cli_memory",
    "test_server_cli": "cli/test_server_cli",
    **{
        f"test_server_{m}": f"server/test_server_{m}"
        for m in (
            "after_answer",
            "agent_creation",
            "auth",
            "bounds",
            "compaction_safety",
            "concurrency",
            "errors",
            "front_door",
            "intake",
            "loop_work",
            "methods",
            "metrics_scope",
            "repair",
            "replay",
            "sharp_edges",
            "shutdown",
            "token_rotation",
            "tokens",
            "trust",
        )
    },
    **{f"core/test_{m}": f"values/test_{m}" for m in VALUES},
    "core/test_recent_messages": "values/test_recent_messages",
    "core/test_repair_scan": "values/test_repair_scan",
    "core/test_window_equivalence": "values/test_window_equivalence",
    "core/window_reference": "values/window_reference",
    "test_session_list_pages": "rpc/test_session_list_pages",
    # Tests of scripts/ live in tests/scripts/.
    "test_flush_shim": "../scripts/test_flush_shim",
    **{
        f"test_bench_{m}": f"../scripts/test_bench_{m}"
        for m in ("client_restart", "env", "minimal_server", "rpc_limit", "rpc_segments")
    },
}


@dataclass(frozen=True)
class Move:
    old: Path
    new: Path
    old_module: str
    new_module: str


def test_module(name: str) -> str:
    """A TEST_PLAN path (relative to ``tests/session_server``, ``..`` allowed) as a module."""
    return ".".join(Path(os.path.normpath(Path("tests", PACKAGE, name))).parts)


def module_path(module: str) -> Path:
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def path_module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def plan_moves() -> tuple[list[Move], list[str], list[str]]:
    """The moves still to make, the planned modules that do not exist, and those made."""
    moves: list[Move] = []
    missing: list[str] = []
    done: list[str] = []
    entries = [(f"{PACKAGE}.{o}", f"{PACKAGE}.{n}") for o, n in SOURCE_PLAN.items()]
    entries += [(test_module(o), test_module(n)) for o, n in TEST_PLAN.items()]
    for old_module, new_module in entries:
        old, new = module_path(old_module), module_path(new_module)
        if old.is_file() and not new.is_file():
            moves.append(Move(old, new, old_module, new_module))
        elif new.is_file() and not old.is_file():
            done.append(old_module)
        elif old.is_file() and new.is_file():
            sys.exit(f"house_moves: both {old} and {new} exist; merge them by hand")
        else:
            missing.append(old_module)
    return moves, missing, done


def unplanned_top_level() -> list[str]:
    planned = {o for o in SOURCE_PLAN if "." not in o}
    return sorted(
        p.stem
        for p in (ROOT / PACKAGE).glob("*.py")
        if p.stem not in TOP_LEVEL_KEEP and p.stem not in planned
    )


# -- rewriting ------------------------------------------------------------------------


class Rewriter:
    """Maps old module names to new ones (longest old prefix wins), except the public
    paths a new package keeps (``public``: old module -> the names its package exports),
    which outside the package stay as they are: ``session_server.server.SessionServer``,
    ``from session_server.auth import mint_token``, the logger ``"session_server.server"``.
    """

    def __init__(self, mapping: dict[str, str], public: dict[str, set[str]]) -> None:
        self.mapping = mapping
        self.public = {k: v for k, v in public.items() if k in mapping}

    def keeps(self, name: str, names: Sequence[str] = ()) -> bool:
        """Whether ``name`` (or ``from name import names``) is a kept public path."""
        if name in self.public:
            return all(n in self.public[name] for n in names)
        head, _, last = name.rpartition(".")
        return head in self.public and last in self.public[head]

    def module(self, name: str) -> str:
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            head = ".".join(parts[:i])
            if head in self.mapping:
                return ".".join([self.mapping[head], *parts[i:]])
        return name


def package_of(module: str, is_package: bool) -> list[str]:
    parts = module.split(".")
    return parts if is_package else parts[:-1]


def relative(from_package: list[str], target: str) -> str:
    """``target`` as a relative module name seen from ``from_package``."""
    tparts = target.split(".")
    common = 0
    while (
        common < len(from_package)
        and common < len(tparts)
        and from_package[common] == tparts[common]
    ):
        common += 1
    dots = "." * (len(from_package) - common + 1)
    return dots + ".".join(tparts[common:])


def rewrite_imports(
    source: str, old_module: str, new_module: str, is_package: bool, rw: Rewriter, mods: set[str]
) -> tuple[str, list[tuple[int, int]]]:
    """Rewrite the import statements of one Python file; returns the text and the line
    spans (0-based, end exclusive) that were import statements."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    old_pkg = package_of(old_module, is_package)
    new_pkg = package_of(new_module, is_package)
    edits: list[tuple[int, int, str]] = []
    spans: list[tuple[int, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom | ast.Import):
            continue
        start, end = node.lineno - 1, (node.end_lineno or node.lineno)
        spans.append((start, end))
        if isinstance(node, ast.Import):
            continue  # ``import a.b [as c]``: the dotted-name pass rewrites it
        indent = lines[start][: node.col_offset]
        if node.level:
            base = old_pkg[: len(old_pkg) - (node.level - 1)]
            target = ".".join([*base, *([node.module] if node.module else [])])
        else:
            target = node.module or ""
        if not target.startswith((PACKAGE, f"tests.{PACKAGE}")):
            continue
        if not node.level and rw.keeps(target, [a.name for a in node.names]):
            continue
        # ``from pkg import module``: one statement per module that moved elsewhere.
        submodules = [a for a in node.names if f"{target}.{a.name}" in mods]
        moving = [a for a in submodules if rw.module(f"{target}.{a.name}") != f"{target}.{a.name}"]
        if moving and len(submodules) != len(node.names):
            sys.exit(f"house_moves: {old_module}:{node.lineno} mixes modules and names")
        if submodules and len(submodules) == len(node.names):
            stmts = []
            for alias in node.names:
                new_full = rw.module(f"{target}.{alias.name}")
                new_parent, _, new_name = new_full.rpartition(".")
                bound = alias.asname or alias.name
                as_part = f" as {bound}" if (alias.asname or new_name != alias.name) else ""
                where = relative(new_pkg, new_parent) if node.level else new_parent
                stmts.append(f"{indent}from {where} import {new_name}{as_part}\n")
            changed = bool(moving)
            new_text = "".join(stmts)
        else:
            new_target = rw.module(target)
            if node.level:
                where = relative(new_pkg, new_target)
                changed = where != "." * node.level + (node.module or "")
            else:
                where = new_target
                changed = new_target != target
            if not changed:
                continue
            segment = "".join(lines[start:end])
            head = re.match(r"(\s*from\s+)([.\w]+)(\s+import\b)", segment)
            if head is None:
                sys.exit(f"house_moves: cannot read the import at {old_module}:{node.lineno}")
            new_text = head.group(1) + where + head.group(3) + segment[head.end() :]
        if changed:
            edits.append((start, end, new_text))
    for start, end, text in sorted(edits, reverse=True):
        lines[start:end] = [text]
        # keep spans in line terms of the original; the dotted pass skips them by content
    return "".join(lines), spans


DOTTED = re.compile(r"(?<![\w.])(?:tests\.)?session_server(?:\.\w+)+")
FILE_PATH = re.compile(r"(?<![\w/.])(?:tests/)?session_server(?:/\w+)+\.py")
BACKTICKED = re.compile(r"``([a-z_]\w*(?:\.\w+)+)``")
# Markdown: `core/events.py`, `auth.py`, `core.turns.number_turns` (package-relative).
MD_FILE = re.compile(r"(?<![\w`])`([a-z_]\w*(?:/\w+)*)\.py`")
MD_DOTTED = re.compile(r"(?<![\w`])`([a-z_]\w*(?:\.\w+)+)`(?!`)")


def rewrite_text(
    text: str,
    rw: Rewriter,
    short: dict[str, str],
    skip: set[int] | None = None,
    markdown: bool = False,
) -> str:
    """Rewrite dotted module names, file paths and backticked package-relative names."""

    def dotted(m: re.Match[str]) -> str:
        return m.group(0) if rw.keeps(m.group(0)) else rw.module(m.group(0))

    def file_path(m: re.Match[str]) -> str:
        name = m.group(0)[: -len(".py")].replace("/", ".")
        new = rw.module(name)
        return m.group(0) if new == name else new.replace(".", "/") + ".py"

    def backticked(m: re.Match[str]) -> str:
        name = m.group(1)
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            head = ".".join(parts[:i])
            if head in short:
                return "``" + ".".join([short[head], *parts[i:]]) + "``"
        return m.group(0)

    def md_file(m: re.Match[str]) -> str:
        name = m.group(1).replace("/", ".")
        new = short_files.get(name)
        return m.group(0) if new is None else "`" + new.replace(".", "/") + ".py`"

    def md_dotted(m: re.Match[str]) -> str:
        parts = m.group(1).split(".")
        for i in range(len(parts), 0, -1):
            head = ".".join(parts[:i])
            if head in short:
                return "`" + ".".join([short[head], *parts[i:]]) + "`"
        return m.group(0)

    short_files = {**short, **short_files_top}
    out = []
    for number, line in enumerate(text.splitlines(keepends=True)):
        if skip and number in skip:
            out.append(line)  # import statements are rewritten from the syntax tree
            continue
        line = DOTTED.sub(dotted, line)
        line = FILE_PATH.sub(file_path, line)
        line = BACKTICKED.sub(backticked, line)
        if markdown:
            line = MD_FILE.sub(md_file, line)
            line = MD_DOTTED.sub(md_dotted, line)
        out.append(line)
    return "".join(out)


# Markdown file names of modules that were loose at the top (`auth.py` -> `auth/tokens.py`).
short_files_top: dict[str, str] = {}

PARENTS = re.compile(r"(__file__\)(?:\.resolve\(\))?\.parents\[)(\d+)(\])")


def deeper(depth: int) -> Callable[[re.Match[str]], str]:
    """``parents[n]`` -> ``parents[n + depth]`` (a test that moved ``depth`` folders down)."""

    def sub(m: re.Match[str]) -> str:
        return f"{m.group(1)}{int(m.group(2)) + depth}{m.group(3)}"

    return sub


def public_paths() -> dict[str, set[str]]:
    """Old modules whose new package re-exports them, with the names it exports."""
    out: dict[str, set[str]] = {f"{PACKAGE}.server": {"SessionServer", "lock_memory_dir"}}
    auth = ROOT / PACKAGE / "auth.py"
    if auth.is_file():
        for node in ast.parse(auth.read_text(encoding="utf-8")).body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.List | ast.Tuple)
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            ):
                out[f"{PACKAGE}.auth"] = {
                    e.value
                    for e in node.value.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)
                }
    return out


def text_files() -> list[Path]:
    files: list[Path] = []
    for folder in (PACKAGE, "tests", "scripts", "examples"):
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".md", ".toml")]
    files += list((ROOT / "docs").glob("*.md"))
    files += [ROOT / n for n in ("README.md", "BENCHMARKS.md", "pyproject.toml")]
    # This script and its test hold old paths on purpose.
    own = {Path(__file__).resolve(), ROOT / "tests" / "scripts" / "test_house_moves.py"}
    return [p for p in files if p.is_file() and ".venv" not in p.parts and p not in own]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    args = parser.parse_args()

    unplanned = unplanned_top_level()
    if unplanned:
        print(
            "house_moves: loose modules at the top of session_server/ that the plan does "
            f"not place: {', '.join(unplanned)}; add them to SOURCE_PLAN (or TOP_LEVEL_KEEP)",
            file=sys.stderr,
        )
        return 1
    moves, missing, done = plan_moves()
    for name in missing:
        print(f"skipped (not in the tree): {name}")
    for name in done:
        print(f"already moved: {name}")
    for move in moves:
        print(f"move {move.old.relative_to(ROOT)} -> {move.new.relative_to(ROOT)}")
    if args.dry_run:
        return 0

    # Every module as it stands, before any move (for ``from pkg import module``).
    before: dict[Path, tuple[str, bool]] = {}
    for folder in (PACKAGE, "tests"):
        for p in (ROOT / folder).rglob("*.py"):
            if ".venv" not in p.parts:
                before[p] = (path_module(p), p.name == "__init__.py")
    mods = {m for m, _ in before.values()}
    moved_to = {m.old: m.new for m in moves}
    # Old paths that are a prefix of their new path only map in the run that moves them.
    mapping = {m.old_module: m.new_module for m in moves}
    for o, n in [*SOURCE_PLAN.items()]:
        old_full, new_full = f"{PACKAGE}.{o}", f"{PACKAGE}.{n}"
        if not new_full.startswith(old_full + ".") and module_path(new_full).is_file():
            mapping.setdefault(old_full, new_full)
    for o, n in TEST_PLAN.items():
        old_full, new_full = test_module(o), test_module(n)
        if module_path(new_full).is_file():
            mapping.setdefault(old_full, new_full)
    rw = Rewriter(mapping, public_paths())
    short_files_top.update(
        {
            o.removeprefix(f"{PACKAGE}."): n.removeprefix(f"{PACKAGE}.")
            for o, n in mapping.items()
            if o.startswith(f"{PACKAGE}.") and "." not in o.removeprefix(f"{PACKAGE}.")
        }
    )
    # Package-relative names in docstrings (````core.events````, ````intake````).
    short = {
        o.removeprefix(f"{PACKAGE}."): n.removeprefix(f"{PACKAGE}.")
        for o, n in mapping.items()
        if o.startswith(f"{PACKAGE}.") and "." in o.removeprefix(f"{PACKAGE}.")
    }

    # 1. Rewrite every file at its old place, knowing where it will live.
    for path in text_files():
        text = path.read_text(encoding="utf-8")
        new_text = text
        if path.suffix == ".py":
            if path in before:
                old_module, is_package = before[path]
                new_path = moved_to.get(path, path)
                new_module = path_module(new_path)
            else:  # scripts/, examples/: absolute imports only
                old_module = new_module = "scripts._" if "scripts" in path.parts else "_"
                is_package = False
                new_path = path
            skip = {
                n
                for node in ast.walk(ast.parse(text))
                if isinstance(node, ast.ImportFrom)
                for n in range(node.lineno - 1, node.end_lineno or node.lineno)
            }
            new_text = rewrite_text(new_text, rw, short, skip)
            new_text, _ = rewrite_imports(new_text, old_module, new_module, is_package, rw, mods)
            depth = len(new_path.relative_to(ROOT).parts) - len(path.relative_to(ROOT).parts)
            if depth:
                new_text = PARENTS.sub(deeper(depth), new_text)
        else:
            new_text = rewrite_text(new_text, rw, short, markdown=path.suffix == ".md")
        if new_text != text:
            path.write_text(new_text, encoding="utf-8")

    # 2. Move, creating the packages the moves need.
    for move in moves:
        move.new.parent.mkdir(parents=True, exist_ok=True)
        init = move.new.parent / "__init__.py"
        if not init.exists():
            body = ""
            if move.new.is_relative_to(ROOT / PACKAGE):
                folder = move.new.parent.relative_to(ROOT / PACKAGE).as_posix()
                body = NEW_PACKAGES.get(folder, "")
            init.write_text(body, encoding="utf-8")
            subprocess.run(["git", "add", str(init)], cwd=ROOT, check=True)
        subprocess.run(["git", "mv", str(move.old), str(move.new)], cwd=ROOT, check=True)
    print(f"{len(moves)} moved, {len(done)} moved before, {len(missing)} skipped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
