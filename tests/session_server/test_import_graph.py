"""No import cycle inside ``session_server`` (issue 11).

The graph has one node per module and an edge for every ``import`` statement naming
another module of the package, wherever it stands: at module level, under
``if TYPE_CHECKING`` and inside function bodies. Counting the type-only and the deferred
imports is deliberate: both are how a cycle is usually hidden, and a module that needs
one is a sign that two modules should be one, or that a value belongs in a third. The
implicit import of a parent package (``import a.b`` runs ``a/__init__``) is not an edge:
package ``__init__`` files only re-export.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "session_server"


def modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package ``__init__``)."""
    out: dict[str, tuple[Path, bool]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_package)
    return out


def imported(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """Absolute names ``node`` may import (a module, or a name inside one)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
    else:
        base = []
    target = ".".join([*base, *([node.module] if node.module else [])])
    for alias in node.names:
        yield f"{target}.{alias.name}"  # ``from pkg import module``
    yield target


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for module, (path, is_package) in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for name in imported(module, is_package, node):
                if name in mods and name != module:
                    graph[module].add(name)
                    break  # the most specific module named is the edge
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_sees_the_package() -> None:
    graph = import_graph()
    assert "session_server.runtime.actor" in graph
    assert "session_server.core.agent_core" in graph["session_server.runtime.actor"]
    assert "session_server.storage.store" in graph["session_server.runtime.actor"]


def test_a_cycle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycle_in_session_server() -> None:
    assert cycles(import_graph()) == []


def folder_of(module: str) -> str:
    """``session_server.storage.store`` -> ``storage``; a top-level module is its own node."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """One node per folder of ``session_server`` (and per top-level module), an edge where a
    module of one imports a module of another. The package ``__init__`` only re-exports
    and is left out."""
    folders: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module == "session_server":
            continue
        source = folder_of(module)
        folders.setdefault(source, set())
        for target in targets:
            if target != "session_server" and folder_of(target) != source:
                folders[source].add(folder_of(target))
    return folders


def test_a_folder_cycle_is_found() -> None:
    graph = {
        "session_server.a.x": {"session_server.b.y"},
        "session_server.b.y": set(),
        "session_server.b.z": {"session_server.a.w"},
        "session_server.a.w": set(),
    }
    assert cycles(folder_graph(graph)) == [["a", "b"]]


def test_no_import_cycle_between_folders() -> None:
    folders = folder_graph(import_graph())
    assert {"values", "core", "server", "storage", "runtime"} <= set(folders)
    assert cycles(folders) == []
