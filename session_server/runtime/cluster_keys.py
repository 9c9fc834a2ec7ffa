"""Per-agent data keys of cluster mode: what goes into JetStream is AES-GCM encrypted (I/O).

Every record and snapshot of an agent that a node puts into JetStream is sealed with the
agent's current data key (AES-256-GCM, a random 96-bit nonce, the key id and the
agent's subject as associated data, so an entry cannot be moved to another agent or
read under another key). Owner markers carry no data and stay plain.

Where the keys live is what makes a delete final (docs/cluster.md, "Deleted means
deleted"): JetStream keeps purged and deleted messages of file-stored streams in its
block files and Raft log, so a key kept in a file-stored KV bucket could never be
destroyed. The keys are kept in a KV bucket with **memory storage** (``<prefix>_keys``,
replicated like the rest): its messages and its Raft log never reach a nats-server's
disk, and replacing a key (history 1) drops the old one from every server's memory.
Deleting a session or an event rotates the agent's key: a new key, a snapshot of the
file (which no longer holds the deleted rows) under it, the log before the snapshot
purged, the old key overwritten. What is left of the old entries on disk is ciphertext
under a key that exists nowhere.

The price: if every nats-server of the cluster stops at once, the keys are gone and the
log cannot be read; the nodes' own agent files (written before each acknowledgement,
as on a single node) are then the copy to start again from.
"""

from __future__ import annotations

import os
import struct
from typing import Final

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["ENCRYPTED", "DataKey", "KeyRing", "new_key", "open_sealed", "seal", "sealed_key_id"]

ENCRYPTED: Final = b"E"
_HEADER: Final = struct.Struct(">I12s")  # key id, nonce


class DataKey(msgspec.Struct, frozen=True):
    """One agent's data key: its id (increasing with each rotation) and 32 bytes."""

    key_id: int
    key: bytes


class KeyRing(msgspec.Struct, frozen=True):
    """An agent's keys as the keys bucket holds them: the current one last. Two only
    while a rotation runs (the old one still opens the log before the new snapshot)."""

    keys: list[DataKey]

    @property
    def current(self) -> DataKey:
        return self.keys[-1]

    def get(self, key_id: int) -> DataKey | None:
        return next((k for k in self.keys if k.key_id == key_id), None)


def new_key(previous: DataKey | None) -> DataKey:
    return DataKey((previous.key_id if previous is not None else 0) + 1, os.urandom(32))


def seal(key: DataKey, subject: str, payload: bytes) -> bytes:
    nonce = os.urandom(12)
    header = _HEADER.pack(key.key_id, nonce)
    return ENCRYPTED + header + AESGCM(key.key).encrypt(nonce, payload, header + subject.encode())


def sealed_key_id(data: bytes) -> int | None:
    """The key id of a sealed entry, ``None`` for a plain one."""
    if data[:1] != ENCRYPTED or len(data) < 1 + _HEADER.size:
        return None
    key_id: int = _HEADER.unpack_from(data, 1)[0]
    return key_id


def open_sealed(key: DataKey, subject: str, data: bytes) -> bytes:
    """The payload of a sealed entry (a plain one as it is); ``ValueError`` if it is not
    this key's, or altered."""
    if data[:1] != ENCRYPTED:
        return data
    header = data[1 : 1 + _HEADER.size]
    key_id, nonce = _HEADER.unpack(header)
    if key_id != key.key_id:
        raise ValueError(f"sealed with key {key_id}, not key {key.key_id}")
    try:
        return AESGCM(key.key).decrypt(nonce, data[1 + _HEADER.size :], header + subject.encode())
    except InvalidTag:
        raise ValueError(
            "a sealed entry does not authenticate (altered, or another agent's)"
        ) from None
