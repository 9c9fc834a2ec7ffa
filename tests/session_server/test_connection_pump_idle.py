"""The idle timeout's watchdog decision (``connection_pump.idle_check_at``), pure."""

from __future__ import annotations

from session_server.connection_pump import idle_check_at


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
