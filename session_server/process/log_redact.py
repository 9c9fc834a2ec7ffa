"""Keep secrets out of logs at every level.

``websockets`` logs every handshake header at DEBUG (``< Authorization: Bearer ...``, and
the ``Sec-WebSocket-Protocol`` entry ``bearer.<token>`` browsers use). ``RedactSecrets``
is a ``logging.Filter`` that rewrites such records before any handler sees them;
``redacting_logger(name)`` returns a logger carrying it, for ``serve(logger=...)`` and
``connect(logger=...)``.
"""

from __future__ import annotations

import logging
import re
from typing import Final

__all__ = ["REDACTED", "RedactSecrets", "redact", "redacting_logger"]

REDACTED: Final = "<redacted>"
_SECRET_HEADERS: Final = frozenset({"authorization", "cookie", "sec-websocket-protocol"})
_BEARER: Final = re.compile(r"(?i)\b(bearer[ .])\S+")


def redact(text: str) -> str:
    """Replace whatever follows ``Bearer `` or ``bearer.`` with ``<redacted>``."""
    return _BEARER.sub(lambda m: m.group(1) + REDACTED, text)


class RedactSecrets(logging.Filter):
    """Redact header values that carry credentials, and bearer tokens in any message."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if (
            isinstance(args, tuple)
            and len(args) == 2
            and isinstance(args[0], str)
            and args[0].strip().lower() in _SECRET_HEADERS
        ):
            record.args = (args[0], REDACTED)
            return True
        if isinstance(args, tuple) and args:
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in args)
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True


def redacting_logger(name: str) -> logging.Logger:
    """The logger ``name`` with a ``RedactSecrets`` filter (added once)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, RedactSecrets) for f in logger.filters):
        logger.addFilter(RedactSecrets())
    return logger
