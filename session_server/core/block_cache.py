"""``BlockCache``: the memory blocks a build renders, kept by the core (pure).

A build needs the agent's blocks and the session's; reading them on every build would
cost a store round trip per request. The cache holds what the last read returned and the
rendered text per session and pin, so that builds while no block changes cost two dict
lookups and hand the same string to the context (byte-identical prefixes). A block
write (``written``) drops what it changed; a read issued before a write
(``NeedBlocks.generation`` older than the cache's) is not remembered.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

from ..values.blocks import BlockSet, render_blocks
from .needs import NeedBlocks

__all__ = ["MAX_CACHED_SESSIONS", "BlockCache"]

# Sessions whose blocks the cache holds (least recently used go first).
MAX_CACHED_SESSIONS: Final = 256


class BlockCache:
    """The blocks recently built sessions see (the agent's and their own), and their text."""

    def __init__(self) -> None:
        # Per session: the blocks it sees (the agent's and its own), as the last read
        # returned them; an agent block's write drops every session's.
        self._sessions: OrderedDict[str, BlockSet] = OrderedDict()
        # Per session: the pin of its last build and the text rendered for it (one per
        # session, so requests naming ever new pins cannot grow the cache).
        self._text: dict[str, tuple[tuple[str, ...] | None, str]] = {}
        self._generation = 0

    def lookup(self, session_id: str) -> BlockSet | NeedBlocks:
        """The blocks ``session_id`` sees, or the read that gets them."""
        blocks = self._sessions.get(session_id)
        if blocks is None:
            return NeedBlocks(session_id, self._generation)
        self._sessions.move_to_end(session_id)
        return blocks

    def learn(self, need: NeedBlocks, answer: BlockSet, text: str | None = None) -> None:
        """Remember a read's answer unless a block was written since it was issued;
        ``text``: its rendering under no pin, made where the read ran (the very string
        whose count was remembered there: a build then finds it without comparing the
        text character by character)."""
        if need.generation != self._generation:
            return
        self._sessions[need.session_id] = answer
        if text is not None:
            self._text[need.session_id] = (None, text)
        self._sessions.move_to_end(need.session_id)
        while len(self._sessions) > MAX_CACHED_SESSIONS:
            old, _ = self._sessions.popitem(last=False)
            self._text.pop(old, None)

    def rendered(self, session_id: str, pin: Sequence[str] | None) -> str | NeedBlocks:
        """The blocks' system instruction for ``session_id`` under ``pin`` (a strategy's
        ``blocks``), the same string object while no block changes."""
        key = None if pin is None else tuple(pin)
        memo = self._text.get(session_id)
        if memo is not None and memo[0] == key and session_id in self._sessions:
            return memo[1]
        blocks = self.lookup(session_id)
        if isinstance(blocks, NeedBlocks):
            return blocks
        text = render_blocks(blocks, pin)
        self._text[session_id] = (key, text)
        return text

    def written(self, session_id: str | None) -> None:
        """A block of ``session_id`` (``None``: of the agent) was written or deleted."""
        self._generation += 1
        if session_id is None:
            self._sessions.clear()
            self._text.clear()
        else:
            self._sessions.pop(session_id, None)
            self._text.pop(session_id, None)

    def forget(self, session_id: str) -> None:
        """The session was deleted (its blocks with it)."""
        self.written(session_id)

    def clear(self) -> None:
        """The store closed (hibernation, a restore): everything may have changed."""
        self._generation += 1
        self._sessions.clear()
        self._text.clear()
