"""How a session's usage is kept in the rows its turn writes anyway (pure).

A turn's append writes its events and updates its session row; usage is stored in those
two rows, so keeping it costs no page of its own:

- the turn's last event carries the turn's usage (``TurnRecord``, a compact JSON array in
  the ``events.usage`` column): what the inspector's chart and a window that does not
  fall on whole UTC days read;
- the session row carries ``SessionUsage`` (``sessions.usage``): the running totals per
  model, and the totals per model of the UTC day of its latest turn (the open day).

When a turn falls on another day than the open one, the open day's totals are closed:
written once to the per-day tables (``session_days`` and the agent's ``usage_days``),
and the turn opens its day. A per-day answer is then the closed days plus each session's
open day (``add_turn`` says what to close). Counts are ``[input, output, cached input,
cache writes, reasoning, turns]``; the model ``""`` stands for a turn that named none.
"""

from __future__ import annotations

from typing import Final

import msgspec

from .usage import UsageTotals

__all__ = [
    "DAY_MS",
    "Counts",
    "SessionUsage",
    "TurnRecord",
    "add_turn",
    "counts_of",
    "decode_session_usage",
    "decode_turn",
    "encode_session_usage",
    "encode_turn",
    "totals_of",
]

DAY_MS: Final = 86_400_000

Counts = list[int]
"""``[input, output, cached input, cache writes, reasoning, turns]``."""


class SessionUsage(msgspec.Struct, omit_defaults=True):
    """``sessions.usage``: totals per model (``t``), the open UTC day (``d``, days since
    1970-01-01) and its totals per model (``p``)."""

    t: dict[str, Counts] = msgspec.field(default_factory=dict)
    d: int | None = None
    p: dict[str, Counts] = msgspec.field(default_factory=dict)


class TurnRecord(msgspec.Struct, array_like=True):
    """``events.usage`` of a turn's last event: its five counts and model (``None``:
    none named), as one JSON array. The turn's time is the event's ``created_at``."""

    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    model: str | None = None

    def totals(self) -> UsageTotals:
        return UsageTotals(
            self.input_tokens,
            self.output_tokens,
            self.cached_input_tokens,
            self.cache_write_tokens,
            self.reasoning_tokens,
            1,
            self.model,
        )


class SessionTotals(msgspec.Struct):
    """``SessionUsage`` read for its totals only (the open day skipped unparsed)."""

    t: dict[str, Counts] = msgspec.field(default_factory=dict)


class SessionOpenDay(msgspec.Struct):
    """``SessionUsage`` read for its open day only (the totals skipped unparsed)."""

    d: int | None = None
    p: dict[str, Counts] = msgspec.field(default_factory=dict)


_SESSION_DECODER: Final = msgspec.json.Decoder(SessionUsage)
TOTALS_DECODER: Final = msgspec.json.Decoder(SessionTotals)
OPEN_DAY_DECODER: Final = msgspec.json.Decoder(SessionOpenDay)
_TURN_DECODER: Final = msgspec.json.Decoder(TurnRecord)
_ENCODER: Final = msgspec.json.Encoder()


def counts_of(usage: UsageTotals) -> Counts:
    return [*usage.counts(), usage.turns]


def totals_of(counts: Counts, model: str | None) -> UsageTotals:
    """``UsageTotals`` of stored counts (model ``""`` read as ``None``)."""
    return UsageTotals(
        counts[0], counts[1], counts[2], counts[3], counts[4], counts[5], model or None
    )


def _add(into: dict[str, Counts], model: str, counts: Counts) -> None:
    have = into.get(model)
    if have is None:
        into[model] = list(counts)
    else:
        for i, v in enumerate(counts):
            have[i] += v


def add_turn(
    state: SessionUsage | None, usage: UsageTotals, day: int
) -> tuple[SessionUsage, int | None, dict[str, Counts]]:
    """The session's usage after a turn on ``day`` (``state`` is updated in place when
    given); and the day to close with its totals per model (``None, {}`` when the turn
    falls on the open day, or none is open)."""
    state = SessionUsage() if state is None else state
    counts = counts_of(usage)
    model = usage.model or ""
    _add(state.t, model, counts)
    closed_day: int | None = None
    closed: dict[str, Counts] = {}
    if state.d is not None and state.d != day:
        closed_day, closed, state.p = state.d, state.p, {}
    state.d = day
    _add(state.p, model, counts)
    return state, closed_day, closed


def encode_session_usage(state: SessionUsage) -> str:
    return _ENCODER.encode(state).decode()


def decode_session_usage(text: str | bytes | None) -> SessionUsage | None:
    return None if text is None else _SESSION_DECODER.decode(text)


def encode_turn(usage: UsageTotals) -> str:
    record = TurnRecord(*usage.counts(), usage.model)
    return _ENCODER.encode(record).decode()


def decode_turn(text: str | bytes) -> TurnRecord:
    return _TURN_DECODER.decode(text)
