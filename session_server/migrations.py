"""Schema creation and forward migrations, keyed by ``PRAGMA user_version``.

A new file gets ``schema.sql`` and the current version. An older file gets each migration
from its version up, each in its own transaction. A file from a newer version of this
program is refused rather than guessed at.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable

import aiosqlite

from .errors import AgentUnavailableError
from .schema import SCHEMA_VERSION, schema_sql

__all__ = ["MIGRATIONS", "migrate"]

Migration = Callable[[aiosqlite.Connection], Awaitable[None]]

# MIGRATIONS[n] upgrades a file at user_version n to n + 1. Version 0 means "empty file":
# it gets the whole current schema at once, so the list only grows for later versions.
MIGRATIONS: dict[int, Migration] = {}


async def migrate(conn: aiosqlite.Connection) -> None:
    """Bring the database on ``conn`` (autocommit mode) to ``SCHEMA_VERSION``."""
    async with conn.execute("PRAGMA user_version") as cur:
        row = await cur.fetchone()
    version = int(row[0]) if row else 0
    if version > SCHEMA_VERSION:
        raise AgentUnavailableError(
            f"database schema version {version} is newer than this program ({SCHEMA_VERSION})"
        )
    if version == SCHEMA_VERSION:
        return
    await conn.execute("BEGIN IMMEDIATE")
    try:
        if version == 0:
            for statement in _statements(schema_sql()):
                await conn.execute(statement)
            version = SCHEMA_VERSION
        while version < SCHEMA_VERSION:
            await MIGRATIONS[version](conn)
            version += 1
        await conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    except BaseException:
        await conn.execute("ROLLBACK")
        raise
    await conn.execute("COMMIT")


def _statements(script: str) -> list[str]:
    """Split a DDL script into statements (executescript would commit implicitly)."""
    out: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        if not buf and line.strip().startswith("--"):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    return [s for s in out if s]
