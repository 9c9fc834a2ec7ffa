"""Agent id validation (pure): an agent id names a folder, so it must not escape it.

Ids are compared in Unicode NFC: ``validate_agent_id`` returns the NFC form, so the NFC and
NFD spellings of one name (``"café"`` typed on two systems) are one agent, one folder.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

from .errors import InvalidAgentIdError

__all__ = ["MAX_AGENT_ID_BYTES", "validate_agent_id"]

MAX_AGENT_ID_BYTES: Final = 128
_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1


def validate_agent_id(agent_id: object) -> str:
    """Return ``agent_id`` in Unicode NFC if it is safe as one path component, else raise.

    Allowed (checked on the NFC form): 1..128 UTF-8 bytes of printable characters, spaces included. Refused:
    ``/`` and ``\\``, ``.`` and ``..`` and any id containing ``..``, NUL and other control
    characters, leading or trailing whitespace.
    """
    if not isinstance(agent_id, str):
        raise InvalidAgentIdError(
            f"agent_id: must be a string, got {type(agent_id).__name__}", data={"field": "agent_id"}
        )
    problem = None
    try:
        agent_id = unicodedata.normalize("NFC", agent_id)
        size = len(agent_id.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates, e.g. from a JSON "\ud800" escape
        size = -1
    if not agent_id:
        problem = "must not be empty"
    elif size < 0:
        problem = "must be valid Unicode text (no lone surrogates)"
    elif size > MAX_AGENT_ID_BYTES:
        problem = f"must be at most {MAX_AGENT_ID_BYTES} bytes in UTF-8"
    elif "/" in agent_id or "\\" in agent_id:
        problem = "must not contain a path separator"
    elif ".." in agent_id or agent_id == ".":
        problem = "must not contain '..' or be '.'"
    elif _CONTROL.search(agent_id):
        problem = "must not contain NUL or control characters"
    elif agent_id != agent_id.strip():
        problem = "must not start or end with whitespace"
    if problem:
        raise InvalidAgentIdError(
            f"agent_id {agent_id[:64]!r}: {problem}", data={"field": "agent_id"}
        )
    return agent_id
