"""``set_strategy`` takes the session first, as every other client method (issue 33,
finding 10); the old order still works, told apart by type, with a DeprecationWarning."""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from session_server.client import SessionClient
from session_server.client.session_client import strategy_args
from session_server.client.sync_client import SyncSessionClient
from tests.support.server import RunningServer, running_server

AGENT = "strategies"
COMPACT: dict[str, Any] = {"mode": "compact"}


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        (("s", COMPACT), {}, ("s", COMPACT, False)),
        ((None, COMPACT), {}, (None, COMPACT, False)),
        (("s", None), {}, ("s", None, False)),
        ((None, None), {}, (None, None, False)),
        ((None,), {}, (None, None, False)),
        (("s",), {"strategy": COMPACT}, ("s", COMPACT, False)),
        ((), {"session_id": "s", "strategy": COMPACT}, ("s", COMPACT, False)),
        ((), {"strategy": COMPACT}, (None, COMPACT, False)),
        # the old order
        ((COMPACT, "s"), {}, ("s", COMPACT, True)),
        ((COMPACT, None), {}, (None, COMPACT, True)),
        ((None, "s"), {}, ("s", None, True)),
        ((COMPACT,), {}, (None, COMPACT, True)),
        ((COMPACT,), {"session_id": "s"}, ("s", COMPACT, True)),
        ((None,), {"session_id": "s"}, ("s", None, True)),
    ],
)
def test_arguments_in_either_order(
    args: tuple[Any, ...], kwargs: dict[str, Any], expected: tuple[Any, ...]
) -> None:
    assert strategy_args(args, kwargs) == expected


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("s",), {}, "strategy is missing"),
        ((), {}, "strategy is missing"),
        (("s", COMPACT, "x"), {}, "takes two arguments"),
        (("s",), {"strategy": COMPACT, "session_id": "t"}, "takes two arguments"),
        ((), {"strategy": COMPACT, "sid": "s"}, "unknown: sid"),
        ((3, COMPACT), {}, "session_id: expected a string or None, not int"),
        (("s", ["compact"]), {}, "strategy: expected a dict or None, not list"),
    ],
)
def test_wrong_arguments_are_refused_naming_them(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        strategy_args(args, kwargs)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory") as running:
        yield running


async def test_session_first_sets_the_session_strategy_without_warning(
    server: RunningServer,
) -> None:
    async with SessionClient(server.url, AGENT) as client:
        sid = await client.create_session()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            answer = await client.set_strategy(sid, COMPACT)
        assert answer["session"]["mode"] == "compact"
        assert (await client.set_strategy(None, {"mode": "summarize"}))["agent"]["mode"] == (
            "summarize"
        )
        strategies = await client.get_strategy(sid)
        assert strategies["session"]["mode"] == "compact"
        assert strategies["agent"]["mode"] == "summarize"


async def test_the_old_order_still_works_and_warns(server: RunningServer) -> None:
    async with SessionClient(server.url, AGENT) as client:
        sid = await client.create_session()
        with pytest.warns(DeprecationWarning, match=r"set_strategy\(session_id, strategy\)"):
            answer = await client.set_strategy(COMPACT, sid)  # type: ignore[call-overload]
        assert answer["session"]["mode"] == "compact"
        assert (await client.get_strategy(sid))["session"]["mode"] == "compact"


async def test_the_sync_client_takes_the_same_order(server: RunningServer) -> None:
    client = SyncSessionClient(server.url, AGENT)
    try:
        sid = await client.acall("create_session")
        answer = await client.acall("set_strategy", sid, COMPACT)
        assert answer["session"]["mode"] == "compact"
    finally:
        await client.aclose()
