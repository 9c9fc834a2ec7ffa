"""Turn grouping and tool-pair-safe windows (pure), with hypothesis property tests."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from session_server.values.events import SessionEvent, ToolCall
from session_server.values.turns import (
    Turn,
    TurnPosition,
    assign_turns,
    drop_orphan_results,
    group_turns,
    number_turns,
    safe_window,
    safe_window_start,
    splits_tool_pair,
    stored_calls_needed,
    tail_window,
    widening_turns,
    window_last_n,
)


def U(text: str = "u") -> SessionEvent:
    return SessionEvent(action="user_message", content=text)


def A(text: str = "a") -> SessionEvent:
    return SessionEvent(action="agent_message", content=text)


def S(text: str = "s") -> SessionEvent:
    return SessionEvent(action="system_instruction", content=text)


def C(*ids: str) -> SessionEvent:
    return SessionEvent(action="tool_call_request", tool_calls=[ToolCall(i, "f") for i in ids])


def R(call_id: str) -> SessionEvent:
    return SessionEvent(action="tool_result", content="r", tool_call_id=call_id, tool_name="f")


def contents(events: Sequence[SessionEvent]) -> list[str]:
    return [e.content for e in events]


# --------------------------------------------------------------------------------------
# Independent checkers and brute-force oracles (written from the rules, not the code)
# --------------------------------------------------------------------------------------


def answering_call(events: Sequence[SessionEvent], j: int) -> int | None:
    """The index of the call the result ``events[j]`` pairs with: the latest call with
    its id before it, else the first one after it in the same turn (brute force)."""
    call_id = events[j].tool_call_id
    turns, _ = assign_turns(events)

    def has_id(i: int) -> bool:
        ev = events[i]
        return ev.action == "tool_call_request" and any(
            c.id == call_id for c in ev.tool_calls or ()
        )

    before = [i for i in range(j) if has_id(i)]
    if before:
        return before[-1]
    after = [i for i in range(j + 1, len(events)) if has_id(i) and turns[i] == turns[j]]
    return after[0] if after else None


def broken_pairs(events: Sequence[SessionEvent], start: int, end: int) -> list[tuple[int, int]]:
    """(call, result) pairs of ``events`` with exactly one side inside ``[start, end)``."""
    out = []
    for j, ev in enumerate(events):
        if ev.action == "tool_result":
            i = answering_call(events, j)
            if i is not None and (start <= i < end) != (start <= j < end):
                out.append((i, j))
    return out


def oracle_start(events: Sequence[SessionEvent], start: int) -> int:
    n = len(events)
    start = max(0, min(start, n))
    if start == 0 or not broken_pairs(events, start, n):
        return start
    candidates = [
        i
        for i, e in enumerate(events)
        if e.action == "user_message" and not broken_pairs(events, i, n)
    ] + [0]
    return min(candidates, key=lambda c: (abs(c - start), c))


def oracle_window(events: Sequence[SessionEvent], start: int, end: int) -> tuple[int, int]:
    n = len(events)
    start, end = max(0, min(start, n)), max(0, min(end, n))
    if not broken_pairs(events, start, end):
        return start, end
    bounds = {i for i, e in enumerate(events) if e.action == "user_message"} | {0, n}
    best, best_cost = (0, n), None
    for s in sorted(bounds | {start}):
        for e in sorted(bounds | {end}):
            if e <= s or broken_pairs(events, s, e):
                continue
            cost = (abs(s - start) + abs(e - end), -(e - s))
            if best_cost is None or cost < best_cost:
                best, best_cost = (s, e), cost
    return best


# --------------------------------------------------------------------------------------
# Strategies: random event sequences
# --------------------------------------------------------------------------------------


@st.composite
def well_formed_events(draw: st.DrawFn) -> list[SessionEvent]:
    """Unique call ids; every result comes after its call (possibly turns later); some
    calls stay unanswered; some results answer no call at all (orphans)."""
    events: list[SessionEvent] = []
    pending: list[str] = []
    next_id = 0
    for k in range(draw(st.integers(0, 40))):
        kind = draw(
            st.sampled_from(["user", "user", "agent", "system", "call", "result", "orphan"])
        )
        if kind == "user":
            events.append(U(f"u{k}"))
        elif kind == "agent":
            events.append(A(f"a{k}"))
        elif kind == "system":
            events.append(S(f"s{k}"))
        elif kind == "call":
            ids = [f"c{next_id + j}" for j in range(draw(st.integers(1, 3)))]
            next_id += len(ids)
            pending.extend(ids)
            events.append(C(*ids))
        elif kind == "result" and pending:
            call_id = pending.pop(draw(st.integers(0, len(pending) - 1)))
            events.append(R(call_id))
        elif kind == "orphan":
            events.append(R(f"orphan{k}"))
    return events


@st.composite
def arbitrary_events(draw: st.DrawFn) -> list[SessionEvent]:
    """Anything goes: reused call ids, results before their calls, duplicate results."""
    pool = st.sampled_from(["a", "b", "c", "d"])
    out: list[SessionEvent] = []
    for _ in range(draw(st.integers(0, 30))):
        kind = draw(st.sampled_from(["user", "agent", "call", "result"]))
        if kind == "user":
            out.append(U())
        elif kind == "agent":
            out.append(A())
        elif kind == "call":
            out.append(C(*draw(st.lists(pool, min_size=1, max_size=3, unique=True))))
        else:
            out.append(R(draw(pool)))
    return out


# --------------------------------------------------------------------------------------
# Turn grouping
# --------------------------------------------------------------------------------------


class TestGroupTurns:
    def test_empty(self) -> None:
        assert group_turns([]) == []

    def test_a_turn_starts_at_each_user_message(self) -> None:
        events = [U("u1"), A("a1"), U("u2"), A("a2"), A("a3")]
        turns = group_turns(events)
        assert [t.number for t in turns] == [1, 2]
        assert [contents(t.events) for t in turns] == [["u1", "a1"], ["u2", "a2", "a3"]]
        assert all(isinstance(t, Turn) for t in turns)

    def test_events_before_the_first_user_message_are_turn_zero(self) -> None:
        turns = group_turns([S("sys"), A("hello"), U("u1"), A("a1")])
        assert [(t.number, contents(t.events)) for t in turns] == [
            (0, ["sys", "hello"]),
            (1, ["u1", "a1"]),
        ]

    def test_tool_call_and_result_in_the_same_turn(self) -> None:
        events = [U("u1"), C("x"), R("x"), A("done")]
        assert [len(t.events) for t in group_turns(events)] == [4]

    def test_late_tool_result_belongs_to_the_turn_of_its_call(self) -> None:
        late = R("x")
        events = [U("u1"), C("x"), U("u2"), A("a2"), late, A("a2b")]
        turns = group_turns(events)
        assert [t.number for t in turns] == [1, 2]
        assert turns[0].events == [events[0], events[1], late]
        assert contents(turns[1].events) == ["u2", "a2", "a2b"]

    def test_result_of_a_parallel_call_arriving_two_turns_later(self) -> None:
        events = [U(), C("x", "y"), R("x"), U(), U(), R("y")]
        numbers, added = assign_turns(events)
        assert numbers == [1, 1, 1, 2, 3, 1]
        assert added == {"x": 1, "y": 1}

    def test_orphan_result_stays_in_the_current_turn(self) -> None:
        numbers, _ = assign_turns([U(), A(), U(), R("unknown")])
        assert numbers == [1, 1, 2, 2]

    def test_assign_turns_continues_a_log(self) -> None:
        numbers, added = assign_turns(
            [R("old"), A(), U(), C("new"), R("new")], last_turn=7, call_turns={"old": 5}
        )
        assert numbers == [5, 7, 8, 8, 8]
        assert added == {"new": 8}

    def test_assign_turns_does_not_mutate_call_turns(self) -> None:
        known = {"old": 1}
        assign_turns([U(), C("new")], call_turns=known)
        assert known == {"old": 1}

    @given(well_formed_events())
    def test_grouping_properties(self, events: list[SessionEvent]) -> None:
        turns = group_turns(events)
        numbers = [t.number for t in turns]
        assert numbers == sorted(set(numbers))
        # Every event exactly once, in its original order within its turn.
        position = {id(e): i for i, e in enumerate(events)}
        flat = [e for t in turns for e in t.events]
        assert sorted(position[id(e)] for e in flat) == list(range(len(events)))
        for t in turns:
            idx = [position[id(e)] for e in t.events]
            assert idx == sorted(idx)
            users = [e for e in t.events if e.action == "user_message"]
            if t.number == 0:
                assert users == []
            else:
                assert len(users) == 1 and t.events[0] is users[0]
        assert len([t for t in turns if t.number > 0]) == sum(
            e.action == "user_message" for e in events
        )
        # A result is in the turn of its call.
        turn_of = {id(e): t.number for t in turns for e in t.events}
        call_turn = {c.id: turn_of[id(e)] for e in events for c in e.tool_calls or ()}
        for e in events:
            if e.action == "tool_result" and e.tool_call_id in call_turn:
                assert turn_of[id(e)] == call_turn[e.tool_call_id]


# --------------------------------------------------------------------------------------
# Tool-pair-safe windows
# --------------------------------------------------------------------------------------


class TestSplitsToolPair:
    def test_examples(self) -> None:
        events = [U(), C("x"), R("x"), A()]
        assert not splits_tool_pair(events, 0)
        assert not splits_tool_pair(events, 1)
        assert splits_tool_pair(events, 2)  # result without its call
        assert splits_tool_pair(events, 0, 2)  # call without its result
        assert not splits_tool_pair(events, 0, 3)
        assert not splits_tool_pair(events, 3)
        assert not splits_tool_pair(events, 4)

    def test_orphans_split_nothing(self) -> None:
        assert not splits_tool_pair([R("nowhere"), U()], 0, 1)


class TestWindowLastN:
    def test_no_split_gives_exactly_the_last_n(self) -> None:
        events = [U("u1"), A("a1"), U("u2"), C("x"), R("x"), A("a2")]
        assert window_last_n(events, 1) == events[5:]
        assert window_last_n(events, 3) == events[3:]  # starts at the call: both inside
        assert window_last_n(events, 5) == events[1:]  # mid-turn start is fine

    def test_never_starts_with_a_result_whose_call_is_outside(self) -> None:
        events = [U("u1"), A("a1"), U("u2"), C("x"), R("x"), A("a2")]
        window = window_last_n(events, 2)  # the cut falls between the call and its result
        assert window == events[2:]  # moved back to the turn boundary
        assert window[0].action == "user_message"

    def test_moves_to_the_nearest_boundary_forward_when_closer(self) -> None:
        events = [U("u1"), C("x"), A("a"), A("b"), A("c"), R("x"), U("u2"), A("a2")]
        # Cut at index 4 (between call 1 and result 5): u2 at 6 is nearer than u1 at 0.
        assert window_last_n(events, 4) == events[6:]

    def test_ties_go_to_the_earlier_boundary(self) -> None:
        events = [U("u1"), C("x"), R("x"), U("u2"), A("a2")]
        # Cut at 2: boundary 0 is 2 away, boundary 3 is 1 away: the nearer one wins.
        assert window_last_n(events, 3) == events[3:]
        events = [U("u1"), C("x"), A(), R("x"), U("u2")]
        # Cut at 2: 0 is 2 away, 4 is 2 away: the earlier one (more context) wins.
        assert window_last_n(events, 3) == events

    def test_late_result_pulls_the_window_back_to_its_call(self) -> None:
        events = [U("u1"), C("x"), U("u2"), A("a2"), R("x"), A("a3")]
        window = window_last_n(events, 3)
        assert window == events  # u2 would still separate x from its late result

    def test_pending_call_at_the_end_is_fine(self) -> None:
        events = [U("u1"), A(), U("u2"), C("x")]
        assert window_last_n(events, 1) == events[3:]

    def test_orphan_result_at_the_start_is_kept(self) -> None:
        # Its call is in no loaded event: nothing to keep together (drop_orphan_results
        # removes it before a provider sees it).
        events = [R("gone"), U(), A()]
        assert window_last_n(events, 3) == events
        assert drop_orphan_results(window_last_n(events, 3)) == events[1:]

    def test_n_zero_negative_and_large(self) -> None:
        events = [U(), A()]
        assert window_last_n(events, 0) == []
        assert window_last_n(events, -3) == []
        assert window_last_n(events, 2) == events
        assert window_last_n(events, 100) == events
        assert window_last_n([], 5) == []

    def test_returns_a_new_list(self) -> None:
        events = [U(), A()]
        assert window_last_n(events, 5) is not events

    @settings(max_examples=300)
    @given(well_formed_events(), st.integers(-2, 45))
    def test_window_invariants(self, events: list[SessionEvent], n: int) -> None:
        window = window_last_n(events, n)
        total = len(events)
        start = total - len(window)
        assert window == events[start:]  # a suffix
        if n <= 0:
            assert window == []
            return
        if total:
            assert window  # never empty when there is something to show
        if n >= total:
            assert window == events
        # The window separates no call from its results...
        assert broken_pairs(events, start, total) == []
        calls_in_window = {c.id for e in window for c in e.tool_calls or ()}
        all_calls = {c.id for e in events for c in e.tool_calls or ()}
        for e in window:
            if e.action == "tool_result" and e.tool_call_id in all_calls:
                assert e.tool_call_id in calls_in_window
        # ...in particular it never starts with a result whose call is outside...
        if window and window[0].action == "tool_result":
            assert window[0].tool_call_id not in all_calls
        # ...nor ends with a call whose results are outside.
        if window and window[-1].action == "tool_call_request":
            ids = {c.id for c in window[-1].tool_calls or ()}
            assert not any(
                e.action == "tool_result" and e.tool_call_id in ids for e in events[:start]
            )
        # It is the plain last n unless that split a pair; then it starts at a boundary.
        naive = max(0, total - n)
        if not broken_pairs(events, naive, total):
            assert start == naive
        else:
            assert start == 0 or events[start].action == "user_message"
        assert start == oracle_start(events, naive)

    @settings(max_examples=300)
    @given(arbitrary_events(), st.integers(0, 35))
    def test_window_invariants_on_arbitrary_sequences(
        self, events: list[SessionEvent], n: int
    ) -> None:
        window = window_last_n(events, n)
        start = len(events) - len(window)
        assert window == events[start:]
        assert not splits_tool_pair(events, start)
        assert start == oracle_start(events, max(0, len(events) - n))


class TestSafeWindowStart:
    def test_start_is_clamped(self) -> None:
        events = [U(), A()]
        assert safe_window_start(events, -5) == 0
        assert safe_window_start(events, 99) == 2

    def test_unsplit_start_is_kept_even_mid_turn(self) -> None:
        events = [U(), A(), A(), U()]
        assert safe_window_start(events, 2) == 2

    def test_falls_back_to_zero(self) -> None:
        events = [C("x"), A(), R("x")]
        assert safe_window_start(events, 1) == 0

    @settings(max_examples=300)
    @given(arbitrary_events(), st.integers(-2, 35))
    def test_matches_the_brute_force_rule(self, events: list[SessionEvent], start: int) -> None:
        got = safe_window_start(events, start)
        assert got == oracle_start(events, start)
        assert not splits_tool_pair(events, got)


class TestSafeWindow:
    def test_unsplit_bounds_are_kept(self) -> None:
        events = [U(), C("x"), R("x"), U(), A()]
        assert safe_window(events, 0, 3) == (0, 3)
        assert safe_window(events, 3, 5) == (3, 5)

    def test_split_end_moves(self) -> None:
        events = [U(), C("x"), R("x"), U(), A()]
        assert safe_window(events, 0, 2) == (0, 3)

    def test_split_start_moves(self) -> None:
        events = [U(), C("x"), R("x"), U(), A()]
        assert safe_window(events, 2, 5) == (3, 5)

    def test_bounds_are_clamped(self) -> None:
        events = [U(), A()]
        assert safe_window(events, -3, 10) == (0, 2)

    def test_empty_events(self) -> None:
        assert safe_window([], 0, 0) == (0, 0)

    @settings(max_examples=300)
    @given(arbitrary_events(), st.integers(-2, 35), st.integers(-2, 35))
    def test_never_splits_and_matches_the_brute_force_rule(
        self, events: list[SessionEvent], start: int, end: int
    ) -> None:
        s, e = safe_window(events, start, end)
        assert 0 <= s <= len(events) and 0 <= e <= len(events)
        assert not splits_tool_pair(events, s, e)
        assert (s, e) == oracle_window(events, start, end)

    @settings(max_examples=200)
    @given(well_formed_events(), st.integers(0, 40), st.integers(0, 40))
    def test_well_formed_never_splits(self, events: list[SessionEvent], a: int, b: int) -> None:
        start, end = min(a, b), max(a, b)
        s, e = safe_window(events, start, end)
        assert broken_pairs(events, s, e) == []
        if not broken_pairs(events, min(start, len(events)), min(end, len(events))):
            assert (s, e) == (min(start, len(events)), min(end, len(events)))


class TestDropOrphanResults:
    def test_drops_results_without_their_call(self) -> None:
        events = [R("gone"), U(), C("x"), R("x"), R("also-gone"), A()]
        assert drop_orphan_results(events) == [events[1], events[2], events[3], events[5]]

    def test_keeps_everything_else(self) -> None:
        events = [U(), C("x"), A(), R("x")]
        assert drop_orphan_results(events) == events

    def test_a_result_never_pairs_with_a_later_turns_call(self) -> None:
        # Turn 1's result, then turn 2 reusing its id: the result has no call before it
        # and none in its own turn, so it is an orphan here, not turn 2's answer.
        events = [R("call_1"), A("a1"), U("q2"), C("call_1"), U("q3")]
        assert drop_orphan_results(events) == events[1:]

    def test_a_result_stored_before_its_call_in_the_same_turn_is_kept(self) -> None:
        events = [U(), R("x"), C("x"), A()]
        assert drop_orphan_results(events) == events

    @given(well_formed_events())
    def test_no_orphans_remain(self, events: list[SessionEvent]) -> None:
        kept = drop_orphan_results(events)
        calls = {c.id for e in kept for c in e.tool_calls or ()}
        assert all(e.tool_call_id in calls for e in kept if e.action == "tool_result")
        assert [e for e in events if e.action != "tool_result"] == [
            e for e in kept if e.action != "tool_result"
        ]


class TestReusedIdsAcrossACut:
    """A window cut between turn 1's call and result, turn 2 reusing the id (crashed)."""

    def stored(self) -> list[SessionEvent]:
        log = [U("q1"), C("call_1"), R("call_1"), A("a1"), U("q2"), C("call_1"), U("q3")]
        turns, _ = assign_turns(log)
        return [
            msgspec.structs.replace(e, seq=i + 1, turn=t)
            for i, (e, t) in enumerate(zip(log, turns, strict=True))
        ]

    def test_the_window_widens_back_to_the_results_turn(self) -> None:
        events = self.stored()
        assert widening_turns(events[2:]) == {1}
        window = tail_window(events, 5, complete=True)
        assert window is not None
        assert contents(window) == contents(events)  # widened to q1, the pair kept

    def test_the_results_call_is_never_taken_from_another_turn(self) -> None:
        window = self.stored()[2:]  # loaded from turn 1's result on
        # Before the fix the result paired with turn 2's call_1, which kept them together.
        assert not splits_tool_pair(window, 1)
        assert safe_window_start(window, 1) == 1


def test_large_history_is_fast() -> None:
    """10 000 events with late results: the windows are computed in one pass, not n^2."""
    import time

    events: list[SessionEvent] = []
    for t in range(2000):
        events += [U(), C(f"c{t}"), U(), R(f"c{t}"), A()]
    t0 = time.perf_counter()
    window_last_n(events, 3)
    safe_window(events, 3, 5000)
    assert time.perf_counter() - t0 < 2.0


# --------------------------------------------------------------------------------------
# The stored calls an append reads (storage reads only these)
# --------------------------------------------------------------------------------------

STORED = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]),
    st.builds(TurnPosition, st.integers(1, 9), st.integers(1, 40)),
)


@given(arbitrary_events(), STORED, st.builds(TurnPosition, st.integers(0, 9), st.integers(0, 40)))
@settings(max_examples=300)
def test_numbering_with_only_the_needed_stored_calls_is_the_same(
    events: list[SessionEvent], stored: dict[str, TurnPosition], last: TurnPosition
) -> None:
    """``number_turns`` gives the same positions and added calls whether it is given
    every stored call or only those ``stored_calls_needed`` names."""
    needed = {k: v for k, v in stored.items() if k in stored_calls_needed(events)}
    assert number_turns(events, first_seq=41, last=last, calls=needed) == number_turns(
        events, first_seq=41, last=last, calls=stored
    )


def test_results_after_their_call_in_the_batch_need_no_stored_call() -> None:
    assert stored_calls_needed([U(), C("a"), R("a"), R("b"), C("b"), R("b")]) == ["b"]
