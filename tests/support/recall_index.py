"""What the recall index holds, read straight from an agent file for tests: every shard
checked by FTS5's own integrity check, and every indexed event in the shard that holds
its rowid (``values.recall_shards``)."""

from __future__ import annotations

import sqlite3
from collections import Counter

from session_server.storage.recall_shards import list_shards, shard_table

__all__ = ["indexed_rowids"]


def indexed_rowids(conn: sqlite3.Connection) -> Counter[int]:
    """The rowids the index holds, with how many shards hold each (1 when all is well)."""
    shards = sorted(list_shards(conn), key=lambda s: s.first_rowid)
    found: Counter[int] = Counter()
    for i, shard in enumerate(shards):
        table = shard_table(shard.shard)
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
        upper = shards[i + 1].first_rowid if i + 1 < len(shards) else None
        for (rowid,) in conn.execute(f"SELECT rowid FROM {table}"):
            assert rowid >= shard.first_rowid, (rowid, shard)
            assert upper is None or rowid < upper, (rowid, shard, upper)
            assert rowid <= shard.last_rowid, (rowid, shard)
            found[rowid] += 1
    return found
