"""The cluster secret: the key every node of a cluster holds, from which a front door
derives the credential it shows an agent's owner when it forwards a connection
(``values.forwarding.forward_credential``). Read once at start from
``--cluster-secret-file`` (env ``SESSION_SERVER_CLUSTER_SECRET_FILE``)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from ..values.forwarding import MIN_CLUSTER_SECRET_BYTES

__all__ = ["MAX_SECRET_FILE_BYTES", "read_cluster_secret"]

MAX_SECRET_FILE_BYTES: Final = 4096


def read_cluster_secret(path: Path) -> bytes:
    """The secret in ``path``: its first non-empty line, surrounding whitespace removed,
    at least ``MIN_CLUSTER_SECRET_BYTES`` bytes. ``ValueError`` saying what is wrong."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as exc:
        raise ValueError(
            f"cluster secret file {str(path)!r}: cannot read: {exc.strerror or exc}"
        ) from None
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise ValueError(
            f"cluster secret file {str(path)!r}: larger than {MAX_SECRET_FILE_BYTES} bytes"
        )
    lines = [line.strip() for line in data.splitlines() if line.strip()]
    if not lines or len(lines[0]) < MIN_CLUSTER_SECRET_BYTES:
        raise ValueError(
            f"cluster secret file {str(path)!r}: the secret must be at least "
            f"{MIN_CLUSTER_SECRET_BYTES} bytes (e.g. `openssl rand -hex 32`)"
        )
    return lines[0]
