"""The schema of an agent file as values, and its comparison with ``schema.sql`` (pure).

A restore accepts only a file this server could have written. The shell reads the
file's catalog (``sqlite_master`` and SQLite's table and index pragmas) into a
``SchemaShape``; ``shape_problems`` compares it object by object with the shape of a
database made from ``schema.sql`` and says, one line per object, what differs: a
trigger, a view or any other extra object, a missing or extra table, column or index, a
column of another type, default, nullability or key, an index on other columns or with
another ``WHERE``, and table definitions holding words ``schema.sql`` never uses
(``CHECK``, ``COLLATE``, ``REFERENCES``, ``GENERATED`` ...), which the pragmas do not show.

SQL text is compared as tokens (``sql_tokens``): comments and layout do not count, so a
file made by an older ``schema.sql`` whose comments differ, or whose table definitions
grew by ``ALTER TABLE ... ADD COLUMN`` (the migrations), compares equal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

__all__ = [
    "ColumnShape",
    "IndexShape",
    "SchemaShape",
    "TableShape",
    "shape_problems",
    "sql_tokens",
    "sql_words",
]

_TOKEN: Final = re.compile(
    r"""(?P<skip>\s+|--[^\n]*|/\*.*?(?:\*/|\Z))
      |(?P<string>'(?:[^']|'')*')
      |(?P<quoted>"(?:[^"]|"")*"|`(?:[^`]|``)*`|\[[^\]]*\])
      |(?P<word>[A-Za-z_][A-Za-z0-9_$]*)
      |(?P<number>[0-9][0-9A-Za-z_.]*)
      |(?P<other>.)""",
    re.VERBOSE | re.DOTALL,
)


def sql_tokens(sql: str) -> tuple[str, ...]:
    """The tokens of ``sql``: words and quoted identifiers lowercased and unquoted,
    string literals and numbers as written, comments and white space dropped."""
    out: list[str] = []
    for match in _TOKEN.finditer(sql):
        kind = match.lastgroup
        text = match.group()
        if kind == "skip":
            continue
        if kind == "quoted":
            out.append(text[1:-1].lower())
        elif kind == "word":
            out.append(text.lower())
        else:
            out.append(text)
    return tuple(out)


def sql_words(sql: str) -> frozenset[str]:
    """The words and identifiers ``sql`` uses (lowercased)."""
    return frozenset(t for t in sql_tokens(sql) if t[:1].isalpha() or t[:1] == "_")


def _index_tokens(sql: str) -> tuple[str, ...]:
    tokens = sql_tokens(sql)
    # ``CREATE [UNIQUE] INDEX IF NOT EXISTS name``: the clause is no part of the index.
    for i in range(len(tokens) - 2):
        if tokens[i : i + 3] == ("if", "not", "exists"):
            return tokens[:i] + tokens[i + 3 :]
    return tokens


class ColumnShape(msgspec.Struct, frozen=True):
    """One column as ``PRAGMA table_xinfo`` gives it."""

    name: str
    type: str
    notnull: bool
    default: str | None
    pk: int
    hidden: int


class TableShape(msgspec.Struct, frozen=True):
    """One table: its columns in order, its kind and the words of its definition."""

    name: str
    columns: tuple[ColumnShape, ...]
    without_rowid: bool
    strict: bool
    words: frozenset[str]


class IndexShape(msgspec.Struct, frozen=True):
    """One index: its table, keys (``PRAGMA index_xinfo``) and its SQL as tokens (empty
    for the indexes SQLite makes for a ``PRIMARY KEY`` or ``UNIQUE``)."""

    name: str
    table: str
    unique: bool
    partial: bool
    keys: tuple[tuple[str | None, bool, str | None, bool], ...]
    tokens: tuple[str, ...]


class SchemaShape(msgspec.Struct, frozen=True):
    """A database's schema: tables and indexes by name, and every other object of the
    catalog (``(type, name)``: views, triggers, virtual tables...)."""

    tables: dict[str, TableShape]
    indexes: dict[str, IndexShape]
    others: tuple[tuple[str, str], ...] = ()


def index_shape(
    name: str,
    table: str,
    unique: bool,
    partial: bool,
    keys: Iterable[tuple[str | None, bool, str | None, bool]],
    sql: str | None,
) -> IndexShape:
    """An ``IndexShape`` from the catalog's values (``sql`` None: an automatic index)."""
    return IndexShape(
        name, table, unique, partial, tuple(keys), () if sql is None else _index_tokens(sql)
    )


def _column_problems(table: str, found: TableShape, expected: TableShape) -> list[str]:
    out: list[str] = []
    have = {c.name.lower(): c for c in found.columns}
    want = {c.name.lower(): c for c in expected.columns}
    for name in want.keys() - have.keys():
        out.append(f"table {table}: column {name!r} is missing")
    for name in have.keys() - want.keys():
        out.append(f"table {table}: column {name!r} is not one of this server's")
    for name in want.keys() & have.keys():
        a, b = have[name], want[name]
        if (a.type.upper(), a.notnull, a.default, a.pk, a.hidden) != (
            b.type.upper(),
            b.notnull,
            b.default,
            b.pk,
            b.hidden,
        ):
            out.append(
                f"table {table}: column {name!r} is {_describe(a)}, this server's is {_describe(b)}"
            )
    return out


def _describe(c: ColumnShape) -> str:
    parts = [c.type or "untyped", "NOT NULL" if c.notnull else "nullable"]
    if c.default is not None:
        parts.append(f"DEFAULT {c.default}")
    if c.pk:
        parts.append("PRIMARY KEY")
    if c.hidden:
        parts.append("generated" if c.hidden > 1 else "hidden")
    return " ".join(parts)


def _table_problems(name: str, found: TableShape, expected: TableShape) -> list[str]:
    out = _column_problems(name, found, expected)
    if found.without_rowid != expected.without_rowid or found.strict != expected.strict:
        out.append(f"table {name}: its kind (WITHOUT ROWID, STRICT) is not this server's")
    extra = sorted(found.words - expected.words)
    if extra:
        out.append(
            f"table {name}: its definition uses {', '.join(extra[:5]).upper()}, which this "
            "server's does not (constraints, collations or references of another program)"
        )
    return out


def shape_problems(
    found: SchemaShape, expected: SchemaShape, *, may_miss_indexes: bool = False
) -> list[str]:
    """What differs between ``found`` and ``expected`` (empty: the same schema), one
    sentence per object, in a stable order.

    ``may_miss_indexes``: an index of ``expected`` that ``found`` lacks is not a problem
    (the caller builds it: an index holds no data of its own).
    """
    # Other objects (the recall index's virtual and shadow tables, its triggers) must be
    # the schema's own; the caller has rebuilt them from ``schema.sql``.
    out = [
        f"{kind} {name!r} is not part of this server's schema"
        for kind, name in found.others
        if (kind, name) not in expected.others
    ]
    out.extend(
        f"{kind} {name!r} is missing"
        for kind, name in expected.others
        if (kind, name) not in found.others
    )
    for name in sorted(expected.tables.keys() - found.tables.keys()):
        out.append(f"table {name!r} is missing")
    for name in sorted(found.tables.keys() - expected.tables.keys()):
        out.append(f"table {name!r} is not part of this server's schema")
    for name in sorted(found.tables.keys() & expected.tables.keys()):
        out.extend(_table_problems(name, found.tables[name], expected.tables[name]))
    if not may_miss_indexes:
        for name in sorted(expected.indexes.keys() - found.indexes.keys()):
            out.append(f"index {name!r} is missing")
    for name in sorted(found.indexes.keys() - expected.indexes.keys()):
        out.append(f"index {name!r} is not part of this server's schema")
    for name in sorted(found.indexes.keys() & expected.indexes.keys()):
        if found.indexes[name] != expected.indexes[name]:
            out.append(f"index {name!r} differs from this server's (columns, order or WHERE)")
    return out


def missing_indexes(found: SchemaShape, expected: Mapping[str, IndexShape]) -> list[str]:
    """Names of the indexes of ``expected`` that ``found`` lacks, sorted."""
    return sorted(expected.keys() - found.indexes.keys())
