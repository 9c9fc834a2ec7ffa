"""A real nats-server (JetStream, file store) shared by the tests of a module; each test
gets its own prefix (stream and buckets of its own), so tests never see each other."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.support.nats_cluster import NatsCluster

_prefixes = itertools.count(1)


@pytest.fixture(scope="module")
def nats_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("nats")


@pytest.fixture
async def nats_server(nats_root: Path) -> AsyncIterator[NatsCluster]:
    cluster = await NatsCluster.start(nats_root / f"run{next(_prefixes)}", 1)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=[1, 3], ids=["1-server", "3-servers"])
async def nats_servers(
    request: pytest.FixtureRequest, nats_root: Path
) -> AsyncIterator[NatsCluster]:
    """One nats-server, then a cluster of three (R3): for the checks that depend on
    what JetStream writes to disk."""
    cluster = await NatsCluster.start(nats_root / f"run{next(_prefixes)}", request.param)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def prefix() -> Iterator[str]:
    yield f"t{next(_prefixes)}"
