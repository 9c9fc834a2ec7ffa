"""Runs every vendored SDK session test twice: against a ``session-server`` subprocess on
127.0.0.1 (``remote``) and against an in-process registry (``local``); marks the tests
``harness.NOT_APPLICABLE`` lists as strict expected failures, with their reason."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from agents import set_tracing_disabled

from session_server.runtime.registry import ActorRegistry
from tests.support.server import ServerProcess

from .harness import MODES, NOT_APPLICABLE, Backend, use_backend

set_tracing_disabled(True)  # no trace export: the only network is 127.0.0.1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if item.path.parent != here or not isinstance(item, pytest.Function):
            continue
        why = NOT_APPLICABLE.get(item.originalname)
        if why is not None and item.callspec.params["sdk_backend"] in why.modes:
            item.add_marker(
                pytest.mark.xfail(
                    strict=True,
                    raises=why.raises,
                    run=why.run,
                    reason=f"not applicable: {why.reason}",
                )
            )


@pytest.fixture(scope="session")
def sdk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One real server process for the remote runs of the folder."""
    with ServerProcess(tmp_path_factory.mktemp("sdk-memory-server")) as proc:
        yield proc


@pytest.fixture(autouse=True, params=MODES)
async def sdk_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """Where ``session_under_test`` builds this test's sessions."""
    if request.param == "remote":
        server: ServerProcess = request.getfixturevalue("sdk_server")
        backend = Backend("remote", url=server.url)
        use_backend(backend)
        try:
            yield backend
        finally:
            use_backend(None)
            await backend.aclose()
        return
    async with ActorRegistry(tmp_path / "memory") as registry:
        backend = Backend("local", registry=registry)
        use_backend(backend)
        try:
            yield backend
        finally:
            use_backend(None)
            await backend.aclose()
