"""What cluster mode puts into an agent's log, and the names it uses there (pure).

One durable write of an agent (one SQLite write transaction) is one ``TurnRecord``: the
statements the transaction executed that may write, with their parameters as bound, in
order (statement replay, as rqlite does). Applying the records in log order to the
agent's file as of the record before gives the same file, because every write is
deterministic given its parameters: the application passes times and ids as parameters,
triggers and FTS5 are deterministic, and SQLite's ``random()``/``randomblob()`` are
replaced on cluster connections by a generator seeded per statement (``seed`` below), so
a replay draws the same values.

Besides records the log holds owner markers (``OwnerMarker``): a node that claimed the
agent appends one with the expected last subject sequence before it serves; that is the
fence that refuses a stale owner's next append.

Entries are tagged by their first byte: ``R`` a record (msgpack), ``M`` a marker (JSON),
``E`` a record encrypted with the agent's data key (the rest is the key id and the
AES-GCM nonce and ciphertext, see ``runtime/cluster_keys.py``).
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec

__all__ = [
    "APPLIED_SEQ_KEY",
    "OwnerEntry",
    "OwnerMarker",
    "Statement",
    "TurnRecord",
    "agent_from_token",
    "agent_token",
    "decode_entry",
    "decode_owner",
    "encode_marker",
    "encode_owner",
    "encode_record",
    "writes",
]

# ``agent_settings`` row holding the log sequence the file has applied up to (written in
# the same transaction as the record it applies).
APPLIED_SEQ_KEY: Final = "cluster_applied_seq"

_RECORD: Final = b"R"
_MARKER: Final = b"M"
_SAFE: Final = re.compile(r"[A-Za-z0-9_-]")
_HEX: Final = frozenset("0123456789ABCDEF")
_READ_ONLY: Final = re.compile(r"\s*(?:--[^\n]*\n\s*)*(SELECT|PRAGMA|EXPLAIN)\b", re.IGNORECASE)


class Statement(msgspec.Struct, array_like=True, frozen=True):
    """One executed statement: its SQL, its parameters (a sequence, a mapping, or for
    ``many`` a list of them), and whether it was an ``executemany``."""

    sql: str
    params: Any
    many: bool = False


class TurnRecord(msgspec.Struct, array_like=True, frozen=True):
    """One write transaction of an agent: what it was (``what``, for operators), the seed
    of its statements' random values, and its statements."""

    what: str
    seed: int
    statements: list[Statement]


class OwnerMarker(msgspec.Struct, frozen=True):
    """Appended by a node that claimed an agent, before it serves it."""

    node_id: str
    generation: int


class OwnerEntry(msgspec.Struct, frozen=True):
    """The ownership KV entry of an agent: who owns it, where, which claim."""

    node_id: str
    url: str
    generation: int


_record_encoder: Final = msgspec.msgpack.Encoder()
_record_decoder: Final = msgspec.msgpack.Decoder(TurnRecord)
_marker_decoder: Final = msgspec.json.Decoder(OwnerMarker)
_owner_decoder: Final = msgspec.json.Decoder(OwnerEntry)


def writes(sql: str) -> bool:
    """Whether a statement may write (and so belongs in the record): everything but a
    plain ``SELECT``, ``PRAGMA`` or ``EXPLAIN``. Replaying a read is harmless; leaving
    out a write is not, so anything unsure counts as a write."""
    return _READ_ONLY.match(sql) is None


def encode_record(record: TurnRecord) -> bytes:
    return _RECORD + _record_encoder.encode(record)


def encode_marker(marker: OwnerMarker) -> bytes:
    return _MARKER + msgspec.json.encode(marker)


def decode_entry(data: bytes) -> TurnRecord | OwnerMarker:
    """A plain log entry as its value; ``ValueError`` for anything else (an encrypted
    entry is decrypted first by its reader)."""
    tag, body = data[:1], data[1:]
    try:
        if tag == _RECORD:
            return _record_decoder.decode(body)
        if tag == _MARKER:
            return _marker_decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise ValueError(f"unreadable log entry: {exc}") from None
    raise ValueError(f"unknown log entry tag {tag!r}")


def encode_owner(entry: OwnerEntry) -> bytes:
    return msgspec.json.encode(entry)


def decode_owner(data: bytes) -> OwnerEntry:
    try:
        return _owner_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise ValueError(f"unreadable owner entry: {exc}") from None


def agent_from_token(token: str) -> str:
    """The agent id ``agent_token`` made ``token`` from (``ValueError`` for a token it
    cannot have made)."""
    out = bytearray()
    i = 0
    while i < len(token):
        char = token[i]
        if char == "=":
            byte = token[i + 1 : i + 3]
            if len(byte) != 2 or byte.upper() != byte or not all(c in _HEX for c in byte):
                raise ValueError(f"not an agent token: {token!r}")
            out.append(int(byte, 16))
            i += 3
        elif _SAFE.match(char):
            out += char.encode("ascii")
            i += 1
        else:
            raise ValueError(f"not an agent token: {token!r}")
    return out.decode("utf-8")


def agent_token(agent_id: str) -> str:
    """The agent id as one NATS subject token and KV key: ``[A-Za-z0-9_-]`` as they are,
    every other UTF-8 byte as ``=XX`` (``=`` itself included, so the mapping is
    one-to-one). Valid in subjects (no ``.``, ``*``, ``>``, space) and in KV keys."""
    out: list[str] = []
    for char in agent_id:
        if _SAFE.match(char):
            out.append(char)
        else:
            out.extend(f"={byte:02X}" for byte in char.encode("utf-8"))
    return "".join(out)
