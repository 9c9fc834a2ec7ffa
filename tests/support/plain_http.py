"""A minimal HTTP/1.1 GET over asyncio streams, for the plain-HTTP paths of a test server
running in the same event loop (a blocking client would stall that loop)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

__all__ = ["HttpAnswer", "http_get"]


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    headers: dict[str, str]  # lower-case names; the last value of a repeated header
    body: str


async def http_get(url: str, path: str, headers: dict[str, str] | None = None) -> HttpAnswer:
    """``GET path`` on the server of ``url`` (``ws://HOST:PORT``); the server closes."""
    host, port = url.removeprefix("ws://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        lines = [f"GET {path} HTTP/1.1", "Host: test", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        raw = await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()
    return parse_answer(raw)


def parse_answer(raw: bytes) -> HttpAnswer:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed: dict[str, str] = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        parsed[name.strip().lower()] = value.strip()
    return HttpAnswer(int(status_line.split()[1]), parsed, body.decode("utf-8"))
