"""Which lost calls may be sent again: every method of the server's table is classified."""

from __future__ import annotations

import pytest

from session_server.client.replay import KEYED_WRITES, NOT_REPLAYED, REPLAYED, replay_safe
from session_server.rpc.table import ROWS


def test_every_method_of_the_server_is_classified_once() -> None:
    names = {row.name for row in ROWS}
    classified = [*REPLAYED, *KEYED_WRITES, *NOT_REPLAYED]
    assert len(classified) == len(set(classified))
    assert names == set(classified)


def test_every_method_that_changes_nothing_is_replayed() -> None:
    for row in ROWS:
        if row.scope == "read":
            assert replay_safe(row.name, {}), row.name


@pytest.mark.parametrize("method", ["events.append", "turn.persist"])
def test_a_keyed_write_is_replayed_and_one_without_a_key_is_not(method: str) -> None:
    assert replay_safe(method, {"session_id": "s", "idempotency_key": "k"})
    assert not replay_safe(method, {"session_id": "s"})
    assert not replay_safe(method, {"session_id": "s", "idempotency_key": None})


def test_session_create_is_replayed_only_as_get_or_create() -> None:
    assert replay_safe("session.create", {"session_id": "s", "if_exists": "return"})
    assert not replay_safe("session.create", {"session_id": "s"})
    assert not replay_safe("session.create", {"if_exists": "return"})
    assert not replay_safe("session.create", None)


@pytest.mark.parametrize("method", sorted(NOT_REPLAYED - {"session.create"}))
def test_writes_whose_second_run_differs_are_not_replayed(method: str) -> None:
    assert not replay_safe(method, {"session_id": "s", "event_id": "e", "idempotency_key": "k"})


def test_a_method_the_client_does_not_know_is_not_replayed() -> None:
    assert not replay_safe("memory.blocks.set", {"label": "x"})


def test_a_stream_append_is_replayed_only_with_after_cursor() -> None:
    assert replay_safe("stream.append", {"stream_id": "s", "generation": 1, "after_cursor": 0})
    assert not replay_safe("stream.append", {"stream_id": "s", "generation": 1})
    assert not replay_safe("stream.open", {"session_id": "s"})
    assert not replay_safe("stream.close", {"stream_id": "s", "generation": 1})
