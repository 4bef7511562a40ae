"""O1: accord behind a real PgBouncer (scripts/with-postgres.sh starts one in front of the test
database). Transaction pooling carries commands but not LISTEN: listen there fails naming
listen_url, and with listen_url naming the server directly a client hears again. The embedded
store has no listening connection: listen_url is refused there."""

from __future__ import annotations

import os

import psycopg
import pytest
from support import AsyncClients, Clients, Scenario

import accord
from accord import Message


@pytest.fixture
def pooler() -> str:
    """The PgBouncer transaction pool. The test cluster of `make test` always has one: there, a
    missing one fails the test rather than skipping it."""
    url = os.environ.get("ACCORD_TEST_PGBOUNCER_TRANSACTION_URL")
    if not url:
        if os.environ.get("ACCORD_TEST_PGDATA"):
            pytest.fail("the test cluster has no PgBouncer: install it (apt-get install pgbouncer)")
        pytest.skip("no PgBouncer (ACCORD_TEST_PGBOUNCER_TRANSACTION_URL is not set)")
    # PgBouncer before 1.21 leaves every statement prepared through this pool on its one server
    # connection, and the names (s1, s2, …) start over in every process: what an earlier
    # process left there ("prepared statement s8 already exists") is cleared first.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DEALLOCATE ALL")
    return url


def test_o1_transaction_pooling_needs_listen_url(
    clients: Clients, sc: Scenario, pooler: str
) -> None:
    ch = sc.channel("ch")
    deaf = clients("deaf", pooler)
    with pytest.raises(accord.Connection, match="listen_url"):
        deaf.listen(ch)
    # Commands through the pooler, LISTEN straight to the server.
    listener = clients("listener", pooler, listen_url=sc.url)
    sender = clients("sender", pooler)
    with listener.listen(ch) as sub:
        sender.notify(ch, "through the pooler")
        assert sub.recv(timeout=10) == Message(ch, "through the pooler")


async def test_o1_transaction_pooling_needs_listen_url_async(
    aclients: AsyncClients, sc: Scenario, pooler: str
) -> None:
    ch = sc.channel("ch")
    deaf = await aclients("deaf", pooler)
    with pytest.raises(accord.Connection, match="listen_url"):
        await deaf.listen(ch)
    listener = await aclients("listener", pooler, listen_url=sc.url)
    sender = await aclients("sender", pooler)
    async with listener.listen(ch) as sub:
        await sender.notify(ch, "through the pooler")
        assert await sub.recv(timeout=10) == Message(ch, "through the pooler")


def test_listen_url_is_refused_on_the_embedded_store() -> None:
    with pytest.raises(accord.InvalidArgument, match="listen_url"):
        accord.Client.connect("memory:py-listen-url", listen_url="postgres://localhost/x")


async def test_listen_url_is_refused_on_the_embedded_store_async() -> None:
    with pytest.raises(accord.InvalidArgument, match="listen_url"):
        await accord.AsyncClient.connect(
            "memory:py-listen-url", listen_url="postgres://localhost/x"
        )
