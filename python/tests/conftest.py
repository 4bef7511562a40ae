"""Fixtures: the test database, fresh namespaces and channels, clients that close themselves,
and a proxy for network faults (the helpers are in support.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from support import URL, AsyncClients, Clients, Database, Proxy, Scenario


@pytest.fixture(scope="session")
def url() -> str:
    if not URL:
        pytest.skip(
            "ACCORD_TEST_DATABASE_URL is not set: run `make test-python` "
            "(or scripts/with-postgres.sh make test-python)"
        )
    return URL


@pytest.fixture(scope="session")
def admin(url: str) -> Iterator[Database]:
    db = Database(url)
    yield db
    db.close()


@pytest.fixture
def sc(url: str) -> Scenario:
    return Scenario(url)


@pytest.fixture
def clients(sc: Scenario) -> Iterator[Clients]:
    made = Clients(sc)
    yield made
    made.close()


@pytest.fixture
async def aclients(sc: Scenario) -> AsyncIterator[AsyncClients]:
    made = AsyncClients(sc)
    yield made
    await made.close()


@pytest.fixture
def proxy(url: str) -> Iterator[Proxy]:
    p = Proxy(url)
    yield p
    p.close()
