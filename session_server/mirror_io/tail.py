"""Reading JSONL files from the end, a block at a time (synchronous file I/O).

A view with a limit shows the newest lines of ``raw_traces.jsonl`` (and, when those are
too few, of ``raw_traces_archive.jsonl`` before it). ``TailReader`` reads such a file
backwards in blocks of ``BLOCK`` bytes and hands out whole lines, newest first, so the
bytes read are those of the lines shown plus at most one block: a limit of 10 on a
200k-event session reads a few kilobytes, not the whole file.

Lines are parsed as ``read_jsonl`` parses them: a blank, malformed or non-object line is
skipped with a warning naming the file (line numbers are counted from the end, as
``-1`` for the last line, because the lines before are not read). ``bytes_read`` counts
what was read, for tests and metrics.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import msgspec

__all__ = ["BLOCK", "TailReader"]

logger = logging.getLogger("session_server.mirror")

BLOCK: Final = 64 * 1024
_DECODER: Final = msgspec.json.Decoder()


class TailReader:
    """The objects of one JSONL file, newest first, read from the end on demand.

    Use as a context manager (it holds the file open); a missing file yields nothing.
    ``exhausted`` is true once the first line of the file has been handed out.
    """

    def __init__(self, path: Path, *, block: int = BLOCK) -> None:
        self.path = path
        self.block = max(1, block)
        self.bytes_read = 0
        self.exhausted = False
        self._fd: int | None = None
        self._pos = 0
        self._carry = b""  # the start of a line whose beginning is not read yet
        self._lines: list[bytes] = []  # complete lines of the last block, oldest first
        self._number = 0
        self._at_end = True  # the next block read is the file's last

    def __enter__(self) -> TailReader:
        try:
            self._fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self.exhausted = True
            return self
        except OSError as exc:
            logger.warning("%s: cannot be read (%s)", self.path, exc)
            self.exhausted = True
            return self
        self._pos = os.fstat(self._fd).st_size
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _raw_lines(self) -> Iterator[bytes]:
        """Raw lines (without their newline), newest first."""
        fd = self._fd
        if fd is None:
            return
        while True:
            while self._lines:
                yield self._lines.pop()
            if self._pos == 0:
                if self._carry:
                    line, self._carry = self._carry, b""
                    yield line
                self.exhausted = True
                return
            size = min(self.block, self._pos)
            self._pos -= size
            data = os.pread(fd, size, self._pos)
            self.bytes_read += len(data)
            parts = (data + self._carry).split(b"\n")
            # parts[0] may continue in the block before; the rest are whole lines. The
            # final newline of the file leaves an empty last part, which is no line.
            self._carry = parts[0]
            complete = parts[1:]
            if self._at_end and complete and complete[-1] == b"":
                complete.pop()
            self._at_end = False
            self._lines = complete

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for raw in self._raw_lines():
            self._number -= 1
            if not raw.strip():
                logger.warning("%s:%d: blank line skipped", self.path, self._number)
                continue
            try:
                value = _DECODER.decode(raw)
            except msgspec.DecodeError as exc:
                logger.warning(
                    "%s:%d: malformed JSON line skipped (%s)", self.path, self._number, exc
                )
                continue
            if not isinstance(value, dict):
                logger.warning(
                    "%s:%d: line skipped: expected a JSON object", self.path, self._number
                )
                continue
            yield value
