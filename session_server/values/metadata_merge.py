"""A session's metadata merged per key (pure): what ``session.update {merge: true}`` stores.

A merge replaces the given top-level keys and keeps every other one, in the writer's
transaction, so two writers that each set their own keys at once both keep theirs (a
replace would lose one of them). A value replaces the key's value whole (objects are not
merged deeper) and ``null`` stores ``null``: a merge never deletes a key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from .errors import InvalidParamsError

__all__ = ["MAX_SESSION_METADATA_BYTES", "merge_metadata"]

MAX_SESSION_METADATA_BYTES: Final = 64 * 1024
"""A session's metadata, encoded as JSON: every ``session.get`` and ``session.list`` row
carries it, so a page of 1000 sessions of 16 MiB each read 16 GB before the answer bound
could refuse it, and one such row took 0.2 to 0.7 s of the event loop per call."""


def merge_metadata(
    current: Mapping[str, Any] | None,
    patch: Mapping[str, Any],
    *,
    max_bytes: int = MAX_SESSION_METADATA_BYTES,
) -> dict[str, Any]:
    """``current`` with the keys of ``patch`` set to its values. ``InvalidParamsError``
    (field ``metadata``) when the result is over ``max_bytes`` of JSON: a merge must not
    grow a session's metadata past the bound a replace is held to."""
    merged = {**(current or {}), **patch}
    size = len(msgspec.json.encode(merged))
    if size > max_bytes:
        raise InvalidParamsError(
            f"metadata: the merged metadata would be {size} bytes of JSON, more than the "
            f"{max_bytes} a session's metadata may hold (keep large data in events)",
            data={"field": "metadata", "max_bytes": max_bytes},
        )
    return merged
