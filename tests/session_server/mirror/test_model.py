"""What the mirror files of a session contain (pure)."""

from __future__ import annotations

from session_server.mirror.model import (
    AppendItems,
    AppendTraces,
    ArchiveTurns,
    MirrorModel,
    render_mirror,
)

from .factory import agent, committed, compaction, user


def test_items_are_appended_once_even_without_ids() -> None:
    first = {
        "strategy": "summarize",
        "turn_ids": [1],
        "episodic": [{"summary": "s"}],
        "semantic": ["junk"],
    }
    second = {
        "strategy": "summarize",
        "turn_ids": [],
        "episodic": [{"summary": "s"}, {"summary": "t"}],
    }
    events = committed([user("a"), agent("b"), compaction(first), user("c"), compaction(second)])
    rendered = render_mirror(events)
    assert rendered.episodic == [{"summary": "s"}, {"summary": "t"}]
    assert rendered.semantic == []
    assert [ln["turn_id"] for ln in rendered.archive] == [
        "turn_0001",
        "turn_0001",
    ]  # int turn ids accepted
    assert [ln["content"] for ln in rendered.active] == ["c"]
    assert rendered.model.epoch_id == 3 and rendered.model.last_seq == 5


def test_step_operations() -> None:
    model = MirrorModel()
    evs = committed(
        [
            user("a"),
            compaction(
                {
                    "strategy": "summarize",
                    "turn_ids": ["turn_0001"],
                    "episodic": [{"id": 1}],
                    "semantic": [{"id": 2}],
                }
            ),
        ]
    )
    ops = model.step(evs[0])
    assert len(ops) == 1 and isinstance(ops[0], AppendTraces)
    ops = model.step(evs[1])
    assert ops == [
        ArchiveTurns(frozenset({"turn_0001"})),
        AppendItems("episodic", [{"id": 1}]),
        AppendItems("semantic", [{"id": 2}]),
    ]
    assert model.last_compaction_ts == evs[1].timestamp / 1000
    assert model.step(committed([compaction({"strategy": "compact"})], start=3)[0]) == []
