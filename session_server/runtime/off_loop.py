"""Work linear in a request's text, moved off the event loop when the text is large
(I/O shell).

``off_loop_if_large`` runs a write's planning (validation, token counts) on a worker
thread past ``LARGE_CONTENT_CHARS``. ``instructions_counted`` does the same for the
system instructions a build or a persist counts. A build reports the context's token count, and a persist under a compacting strategy
checks the context's size: both count the request's system instructions on the event
loop (``TokenCounter.count_instruction``, remembered per text). A new text of a few
MiB took hundreds of milliseconds there, stalling every client, and a text too large to
remember was counted again on every request. ``instructions_counted`` counts such texts
on a worker thread first and pins their counts for the request (``pin_instructions``).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final, TypeVar

from ..concurrency.worker_threads import WorkerThreads
from ..values.tokens import TokenCounter, loaded_counter

__all__ = [
    "LARGE_CONTENT_CHARS",
    "OFF_LOOP_EVENTS",
    "instructions_counted",
    "off_loop_if_large",
    "on_worker",
    "release_after_response",
    "release_in_steps",
]

T = TypeVar("T")

# Content above this many characters is planned (validated, counted) off the event loop:
# counting 32 Ki characters of text takes about 3 ms here (25-30 ms for 256 Ki), and a
# persist under a compacting strategy counts its turn before the commit.
LARGE_CONTENT_CHARS: Final = 32 * 1024


OFF_LOOP_EVENTS: Final = 1000
"""A context built from, or a compaction planned over, at least this many events runs on
a worker thread: that work is linear in the events (a summary of 200k events held the
event loop for seconds, a build of 100k events for hundreds of milliseconds), and the
common small window is not worth a worker round trip."""


async def on_worker(executor: WorkerThreads, fn: Callable[[], T]) -> T:
    """``fn()`` on a worker thread of ``executor``; its result, or its exception here."""
    return await executor.run(fn)


def release_in_steps(value: Any) -> None:
    """Empty ``value`` and every dict and list inside it, one at a time (pure Python:
    other threads get the GIL between steps), instead of letting its last reference
    free it in one deallocation: the answer to a view of 100k events is millions of
    objects, and freeing them at once held the event loop (and the GIL) for a second.

    Only for a value nothing else uses (a request's own result, already encoded):
    its dicts and lists are cleared; other objects (strings, structs) are only let go.
    """
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            inner = [v for v in item.values() if type(v) is dict or type(v) is list]
            item.clear()
        elif type(item) is list:
            inner = [v for v in item if type(v) is dict or type(v) is list]
            item.clear()
        else:
            continue
        stack += inner
        del inner


def release_after_response(
    executor: WorkerThreads, after_response: Callable[[Callable[[], None]], None], value: Any
) -> None:
    """Once the request's answer is queued (``after_response``), ``release_in_steps``
    its ``value`` on a worker thread; until then this keeps it alive, so the response
    that holds it is freed on the loop without it."""
    held = [value]

    def release() -> None:
        job = functools.partial(release_in_steps, held.pop())
        executor.post(job)

    after_response(release)


async def off_loop_if_large(executor: WorkerThreads, size: int, plan: Callable[[], T]) -> T:
    """Run the pure planning step ``plan`` (validation and token counting, linear in
    the content) on a worker thread when the content is large: a 15 MiB append
    counted on the event loop stalled every client for seconds."""
    if size < LARGE_CONTENT_CHARS:
        return plan()
    return await executor.run(plan)


def instructions_counted(
    executor: WorkerThreads, texts: Sequence[str]
) -> AbstractAsyncContextManager[None]:
    """Within the block, ``texts`` count without tokenising on the loop when they reach
    ``LARGE_CONTENT_CHARS`` together: those not counted yet are counted first, on a
    worker thread when they reach it themselves, and every count is pinned for the
    block (another request's counts could otherwise empty the counter's cache, or an
    earlier request release a count this one found pinned). Smaller texts are counted
    where they are needed, as before (a worker round trip would cost more). Decided
    here, before the block: the common case enters a block that does nothing."""
    counter = loaded_counter()  # not loaded: the actor waits for the load off the loop
    if counter is None or not texts or sum(map(len, texts)) < LARGE_CONTENT_CHARS:
        return _NOTHING
    return _pinned_counts(executor, counter, texts)


class _Nothing:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_NOTHING: Final = _Nothing()


@asynccontextmanager
async def _pinned_counts(
    executor: WorkerThreads, counter: TokenCounter, texts: Sequence[str]
) -> AsyncIterator[None]:
    counts = counter.known_instructions(texts)
    todo = list(dict.fromkeys(t for t in texts if t not in counts))
    if sum(map(len, todo)) >= LARGE_CONTENT_CHARS:
        counts.update(await executor.run(_count, counter, todo))
    elif todo:
        counts.update(_count(counter, todo))
    counter.pin_instructions(counts)
    try:
        yield
    finally:
        counter.unpin_instructions(counts)


def _count(counter: TokenCounter, texts: list[str]) -> dict[str, int]:
    return {text: counter.count(text) for text in texts}
