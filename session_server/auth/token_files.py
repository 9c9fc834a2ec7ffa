"""Where the server's tokens come from, and re-reading them without a restart (I/O shell
around ``session_server.auth``).

``AuthSources`` names the sources: static specs given on the command line or in
``SESSION_SERVER_TOKENS`` and a signing secret in ``SESSION_SERVER_TOKEN_SECRET`` (both fixed
for the life of the process), plus a token file and a secret file, which are re-read on
every reload. ``AuthReloader`` reloads on demand (SIGHUP) and, with ``watch``, whenever a
file's identity (inode, size, mtime) changes. A reload that fails (a missing file, a
malformed spec, a short secret) is logged and changes nothing: the tokens in force stay.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .tokens import Authenticator, parse_secrets, parse_token_file, parse_token_specs

__all__ = ["AuthReloader", "AuthSources"]

log = logging.getLogger("session_server.auth")

# A token or secret file is a few lines; a bigger one is a mistake (e.g. the wrong path).
MAX_FILE_BYTES = 1024 * 1024

FileStamp = tuple[int, int, int] | None


class AuthTarget(Protocol):
    """What a reload hands the new tokens to (the running ``SessionServer``): it answers
    how many connections it closed because their token no longer holds."""

    def reload_auth(self, auth: Authenticator) -> int: ...


@dataclass(frozen=True, slots=True)
class AuthSources:
    """The configured token sources. ``load()`` raises ``ValueError`` with a message naming
    the file (or variable) and what is wrong with it."""

    specs: tuple[str, ...] = ()
    token_file: Path | None = None
    secret_file: Path | None = None
    secret: str | None = None

    @property
    def configured(self) -> bool:
        return bool(self.specs or self.token_file or self.secret_file or self.secret)

    def load(self) -> Authenticator:
        specs = list(self.specs)
        if self.token_file is not None:
            try:
                specs += parse_token_file(_read(self.token_file))
            except ValueError as exc:
                raise ValueError(f"token file {self.token_file}: {exc}") from None
        return Authenticator(parse_token_specs(specs), self.secrets())

    def secrets(self) -> tuple[bytes, ...]:
        """The secrets of the secret file, then the one of ``SESSION_SERVER_TOKEN_SECRET``;
        the first signs (``session-server token``)."""
        found: list[bytes] = []
        if self.secret_file is not None:
            try:
                found += parse_secrets(_read(self.secret_file))
            except ValueError as exc:
                raise ValueError(f"token secret file {self.secret_file}: {exc}") from None
        if self.secret:
            try:
                found += parse_secrets(self.secret)
            except ValueError as exc:
                raise ValueError(f"SESSION_SERVER_TOKEN_SECRET: {exc}") from None
        return tuple(found)

    def stamp(self) -> tuple[FileStamp, FileStamp]:
        """What changes when a file is rewritten or replaced."""
        return _stamp(self.token_file), _stamp(self.secret_file)


def _read(path: Path) -> str:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"larger than {MAX_FILE_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None


def _stamp(path: Path | None) -> FileStamp:
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class AuthReloader:
    """Re-reads ``sources`` into ``server`` (``reload``), e.g. from a SIGHUP handler."""

    def __init__(self, sources: AuthSources, server: AuthTarget) -> None:
        self.sources = sources
        self.server = server
        self._stamp = sources.stamp()

    def reload(self, why: str = "SIGHUP") -> bool:
        """Load the sources and hand them to the server; false (and nothing changes) when
        they cannot be loaded."""
        self._stamp = self.sources.stamp()
        try:
            auth = self.sources.load()
        except ValueError as exc:
            log.error("tokens not reloaded (%s): %s; the previous tokens stay in force", why, exc)
            return False
        if not auth.enabled:
            # Emptying the files must not silently open the server to everyone.
            log.error("tokens not reloaded (%s): no token or secret left", why)
            return False
        closed = self.server.reload_auth(auth)
        log.warning(
            "tokens reloaded (%s): %d static, %d secret(s); %d connection(s) closed",
            why,
            len(auth.tokens),
            len(auth.secrets),
            closed,
        )
        return True

    async def watch(self, interval: float) -> None:
        """Reload whenever a file changes, checking every ``interval`` seconds (until
        cancelled)."""
        while True:
            await asyncio.sleep(interval)
            if self.sources.stamp() != self._stamp:
                self.reload("file changed")
