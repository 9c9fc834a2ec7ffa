"""``session_rows.jsonl``: the one extra file of an export that makes it lossless (pure).

The reference layout (``raw_traces.jsonl`` and friends) has no place for system messages,
``compact`` compaction records, reasoning, free-form event metadata, event ids and seqs,
or the session's metadata and strategy. An export therefore writes, beside the reference
files it always writes, ``session_rows.jsonl``: everything SQLite holds about the session
(``values.session_rows``), one JSON object per line, so readers of the reference layout
ignore it and still read the folder.

Line 1 is the header (``"kind": "session"``): ``format``, ``version``, the session row,
the number of rows of each kind that follow (a truncated file is refused), and ``files``,
the SHA-256 of each reference file written with it. Then one line per row: ``"kind":
"event"``, ``"tool_call"`` or ``"idempotency"``, its columns verbatim. An importer uses
this file only while the reference files are still the ones it was written with (their
digests match); a folder whose reference files were edited by another tool is read from
the reference files instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

from ..values.errors import InvalidParamsError
from ..values.session_rows import EventRow, IdempotencyRow, SessionRow, SessionRows, ToolCallRow

__all__ = ["FORMAT", "ROWS_FILE", "VERSION", "RowsFile", "decode_rows", "encode_rows", "sha256"]

ROWS_FILE: Final = "session_rows.jsonl"
FORMAT: Final = "session-server/session-rows"
VERSION: Final = 1


class _Header(msgspec.Struct, forbid_unknown_fields=True, tag="session", tag_field="kind"):
    format: str
    version: int
    session: SessionRow
    events: int
    tool_calls: int
    idempotency: int
    files: dict[str, str]


class RowsFile(msgspec.Struct):
    """A decoded rows file: the rows and the digests of the reference files beside it."""

    rows: SessionRows
    files: dict[str, str]


_ENCODER: Final = msgspec.json.Encoder()
_HEADER: Final = msgspec.json.Decoder(_Header)
_ROW: Final = msgspec.json.Decoder(EventRow | ToolCallRow | IdempotencyRow)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def encode_rows(rows: SessionRows, files: Mapping[str, str]) -> bytes:
    """The file's bytes; ``files`` maps each reference file written beside it to its digest."""
    header = _Header(
        format=FORMAT,
        version=VERSION,
        session=rows.session,
        events=len(rows.events),
        tool_calls=len(rows.tool_calls),
        idempotency=len(rows.idempotency),
        files=dict(sorted(files.items())),
    )
    out = [_ENCODER.encode(header)]
    out.extend(_ENCODER.encode(r) for r in rows.events)
    out.extend(_ENCODER.encode(r) for r in rows.tool_calls)
    out.extend(_ENCODER.encode(r) for r in rows.idempotency)
    return b"\n".join(out) + b"\n"


def _refuse(line: int, problem: str) -> InvalidParamsError:
    return InvalidParamsError(
        f"{ROWS_FILE} line {line}: {problem}", data={"field": ROWS_FILE, "line": line}
    )


def decode_rows(lines: Iterable[bytes]) -> RowsFile:
    """Parse the file's lines strictly (``InvalidParamsError`` naming the line on any defect).

    Unlike the lenient reference readers, nothing is skipped: a lossless import is all or
    nothing, and a short file (fewer rows than the header announces) is refused.
    """
    header: _Header | None = None
    rows: SessionRows | None = None
    number = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if header is None or rows is None:
            try:
                header = _HEADER.decode(line)
            except msgspec.DecodeError as exc:
                raise _refuse(number, f"not a session-rows header ({exc})") from None
            if header.format != FORMAT or header.version > VERSION:
                raise _refuse(
                    number, f"format {header.format!r} version {header.version} is not readable"
                )
            rows = SessionRows(session=header.session)
            continue
        try:
            row = _ROW.decode(line)
        except msgspec.DecodeError as exc:
            raise _refuse(number, str(exc)) from None
        if isinstance(row, EventRow):
            rows.events.append(row)
        elif isinstance(row, ToolCallRow):
            rows.tool_calls.append(row)
        else:
            rows.idempotency.append(row)
    if header is None or rows is None:
        raise _refuse(1, "empty file")
    found = (len(rows.events), len(rows.tool_calls), len(rows.idempotency))
    wanted = (header.events, header.tool_calls, header.idempotency)
    if found != wanted:
        raise _refuse(
            number,
            f"holds {found} (events, tool_calls, idempotency) rows, the header says {wanted}",
        )
    return RowsFile(rows=rows, files=header.files)
