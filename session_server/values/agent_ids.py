"""Agent id validation (pure): an agent id names a folder, so it must not escape it.

Ids are compared in Unicode NFC: ``validate_agent_id`` returns the NFC form, so the NFC and
NFD spellings of one name (``"café"`` typed on two systems) are one agent, one folder.

Every new id a client gives (agents and sessions it creates, events it writes) must also
look like what it is (``validate_new_id``, ``unicode_id_problem``): no character of the categories that do not print as
themselves (Cc control, Cf format such as the right-to-left override U+202E or the
zero-width space U+200B, Zl and Zp separators, Co private use, Cs surrogates, Cn
unassigned), and the id must be its own NFKC form, so no compatibility character passes
for another (the fullwidth solidus U+FF0F for ``/``, fullwidth letters, ligatures,
no-break spaces): ``agents.list`` then never shows an id as another one, or as a path.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

from .errors import InvalidAgentIdError, InvalidParamsError

__all__ = ["MAX_AGENT_ID_BYTES", "unicode_id_problem", "validate_agent_id", "validate_new_id"]

MAX_AGENT_ID_BYTES: Final = 128
_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1
_HIDDEN: Final = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cs", "Cn"})


def unicode_id_problem(value: str) -> str | None:
    """Why the id ``value`` could pass for another (see the module doc), or ``None``.

    ASCII text is answered at once (printable ASCII is always fine here)."""
    if value.isascii():
        return None if value.isprintable() else "must not contain NUL or control characters"
    for char in value:
        category = unicodedata.category(char)
        if category in _HIDDEN:
            return (
                f"must not contain U+{ord(char):04X} ({category}: invisible or not a "
                "character that prints as itself)"
            )
    if unicodedata.normalize("NFKC", value) != value:
        return (
            "must be written without compatibility characters (its NFKC form differs, "
            "e.g. fullwidth letters or U+FF0F for '/')"
        )
    return None


def validate_agent_id(agent_id: object) -> str:
    """Return ``agent_id`` in Unicode NFC if it is safe as one path component, else raise.

    Allowed (checked on the NFC form): 1..128 UTF-8 bytes of printable characters, spaces included. Refused:
    ``/`` and ``\\``, ``.`` and ``..`` and any id containing ``..``, NUL and other control
    characters, leading or trailing whitespace. A new id must also pass
    ``validate_new_id`` (an agent or session made by an older version stays reachable).
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


def validate_new_id(value: str, field: str = "agent_id") -> str:
    """``value`` (already validated) when it may name something new: an agent or session
    being created, an event being written; ``InvalidParamsError`` naming ``field`` when
    ``unicode_id_problem`` finds it could pass for another id."""
    problem = unicode_id_problem(value)
    if problem:
        error = InvalidAgentIdError if field == "agent_id" else InvalidParamsError
        raise error(f"{field} {value[:64]!r}: {problem}", data={"field": field})
    return value
