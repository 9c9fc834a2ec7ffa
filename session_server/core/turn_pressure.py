"""The token arithmetic of a turn's pressure check (pure): the turn's own counts, the
server's count of the context once the turn is added, and whether a summary could take
anything (``AgentCore.plan_turn`` and the compaction decisions use them).

They count with ``get_counter()`` on the caller's thread, the event loop: the actor has
the encoding loaded on a worker thread before any of its decisions runs (``loaded_counter``
in ``runtime.actor``), so this never waits for the load.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..compaction.config import StrategyConfig
from ..compaction.memory import memory_block
from ..values.events import SessionEvent
from ..values.recent import SessionView
from ..values.records import record_memory
from ..values.tokens import MESSAGE_OVERHEAD, get_counter
from .decisions import PreparedTurn
from .needs import Known

__all__ = ["context_tokens", "highest_turn", "summarizable", "turn_tokens"]


def highest_turn(events: Sequence[SessionEvent]) -> int:
    """The highest turn number among ``events`` (0 without one)."""
    return max((e.turn for e in events if e.turn is not None), default=0)


def summarizable(view: SessionView, config: StrategyConfig, new_turns: int) -> bool:
    """Whether a summary could take anything: more turns not yet summarised (counting
    the ``new_turns`` about to be written) than the raw tail keeps."""
    last_turn = highest_turn(view.events)
    memory = None if view.record is None else record_memory(view.record.data)
    summarised = 0 if memory is None else int(memory["tail_start_turn"]) - 1
    return last_turn + new_turns - summarised > config.raw_tail_turns


def turn_tokens(turn: PreparedTurn, known: Known) -> list[int]:
    """The counts of the turn's events (counted once per request, on first need)."""
    if turn.tokens is not None:
        return turn.tokens
    if known.tokens is None:
        counter = get_counter()
        known.tokens = [counter.count_event(e) for e in turn.events]
    return known.tokens


def context_tokens(
    view: SessionView, turn: PreparedTurn, config: StrategyConfig, known: Known
) -> int:
    """The server's count of the default context once ``turn`` is added: the stored
    counts of the window's events (from the record's summary on), the memory block, the
    turn's messages and its instructions."""
    from_seq = None if view.record is None else view.record.from_seq
    stored = sum(
        e.token_count or 0
        for e in view.events
        if e.action != "compaction" and (from_seq is None or e.seq >= from_seq)
    )
    counter = get_counter()
    system = list(turn.instructions)
    memory = None if view.record is None else record_memory(view.record.data)
    if memory is not None:
        system.append(
            memory_block(
                memory["episodic"],
                memory["semantic"],
                max_episodic_items=config.max_episodic_items,
                max_semantic_items=config.max_semantic_items,
                tail_start_turn=memory["tail_start_turn"],
            )
        )
    # Remembered per text (``count_instruction``): the same prompt comes with every turn.
    instructions = sum(MESSAGE_OVERHEAD + counter.count_instruction(text) for text in system)
    return stored + sum(turn_tokens(turn, known)) + instructions
