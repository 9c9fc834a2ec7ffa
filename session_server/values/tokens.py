"""Token counting with tiktoken, degrading to an estimate (pure apart from the cache load).

``get_counter(model)`` picks the encoding for a model (default ``o200k_base``). When the
encoding cannot be loaded (no network and no ``TIKTOKEN_CACHE_DIR`` copy), the counter
estimates (about 4 bytes per token), sets ``estimated=True`` on every result and logs one
warning per encoding (per process, however many counters are built); it never raises.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple

from .codec import arguments_text, event_to_message
from .events import ContextMessage, SessionEvent

__all__ = [
    "DEFAULT_ENCODING",
    "MESSAGE_OVERHEAD",
    "TokenCount",
    "TokenCounter",
    "count_events",
    "count_messages",
    "count_text",
    "get_counter",
    "loaded_counter",
]

log = logging.getLogger(__name__)

# Encodings already reported as unavailable: the warning is logged once per encoding.
_WARNED: set[str] = set()

DEFAULT_ENCODING: Final = "o200k_base"
# Per-message framing tokens in the chat format (role, separators), as OpenAI counts them.
MESSAGE_OVERHEAD: Final = 4
# Longer text is counted piece by piece: tiktoken returns every token as a Python int in
# one list (about 80 bytes per token: 700 MB for a 15 MiB append) built while holding the
# GIL (hundreds of ms with the event loop stalled).
COUNT_PIECE_CHARS: Final = 64 * 1024
_CUT_WINDOW: Final = 4096
# System instructions are counted on every build and seldom change (a system prompt of a
# few KiB costs hundreds of microseconds to encode): their counts are remembered, within
# these bounds (the cache is emptied when a new text would pass them).
INSTRUCTION_CACHE_CHARS: Final = 4 * 1024 * 1024
INSTRUCTION_CACHE_ENTRIES: Final = 256


def _pieces(text: str) -> Iterable[str]:
    """``text`` in pieces of at most about ``COUNT_PIECE_CHARS``, cut where the encoders'
    pre-tokenisation cuts anyway: before a single space between two non-space characters
    (every pattern of the cl100k/o200k families starts a new piece there). Text with no
    such space near the limit is cut at the limit (the count may then differ by a token
    per cut)."""
    start, n = 0, len(text)
    while n - start > COUNT_PIECE_CHARS:
        end = start + COUNT_PIECE_CHARS
        low = max(start + 1, end - _CUT_WINDOW)
        cut = end
        p = text.rfind(" ", low, end)
        while p >= low:
            if not text[p - 1].isspace() and not text[p + 1].isspace():
                cut = p
                break
            p = text.rfind(" ", low, p)
        yield text[start:cut]
        start = cut
    yield text[start:]


class TokenCount(NamedTuple):
    tokens: int
    estimated: bool


class TokenCounter:
    """Counts tokens of text and messages with one encoding (or an estimate)."""

    def __init__(self, encoding_name: str = DEFAULT_ENCODING) -> None:
        self.encoding_name = encoding_name
        self._encoding: Any = None
        self._instructions: dict[str, int] = {}
        self._instruction_chars = 0
        # Counts taken ahead, kept while a request uses them: text -> [tokens, callers].
        self._pinned: dict[str, list[int]] = {}
        try:
            import tiktoken

            self._encoding = tiktoken.get_encoding(encoding_name)
        except Exception as exc:  # any failure to load means: estimate instead
            if encoding_name not in _WARNED:
                _WARNED.add(encoding_name)
                log.warning(
                    "tiktoken encoding %s unavailable (%s); token counts are estimates",
                    encoding_name,
                    exc.__class__.__name__,
                )

    @property
    def estimated(self) -> bool:
        return self._encoding is None

    def count(self, text: str) -> int:
        if not text:
            return 0
        if self._encoding is None:
            size = len(text) if text.isascii() else len(text.encode("utf-8"))
            return math.ceil(size / 4)
        # Special-token text counts as ordinary text: ``encode_ordinary`` is
        # ``encode(text, disallowed_special=())`` without the special-token scan.
        encode = self._encoding.encode_ordinary
        if len(text) <= COUNT_PIECE_CHARS:
            return len(encode(text))
        return sum(len(encode(piece)) for piece in _pieces(text))

    def count_instruction(self, text: str) -> int:
        """``count(text)`` for a system instruction, remembered (see the bounds above),
        or as counted ahead off the event loop (``pin_instructions``)."""
        cached = self._instructions.get(text)
        if cached is not None:
            return cached
        if self._pinned:
            pinned = self._pinned.get(text)
            if pinned is not None:
                return pinned[0]
        tokens = self.count(text)
        self._remember(text, tokens)
        return tokens

    def _remember(self, text: str, tokens: int) -> bool:
        if len(text) > INSTRUCTION_CACHE_CHARS // 4:
            return False
        if (
            self._instruction_chars + len(text) > INSTRUCTION_CACHE_CHARS
            or len(self._instructions) >= INSTRUCTION_CACHE_ENTRIES
        ):
            self._instructions.clear()
            self._instruction_chars = 0
        self._instructions[text] = tokens
        self._instruction_chars += len(text)
        return True

    def known_instructions(self, texts: Iterable[str]) -> dict[str, int]:
        """The counts ``count_instruction`` has now of those of ``texts`` it has counted."""
        known: dict[str, int] = {}
        for text in texts:
            tokens = self._instructions.get(text)
            if tokens is None:
                pinned = self._pinned.get(text)
                tokens = None if pinned is None else pinned[0]
            if tokens is not None:
                known[text] = tokens
        return known

    def pin_instructions(self, counts: Mapping[str, int]) -> None:
        """Instruction counts taken ahead (off the event loop): remembered as any count
        is, and kept until ``unpin_instructions`` whatever the remembering bounds do (a
        text too large to remember, or emptied from the cache by the next count to
        remember), so the call that pinned them never counts them again (its request
        holds the texts anyway: no memory kept past it). Each pin needs its unpin."""
        for text, tokens in counts.items():
            if text not in self._instructions:  # remembered once: its size counted once
                self._remember(text, tokens)
            pinned = self._pinned.get(text)
            if pinned is None:
                self._pinned[text] = [tokens, 1]
            else:
                pinned[1] += 1

    def unpin_instructions(self, counts: Mapping[str, int]) -> None:
        """The end of the call that pinned ``counts``."""
        for text in counts:
            pinned = self._pinned.get(text)
            if pinned is not None:
                pinned[1] -= 1
                if pinned[1] <= 0:
                    del self._pinned[text]

    def count_message(self, message: ContextMessage) -> int:
        total = MESSAGE_OVERHEAD + self.count(message.content)
        if message.name:
            total += self.count(message.name)
        for call in message.tool_calls or ():
            total += self.count(call.name) + self.count(arguments_text(call.arguments)) + 3
        return total

    def count_event(self, event: SessionEvent) -> int:
        """The stored count of an event: its message as a build shows it (0 for none)."""
        message = event_to_message(event)
        return 0 if message is None else self.count_message(message)

    def count_messages(
        self, messages: Iterable[ContextMessage], system_instructions: Iterable[str] = ()
    ) -> TokenCount:
        total = sum(self.count_message(m) for m in messages)
        total += sum(MESSAGE_OVERHEAD + self.count_instruction(s) for s in system_instructions)
        return TokenCount(total, self.estimated)


_COUNTERS: dict[str, TokenCounter] = {}
_COUNTERS_LOCK = threading.Lock()


def _counter_for_encoding(encoding_name: str) -> TokenCounter:
    # Turns are counted on worker threads: the first callers wait for one load of the
    # encoding (a fraction of a second) instead of each loading it.
    counter = _COUNTERS.get(encoding_name)
    if counter is None:
        with _COUNTERS_LOCK:
            counter = _COUNTERS.get(encoding_name)
            if counter is None:
                counter = _COUNTERS[encoding_name] = TokenCounter(encoding_name)
    return counter


def get_counter(model: str | None = None) -> TokenCounter:
    """The (cached) counter for ``model``'s encoding; unknown models use ``o200k_base``."""
    name = DEFAULT_ENCODING
    if model:
        try:
            import tiktoken

            name = tiktoken.encoding_name_for_model(model)
        except Exception:
            name = DEFAULT_ENCODING
    return _counter_for_encoding(name)


def loaded_counter(encoding_name: str = DEFAULT_ENCODING) -> TokenCounter | None:
    """The counter of ``encoding_name`` once it is loaded, else ``None``: never loads and
    never waits. ``get_counter`` may wait for another thread's load (the counters' lock is
    held while the encoding loads, half a second at start-up): an event loop asks this
    first and has the load done on a worker thread (``runtime.actor``)."""
    return _COUNTERS.get(encoding_name)


def count_events(events: Iterable[SessionEvent]) -> list[int]:
    """The stored count of each event (``TokenCounter.count_event``, default encoding)."""
    counter = get_counter()
    return [counter.count_event(e) for e in events]


def count_text(text: str, model: str | None = None) -> TokenCount:
    counter = get_counter(model)
    return TokenCount(counter.count(text), counter.estimated)


def count_messages(
    messages: Iterable[ContextMessage],
    system_instructions: Iterable[str] = (),
    model: str | None = None,
) -> TokenCount:
    return get_counter(model).count_messages(messages, system_instructions)
