"""``answers.answer_reservation``: the answer room a frame reserves before it runs."""

from __future__ import annotations

from session_server.rpc.protocol import Frame, Invalid, Request
from session_server.rpc.table import BUILTIN_METHODS
from session_server.server.answers import FRAME_BOUNDED_METHODS, answer_reservation
from session_server.values.errors import InvalidRequestError

LIMIT = 16 * 1024 * 1024


def frame(*methods: str, batch: bool = False, notification: bool = False) -> Frame:
    items: list[Request | Invalid] = [
        Request(m, {}, id=None if notification else i, notification=notification)
        for i, m in enumerate(methods)
    ]
    return Frame(items, batch=batch)


def test_a_read_that_may_answer_max_answer_bytes_reserves_it() -> None:
    for method in ("events.load", "context.build", "memory.view", "export.session"):
        assert answer_reservation(frame(method), LIMIT) == LIMIT


def test_writes_and_small_reads_reserve_nothing() -> None:
    for method in ("turn.persist", "events.append", "session.get", "events.subscribe"):
        assert answer_reservation(frame(method), LIMIT) == 0


def test_a_batch_reserves_once_if_any_item_may_answer_much() -> None:
    assert answer_reservation(frame("turn.persist", "session.get", batch=True), LIMIT) == 0
    mixed = frame("turn.persist", "events.load", "events.load", batch=True)
    assert answer_reservation(mixed, LIMIT) == LIMIT  # a batch's answers share the bound


def test_a_notification_reserves_as_its_request_would() -> None:
    assert answer_reservation(frame("events.load", notification=True), LIMIT) == LIMIT


def test_invalid_items_and_unknown_methods() -> None:
    invalid = Frame([Invalid(1, InvalidRequestError("Invalid Request"))])
    assert answer_reservation(invalid, LIMIT) == 0
    assert answer_reservation(frame("no.such.method"), LIMIT) == LIMIT  # safe by default


def test_every_frame_bounded_method_is_in_the_table() -> None:
    assert FRAME_BOUNDED_METHODS.issubset(BUILTIN_METHODS)
