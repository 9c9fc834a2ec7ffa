"""Classes by seam: no mixin typed by a Protocol of its host, no class assembled from
several of the project's classes (``docs/architecture.md``, "Seams"). A part with state
of its own is a collaborator the class holds; a part without is the class's own code."""

from __future__ import annotations

import ast
from pathlib import Path

import session_server

ROOT = Path(session_server.__file__).parent

Modules = list[tuple[str, ast.Module]]


def _modules() -> Modules:
    return [
        (str(p.relative_to(ROOT)), ast.parse(p.read_text(encoding="utf-8")))
        for p in sorted(ROOT.rglob("*.py"))
    ]


def _base_name(base: ast.expr) -> str | None:
    if isinstance(base, ast.Subscript):
        base = base.value
    if isinstance(base, ast.Name):
        return base.id
    if isinstance(base, ast.Attribute):
        return base.attr
    return None


def self_typed(modules: Modules) -> list[str]:
    """Methods whose ``self`` is annotated: how a mixin says what it needs of the class
    it is mixed into."""
    return [
        f"{name}:{node.lineno} {node.name}"
        for name, tree in modules
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.args.args
        and node.args.args[0].arg == "self"
        and node.args.args[0].annotation is not None
    ]


def assembled(modules: Modules) -> list[str]:
    """Classes with more than one base among the modules' classes (Protocols that
    extend Protocols and exceptions aside: they state interfaces and kinds of errors,
    not parts of a class)."""
    ours = {
        n.name for _name, tree in modules for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
    }
    out = []
    for name, tree in modules:
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = [_base_name(b) for b in node.bases]
            project = [b for b in bases if b in ours]
            error = any(b and b.endswith(("Error", "Exception")) for b in bases)
            if "Protocol" not in bases and not error and len(project) > 1:
                out.append(f"{name}:{node.lineno} {node.name}{project}")
    return out


def test_no_method_types_its_self() -> None:
    assert self_typed(_modules()) == []


def test_no_class_has_several_project_bases() -> None:
    assert assembled(_modules()) == []


def test_the_scans_flag_a_mixin() -> None:
    """What the two rules are about is flagged (a sample split by line count)."""
    sample = ast.parse(
        "from typing import Protocol\n"
        "class Host(Protocol): ...\n"
        "class Reads:\n"
        "    def get(self: Host) -> None: ...\n"
        "class Writes:\n"
        "    async def put(self: Host, x: int) -> None: ...\n"
        "class Actor(Reads, Writes):\n"
        "    def plain(self) -> None: ...\n"
        "class Limits(Protocol): ...\n"
        "class Both(Host, Limits, Protocol): ...\n"
        "class LostError(Exception): ...\n"
        "class Unavailable(LostError, RuntimeError): ...\n"
    )
    modules = [("sample.py", sample)]
    assert self_typed(modules) == ["sample.py:4 get", "sample.py:6 put"]
    assert assembled(modules) == ["sample.py:7 Actor['Reads', 'Writes']"]
