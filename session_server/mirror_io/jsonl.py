"""JSONL and JSON file helpers for the mirror: lenient readers, cheap appends, atomic writes.

Readers never raise on bad content: a missing file reads as empty (or ``None``), and a
blank or malformed line (invalid UTF-8, invalid JSON, or JSON that is not an object) is
skipped with a ``logging`` warning that names the file and the 1-based line number.

Writers encode compact JSON with ``msgspec`` (``,``/``:`` separators, non-ASCII kept),
which is byte-for-byte the shape of the reference files. ``atomic_write_bytes`` writes a
temporary file in the same directory and ``os.replace``\\ s it over the target, so a reader
sees the old or the new file, never a mix.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import msgspec

from ..storage.file_modes import file_mode, make_dir, open_append

__all__ = [
    "append_bytes",
    "atomic_write_bytes",
    "atomic_write_json",
    "encode_line",
    "encode_lines",
    "fsync_dir",
    "iter_jsonl_bytes",
    "read_bytes_or_empty",
    "read_bytes_or_none",
    "read_json",
    "read_jsonl",
    "read_jsonl_numbered",
]

logger = logging.getLogger("session_server.mirror")

_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder()


def encode_line(obj: Any) -> bytes:
    """One JSONL line: compact JSON followed by ``\\n``."""
    return _ENCODER.encode(obj) + b"\n"


def encode_lines(objs: Iterable[Any]) -> bytes:
    """JSONL of ``objs``: each one compact JSON followed by ``\\n`` (one encoder call)."""
    return _ENCODER.encode_lines(objs)


def read_bytes_or_empty(path: Path) -> bytes:
    """The file's bytes, or ``b""`` when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def iter_jsonl_bytes(data: bytes, label: str) -> list[tuple[int, dict[str, Any]]]:
    """Parse JSONL ``data``; ``label`` names the source in warnings. Returns (line no, object)."""
    out: list[tuple[int, dict[str, Any]]] = []
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the final newline ends the last line; it does not start a blank one
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            logger.warning("%s:%d: blank line skipped", label, number)
            continue
        try:
            value = _DECODER.decode(raw)
        except (msgspec.DecodeError, RecursionError) as exc:
            logger.warning("%s:%d: malformed JSON line skipped (%s)", label, number, exc)
            continue
        if not isinstance(value, dict):
            logger.warning(
                "%s:%d: line skipped: expected a JSON object, got %s",
                label,
                number,
                type(value).__name__,
            )
            continue
        out.append((number, value))
    return out


def read_jsonl_numbered(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Objects of a JSONL file with their 1-based line numbers; ``[]`` when missing."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        logger.warning("%s: cannot be read (%s)", path, exc)
        return []
    return iter_jsonl_bytes(data, str(path))


def read_jsonl(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Objects of a JSONL file (oldest first); with ``limit``, only the last ``limit``."""
    items = [obj for _, obj in read_jsonl_numbered(path)]
    if limit is not None:
        items = items[-limit:] if limit > 0 else []
    return items


def read_bytes_or_none(path: Path) -> bytes | None:
    """The file's bytes, or ``None`` when it is missing or cannot be read (logged)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning("%s: cannot be read (%s)", path, exc)
        return None


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or ``None`` when missing, unreadable, malformed or not an object."""
    data = read_bytes_or_none(path)
    if data is None:
        return None
    try:
        value = _DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        logger.warning("%s: malformed JSON ignored (%s)", path, exc)
        return None
    if not isinstance(value, dict):
        logger.warning("%s: ignored: expected a JSON object, got %s", path, type(value).__name__)
        return None
    return value


def append_bytes(path: Path, data: bytes, *, fsync: bool = False) -> None:
    """Append ``data`` to ``path`` (created with its parent folders when missing)."""
    if not data:
        return
    try:
        f = open_append(path)
    except FileNotFoundError:
        make_dir(path.parent)
        f = open_append(path)
    with f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def fsync_dir(directory: Path) -> None:
    """fsync a directory, so a rename or a new entry in it is durable (best effort: a
    platform that cannot open or sync a directory is left as it is)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # not supported on this platform
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (temp file in the same folder + ``os.replace``).

    With ``fsync`` the data and the folder entry are flushed to disk, so the new content
    survives a power loss as well as a process kill.
    """
    make_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, file_mode())  # mkstemp makes 0600; a configured mode applies alike
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        fsync_dir(path.parent)


def atomic_write_json(path: Path, obj: Any, *, fsync: bool = True) -> None:
    """Write ``obj`` as compact JSON atomically (see ``atomic_write_bytes``)."""
    atomic_write_bytes(path, _ENCODER.encode(obj), fsync=fsync)
