"""The idle timeout's watchdog decisions (``connection_pump.idle_check_at``,
``subscriptions_moved``), pure."""

from __future__ import annotations

from session_server.server.connection_pump import idle_check_at, subscriptions_moved


def test_a_frame_since_the_last_look_moves_the_next_one_to_idle_after_it() -> None:
    # Last frame at 10, idle 5: at 12 the connection is not idle yet; look at 15.
    assert idle_check_at(12.0, 10.0, 5.0, busy=False) == 15.0
    assert idle_check_at(12.0, 10.0, 5.0, busy=True) == 15.0


def test_idle_and_nothing_in_flight_closes() -> None:
    assert idle_check_at(15.0, 10.0, 5.0, busy=False) is None
    assert idle_check_at(40.0, 10.0, 5.0, busy=False) is None


def test_a_busy_connection_is_looked_at_again_a_whole_idle_later() -> None:
    # A request, an answer or a subscription in flight: never closed for idleness.
    assert idle_check_at(15.0, 10.0, 5.0, busy=True) == 20.0
    assert idle_check_at(40.0, 10.0, 5.0, busy=True) == 45.0


def test_a_subscription_that_delivered_events_since_the_last_look_moved() -> None:
    assert subscriptions_moved({"s": 3}, {"s": 5})
    assert subscriptions_moved({"s": 3, "t": 1}, {"s": 3, "t": 2})


def test_quiet_subscriptions_did_not_move() -> None:
    assert not subscriptions_moved({"s": 3}, {"s": 3})
    assert not subscriptions_moved({"s": 3, "t": 0}, {"s": 3})
    assert not subscriptions_moved({}, {})
    assert not subscriptions_moved(None, {})


def test_a_subscription_new_since_the_last_look_counts_as_moved() -> None:
    # It came with a frame; the next look compares it with a mark of its own.
    assert subscriptions_moved(None, {"s": 0})
    assert subscriptions_moved({"s": 3}, {"s": 3, "t": 0})
