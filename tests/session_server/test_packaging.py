"""The wheel ships schema.sql and the py.typed markers; schema_sql() finds the DDL."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

from session_server.server.ws_compat import SUPPORTED_MAJORS
from session_server.storage.schema import SCHEMA_VERSION, schema_sql

ROOT = Path(__file__).resolve().parents[2]
CREATE_EVENTS = re.compile(r"CREATE TABLE (IF NOT EXISTS )?events\b")


def test_schema_sql_returns_the_ddl() -> None:
    ddl = schema_sql()
    assert CREATE_EVENTS.search(ddl)
    assert re.search(r"CREATE TABLE (IF NOT EXISTS )?sessions\b", ddl)
    assert ddl == (ROOT / "schema.sql").read_text(encoding="utf-8")
    assert SCHEMA_VERSION >= 1


def test_wheel_contains_schema_and_type_markers(tmp_path: Path) -> None:
    """Build the wheel (a few seconds) and look inside it."""
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path)]
    if importlib.util.find_spec("hatchling") is not None:
        # Offline-friendly: build with the hatchling installed in this environment.
        cmd.append("--no-build-isolation")
    proc = subprocess.run(
        [*cmd, str(ROOT)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheels = list(tmp_path.glob("session_server-*.whl"))
    assert len(wheels) == 1, list(tmp_path.iterdir())
    with zipfile.ZipFile(wheels[0]) as whl:
        names = set(whl.namelist())
        for required in (
            "session_server/schema.sql",
            "session_server/py.typed",
            "session_server/adapters/py.typed",
            "session_server/__init__.py",
            "session_server/codec.py",
            "session_server/adapters/__init__.py",
            "session_server/adapters/workers_ai.py",
            "session_server/server/http_routes.py",
            "session_server/inspector/__init__.py",
            "session_server/inspector/static/index.html",
            "session_server/inspector/static/inspector.js",
            "session_server/inspector/static/inspector.css",
        ):
            assert required in names, f"{required} missing from {wheels[0].name}"
        packaged = whl.read("session_server/schema.sql").decode("utf-8")
        page = whl.read("session_server/inspector/static/index.html").decode("utf-8")
    static = ROOT / "session_server" / "inspector" / "static"
    assert page == (static / "index.html").read_text(encoding="utf-8")
    assert packaged == (ROOT / "schema.sql").read_text(encoding="utf-8")
    assert CREATE_EVENTS.search(packaged)
    assert not any(n.startswith("tests/") for n in names)
    # One top-level package: the adapters install as session_server.adapters, never as a
    # top-level ``adapters`` (the import name of an unrelated PyPI package).
    assert {n.split("/", 1)[0] for n in names if "/" in n} - {"session_server"} == {
        n.split("/", 1)[0] for n in names if ".dist-info/" in n
    }


def _requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    found = list(project["build-system"]["requires"]) + list(project["project"]["dependencies"])
    for extra in project["project"]["optional-dependencies"].values():
        found += extra
    return found


def test_every_dependency_has_an_upper_bound_below_its_next_major() -> None:
    """A plain install takes today's releases: each dependency stops below the next
    major (a 0.x one below 1), where its API may break (websockets 17 broke the
    handshake of a server pinned only from below)."""
    for text in _requirements():
        requirement = Requirement(text)
        uppers = [s for s in requirement.specifier if s.operator == "<"]
        lowers = [s for s in requirement.specifier if s.operator == ">="]
        assert len(uppers) == 1 and len(lowers) == 1, text
        upper = Version(uppers[0].version)
        assert Version(lowers[0].version) < upper, text
        assert len(upper.release) == 1, f"{text}: the bound is a major release (<N)"


def test_websockets_is_bounded_to_the_supported_majors() -> None:
    (websockets,) = [r for r in map(Requirement, _requirements()) if r.name == "websockets"]
    for major in SUPPORTED_MAJORS:
        assert websockets.specifier.contains(f"{major}.0"), major
        assert websockets.specifier.contains(f"{major}.9"), major
    assert not websockets.specifier.contains(f"{max(SUPPORTED_MAJORS) + 1}.0")
    assert not websockets.specifier.contains(f"{min(SUPPORTED_MAJORS) - 1}.9")
