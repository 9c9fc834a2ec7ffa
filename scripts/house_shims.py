"""Remove the re-export shims of old inner paths (issue 34, item 4): every name that an
inner module imports from another module and lists in its ``__all__`` (or imports as
``name as name``) is imported by its users from the module that defines it, and the
shim stops exporting it.

Run from the repository root after ``scripts/house_moves.py``: ``python
scripts/house_shims.py``, then ``ruff check --fix`` (drops the imports the shims no
longer use), ``ruff format``, mypy and the tests. Idempotent: a second run finds no
re-export left.

Rewritten: ``from shim import name`` (absolute or relative, anywhere in
``session_server/``, ``tests/``, ``scripts/``, ``examples/``), split per defining module;
and ``alias.name`` where ``alias`` is bound by ``from pkg import shim as alias`` (the
bare ``name`` is imported instead). Kept: the package ``__init__`` files and the DESIGN §3
paths (``session_server.events`` ...), which are the public import paths.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "session_server"
PUBLIC = {f"{PACKAGE}.{m}" for m in ("events", "codec", "context", "errors")}


def module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def defined_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def all_names(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            and isinstance(node.value, ast.List | ast.Tuple)
        ):
            return [
                e.value
                for e in node.value.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            ]
    return []


def find_shims() -> dict[str, dict[str, str]]:
    """shim module -> {re-exported name: module it was imported from}."""
    shims: dict[str, dict[str, str]] = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        if path.name == "__init__.py":
            continue
        module, is_package = module_name(path)
        if module in PUBLIC:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = defined_names(tree)
        exported = set(all_names(tree))
        found: dict[str, str] = {}
        for node in tree.body:
            if not isinstance(node, ast.ImportFrom):
                continue
            source = resolve(module, is_package, node)
            if not source.startswith(PACKAGE):
                continue
            for alias in node.names:
                bound = alias.asname or alias.name
                if bound in defined:
                    continue
                if bound in exported or alias.asname == alias.name:
                    found[bound] = f"{source}:{alias.name}"
        if found:
            shims[module] = found
    return shims


def origin(shims: dict[str, dict[str, str]], module: str, name: str) -> tuple[str, str]:
    """Follow re-exports to the module that defines ``name``."""
    seen = set()
    while module in shims and name in shims[module]:
        if (module, name) in seen:
            sys.exit(f"house_shims: re-export loop at {module}.{name}")
        seen.add((module, name))
        module, name = shims[module][name].split(":")
    return module, name


def relative(from_package: list[str], target: str) -> str:
    tparts = target.split(".")
    common = 0
    while common < min(len(from_package), len(tparts)) and from_package[common] == tparts[common]:
        common += 1
    return "." * (len(from_package) - common + 1) + ".".join(tparts[common:])


def python_files() -> list[Path]:
    files: list[Path] = []
    for folder in (PACKAGE, "tests", "scripts", "examples"):
        files += [p for p in (ROOT / folder).rglob("*.py") if ".venv" not in p.parts]
    return [p for p in files if p != Path(__file__).resolve()]


def rewrite_users(path: Path, shims: dict[str, dict[str, str]]) -> bool:
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    inside = path.is_relative_to(ROOT / PACKAGE) or path.is_relative_to(ROOT / "tests")
    module, is_package = module_name(path) if inside else ("_", False)
    package = module.split(".") if is_package else module.split(".")[:-1]
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    aliases: dict[str, str] = {}  # local alias of a shim module -> shim module
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        target = resolve(module, is_package, node)
        indent = lines[node.lineno - 1][: node.col_offset]
        for alias in node.names:
            if f"{target}.{alias.name}" in shims:
                aliases[alias.asname or alias.name] = f"{target}.{alias.name}"
        if target not in shims or not any(a.name in shims[target] for a in node.names):
            continue
        groups: dict[str, list[str]] = {}
        for alias in node.names:
            source, name = (
                origin(shims, target, alias.name)
                if alias.name in shims[target]
                else (target, alias.name)
            )
            bound = alias.asname or alias.name
            groups.setdefault(source, []).append(name if bound == name else f"{name} as {bound}")
        stmts = []
        for source, names in groups.items():
            where = relative(package, source) if node.level else source
            stmts.append(f"{indent}from {where} import {', '.join(names)}\n")
        edits.append((node.lineno - 1, node.end_lineno or node.lineno, "".join(stmts)))
    # ``alias.name`` of a shim module bound to a local alias.
    added: dict[str, set[str]] = {}
    if aliases:
        pattern = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, aliases)) + r")\.(\w+)\b")
        import_lines = {n for s, e, _ in edits for n in range(s, e)}
        import_lines |= {
            n
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom | ast.Import)
            for n in range(node.lineno - 1, node.end_lineno or node.lineno)
        }

        def attr(m: re.Match[str]) -> str:
            shim = aliases[m.group(1)]
            if m.group(2) not in shims[shim]:
                return m.group(0)
            source, name = origin(shims, shim, m.group(2))
            added.setdefault(source, set()).add(name)
            return name

        for i, line in enumerate(lines):
            if i not in import_lines:
                lines[i] = pattern.sub(attr, line)
    for start, end, new in sorted(edits, reverse=True):
        lines[start:end] = [new]
    new_text = "".join(lines)
    if added:
        lines_added = []
        for source, wanted in sorted(added.items()):
            where = relative(package, source) if inside else source
            lines_added.append(f"from {where} import {', '.join(sorted(wanted))}\n")
        future = re.search(r"^from __future__ import [^\n]*\n", new_text, flags=re.M)
        first = future or re.search(r"^(?:from|import) ", new_text, flags=re.M)
        at = (first.end() if future else first.start()) if first else 0
        new_text = new_text[:at] + "".join(lines_added) + new_text[at:]
    if new_text != text:
        path.write_text(new_text, encoding="utf-8")
        return True
    return False


def strip_shim(path: Path, names: set[str]) -> None:
    """Drop ``names`` from the shim's ``__all__`` and its ``name as name`` aliases."""
    text = path.read_text(encoding="utf-8")
    for name in names:
        text = re.sub(rf'^\s*"{re.escape(name)}",\n', "", text, flags=re.M)
        text = re.sub(rf'"{re.escape(name)}",\s*', "", text)
        text = re.sub(rf"\b{re.escape(name)} as {re.escape(name)}\b", name, text)
    path.write_text(text, encoding="utf-8")


def main() -> int:
    shims = find_shims()
    for module, names in sorted(shims.items()):
        print(f"{module}: {len(names)} re-exported ({', '.join(sorted(names))})")
    changed = [p for p in python_files() if rewrite_users(p, shims)]
    for module, names in shims.items():
        strip_shim(ROOT.joinpath(*module.split(".")).with_suffix(".py"), set(names))
    print(f"{len(shims)} shim modules, {len(changed)} files rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
