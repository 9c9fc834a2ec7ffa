"""How the vendored SDK tests build their session, and which of them cannot apply.

The SDK's tests for ``SQLiteSession`` (vendored beside this file) import
``session_under_test`` under the name ``SQLiteSession``: it takes ``SQLiteSession``'s
arguments and builds a :class:`SessionServerSession` instead, remote (a real
``session-server`` subprocess on 127.0.0.1) or in-process (``registry=``), whichever the
test's ``sdk_backend`` parameter (``conftest.py``) selected. Nothing else in the tests
changes.

Mapping: one SQLite file of the SDK's is one agent here (its SQLite file), so sessions
built with the same ``db_path`` share an agent as they share a file; ``":memory:"`` (the
SDK's default, a private database per object) is a fresh agent per object.

``NOT_APPLICABLE`` lists the tests that exercise ``SQLiteSession``'s own implementation
(its private connections, locks and tables) rather than the ``Session`` protocol; they
run as strict expected failures with the reason in the test report, so each one still
runs and must fail the way the reason says.
"""

from __future__ import annotations

import hashlib
import sqlite3
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
from agents.memory import SessionSettings

from session_server.integrations.openai_agents import SessionServerSession
from session_server.runtime.registry import ActorRegistry

Mode = Literal["remote", "local"]
MODES: tuple[Mode, ...] = ("remote", "local")


@dataclass(frozen=True)
class NotApplicable:
    """Why a vendored test cannot apply (in ``modes``), and the exception it then fails
    with; ``run=False`` for a test that would wait for ever rather than fail."""

    reason: str
    raises: type[BaseException] | tuple[type[BaseException], ...]
    modes: tuple[Mode, ...] = MODES
    run: bool = True


_PRIVATE = "reads or replaces SQLiteSession's private {what}, which SessionServerSession has not"
_CORRUPT = (
    "writes a corrupt JSON row straight into SQLiteSession's table (its private "
    "_locked_connection); session-server validates every event on write, so no such row exists"
)
_TABLE = (
    "drops or probes SQLiteSession's own tables (agent_sessions/agent_messages) in its db_path; "
    "session-server's store is another file with another schema, its transactions tested in "
    "tests/session_server/storage"
)

NOT_APPLICABLE: dict[str, NotApplicable] = {
    "test_sqlite_session_close_closes_worker_thread_connections": NotApplicable(
        _PRIVATE.format(what="per-thread sqlite3 connections (_connections)"), AttributeError
    ),
    "test_sqlite_session_closed_rejects_empty_add_items": NotApplicable(
        "expects the error text 'SQLiteSession is closed', which names the SDK's class",
        pytest.fail.Exception,  # pytest.raises: "DID NOT RAISE"
    ),
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": NotApplicable(
        _CORRUPT, AttributeError
    ),
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": NotApplicable(
        _CORRUPT, AttributeError
    ),
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": NotApplicable(
        _CORRUPT, AttributeError
    ),
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": NotApplicable(
        _CORRUPT, AttributeError
    ),
    "test_sqlite_session_file_lock_is_shared_across_instances": NotApplicable(
        _PRIVATE.format(what="process-wide file locks (_lock, _file_lock_counts)"),
        AttributeError,
    ),
    "test_sqlite_session_failed_add_items_releases_write_lock": NotApplicable(
        _TABLE, sqlite3.OperationalError
    ),
    "test_sqlite_session_failed_clear_session_rolls_back": NotApplicable(
        _TABLE, sqlite3.OperationalError
    ),
    "test_sqlite_session_failed_pop_item_releases_write_lock": NotApplicable(
        _TABLE, sqlite3.OperationalError
    ),
    "test_sqlite_session_rollback_failure_evicts_connection": NotApplicable(
        _PRIVATE.format(what="connection pool (_connections_lock, _get_connection)"),
        AttributeError,
    ),
    "test_sqlite_session_close_retries_quarantined_connection": NotApplicable(
        _PRIVATE.format(what="connection pool (_connections_lock, _quarantined_connections)"),
        AttributeError,
    ),
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": NotApplicable(
        _PRIVATE.format(what="connection pool (_connections_lock, _get_connection)"),
        AttributeError,
    ),
    "test_sqlite_session_concurrent_access": NotApplicable(
        "blocks the test's event loop (the ThreadPoolExecutor's with-block) while its threads "
        "call the session; an in-process session runs its calls on the registry's loop, which "
        "is that blocked loop, so they would wait for ever (remote, it runs and passes)",
        TimeoutError,
        modes=("local",),
        run=False,
    ),
}


@dataclass
class Backend:
    """Where the sessions of the running test live."""

    mode: Mode
    url: str | None = None
    registry: ActorRegistry | None = None
    built: list[SessionServerSession] = field(default_factory=list)

    async def aclose(self) -> None:
        """Close every session the test built (closing twice is allowed)."""
        for session in self.built:
            await session.aclose()
        self.built.clear()


_current: Backend | None = None


def use_backend(backend: Backend | None) -> None:
    """Select where ``session_under_test`` builds sessions (the conftest's fixture)."""
    global _current
    _current = backend


def agent_for(db_path: str | Path, sessions_table: str, messages_table: str) -> str:
    """The agent standing for one SDK database (file and tables); a fresh one per
    ``":memory:"`` session, as each in-memory ``SQLiteSession`` has its own database."""
    if str(db_path) == ":memory:":
        return f"sdk-memory-{uuid.uuid4().hex}"
    key = f"{Path(db_path).resolve()}|{sessions_table}|{messages_table}"
    return f"sdk-file-{hashlib.sha256(key.encode()).hexdigest()[:20]}"


def session_under_test(
    session_id: str,
    db_path: str | Path = ":memory:",
    sessions_table: str = "agent_sessions",
    messages_table: str = "agent_messages",
    session_settings: SessionSettings | dict[str, Any] | None = None,
) -> SessionServerSession:
    """A ``SessionServerSession`` for the arguments of ``SQLiteSession(...)``."""
    backend = _current
    assert backend is not None, "the sdk_backend fixture selects remote or local"
    agent_id = agent_for(db_path, sessions_table, messages_table)
    if backend.mode == "remote":
        session = SessionServerSession(
            session_id, url=backend.url, agent_id=agent_id, session_settings=session_settings
        )
    else:
        session = SessionServerSession(
            session_id,
            registry=backend.registry,
            agent_id=agent_id,
            session_settings=session_settings,
        )
    backend.built.append(session)
    return session
