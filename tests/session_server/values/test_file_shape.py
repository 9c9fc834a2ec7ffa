"""``values.file_shape``: SQL as tokens, and the schema compared object by object."""

from __future__ import annotations

from session_server.values.file_shape import (
    ColumnShape,
    SchemaShape,
    TableShape,
    index_shape,
    shape_problems,
    sql_tokens,
    sql_words,
)


def test_tokens_ignore_comments_layout_case_and_quotes() -> None:
    a = 'CREATE TABLE t (\n  id TEXT, -- the id\n  "n" INTEGER /* count */ DEFAULT 0)'
    b = "create table T (id text, n integer default 0)"
    assert sql_tokens(a) == sql_tokens(b)
    assert sql_tokens("x = 'It''s' -- c") == ("x", "=", "'It''s'")
    assert sql_words("CREATE TABLE t (k TEXT CHECK (k <> 'x'))") >= {"check", "k", "text"}


def _shape(**over: object) -> SchemaShape:
    col = ColumnShape("id", "TEXT", True, None, 1, 0)
    table = TableShape("t", (col,), False, False, sql_words("CREATE TABLE t (id TEXT)"))
    index = index_shape("i", "t", False, True, [(None, False, None, False)],
                        "CREATE INDEX IF NOT EXISTS i ON t(id) WHERE id <> ''")  # fmt: skip
    fields: dict[str, object] = {"tables": {"t": table}, "indexes": {"i": index}, "others": ()}
    fields.update(over)
    return SchemaShape(**fields)  # type: ignore[arg-type]


def test_the_same_schema_has_no_problem() -> None:
    assert shape_problems(_shape(), _shape()) == []


def test_each_difference_is_named() -> None:
    expected = _shape()
    col = expected.tables["t"].columns[0]
    other_col = ColumnShape("id", "INTEGER", True, None, 1, 0)
    cases = {
        "trigger 'x' is not part": _shape(others=(("trigger", "x"),)),
        "table 't' is missing": _shape(tables={}),
        "table 'u' is not part": _shape(tables={**expected.tables, "u": expected.tables["t"]}),
        "column 'id' is INTEGER": _shape(
            tables={"t": TableShape("t", (other_col,), False, False, frozenset())}
        ),
        "column 'extra' is not one": _shape(
            tables={
                "t": TableShape(
                    "t",
                    (col, ColumnShape("extra", "TEXT", False, None, 0, 0)),
                    False,
                    False,
                    frozenset(),
                )
            }
        ),
        "uses CHECK": _shape(
            tables={"t": TableShape("t", (col,), False, False, frozenset({"check"}))}
        ),
        "WITHOUT ROWID": _shape(tables={"t": TableShape("t", (col,), True, False, frozenset())}),
        "index 'i' is missing": _shape(indexes={}),
        "index 'i' differs": _shape(
            indexes={
                "i": index_shape(
                    "i",
                    "t",
                    False,
                    True,
                    [(None, False, None, False)],
                    "CREATE INDEX i ON t(id) WHERE 1",
                )
            }
        ),
    }
    for words, found in cases.items():
        problems = shape_problems(found, expected)
        assert any(words in p for p in problems), (words, problems)
    assert shape_problems(_shape(indexes={}), expected, may_miss_indexes=True) == []
