"""``BlockCache``: builds read blocks once, a write drops them, a stale read is ignored."""

from __future__ import annotations

from session_server.core.block_cache import MAX_CACHED_SESSIONS, BlockCache
from session_server.core.needs import NeedBlocks
from session_server.values.blocks import BlockRevision, BlockSet


def rev(label: str, value: str, session: str | None = None) -> BlockRevision:
    return BlockRevision(
        label=label,
        session_id=session,
        revision=1,
        value=value,
        description="",
        max_tokens=100,
        tokens=1,
        author="client",
    )


def loaded(cache: BlockCache, sid: str, blocks: BlockSet) -> None:
    need = cache.lookup(sid)
    assert isinstance(need, NeedBlocks)
    cache.learn(need, blocks)


def test_a_read_is_asked_once_then_the_same_text_is_returned() -> None:
    cache = BlockCache()
    loaded(cache, "s", BlockSet((rev("a", "agent"),), (rev("b", "mine", "s"),)))
    first = cache.rendered("s", None)
    assert isinstance(first, str) and "agent" in first and "mine" in first
    assert cache.rendered("s", None) is first
    pinned = cache.rendered("s", ["a"])
    assert isinstance(pinned, str) and "mine" not in pinned


def test_a_write_drops_its_scope_only() -> None:
    cache = BlockCache()
    loaded(cache, "s", BlockSet((rev("a", "agent"),), (rev("b", "mine", "s"),)))
    loaded(cache, "t", BlockSet((rev("a", "agent"),), ()))
    cache.written("s")
    assert isinstance(cache.lookup("s"), NeedBlocks)
    assert isinstance(cache.lookup("t"), BlockSet)
    cache.written(None)  # an agent block: every session renders it
    assert isinstance(cache.lookup("t"), NeedBlocks)


def test_a_read_issued_before_a_write_is_not_remembered() -> None:
    cache = BlockCache()
    need = cache.lookup("s")
    assert isinstance(need, NeedBlocks)
    cache.written("s")
    cache.learn(need, BlockSet((), (rev("b", "old", "s"),)))
    assert isinstance(cache.lookup("s"), NeedBlocks)


def test_the_cache_is_bounded_and_cleared() -> None:
    cache = BlockCache()
    for n in range(MAX_CACHED_SESSIONS + 5):
        loaded(cache, f"s{n}", BlockSet())
        assert isinstance(cache.rendered(f"s{n}", None), str)
    assert isinstance(cache.lookup("s0"), NeedBlocks)
    assert isinstance(cache.lookup(f"s{MAX_CACHED_SESSIONS + 4}"), BlockSet)
    cache.clear()
    assert isinstance(cache.lookup(f"s{MAX_CACHED_SESSIONS + 4}"), NeedBlocks)
