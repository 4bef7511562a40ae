"""O1: accord behind a real PgBouncer (scripts/with-postgres.sh starts one in front of the test
database). Transaction pooling carries commands but not LISTEN: listen there fails naming
listen_url, and with listen_url naming the server directly a client hears again. Clients there
send their statements unprepared (prepare_statements=False). The embedded store has no
listening connection: listen_url is refused there."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from support import AsyncClients, Clients, Database, Scenario

import accord
from accord import Message


class Pool:
    """PgBouncer's transaction pool, and a schema of one test's own: accord's statements name it,
    so that any of them left prepared on the pool's server connection can be told from others'."""

    def __init__(self, url: str, tag: str) -> None:
        self.url = url
        self.schema = f"py_o1_{tag}"

    def options(self) -> dict[str, Any]:
        """A client of the pool: in the schema, its statements unprepared (PgBouncer before 1.21
        cannot carry prepared ones in this mode)."""
        return {"schema": self.schema, "prepare_statements": False}

    def left_prepared(self) -> int:
        """How many statements of the schema are prepared on the pool's one server connection
        (which a session through the pool sees)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
                (f"%{self.schema}%",),
            ).fetchone()
        assert row is not None
        count: int = row[0]
        return count


@pytest.fixture
def pool(admin: Database, sc: Scenario) -> Iterator[Pool]:
    """The transaction pool. The test cluster of `make test` always has one: there, a missing one
    fails the test rather than skipping it. Named before `clients` in a test's arguments, so that
    the schema is dropped after the clients closed."""
    url = os.environ.get("ACCORD_TEST_PGBOUNCER_TRANSACTION_URL")
    if not url:
        if os.environ.get("ACCORD_TEST_PGDATA"):
            pytest.fail("the test cluster has no PgBouncer: install it (apt-get install pgbouncer)")
        pytest.skip("no PgBouncer (ACCORD_TEST_PGBOUNCER_TRANSACTION_URL is not set)")
    made = Pool(url, sc.tag)
    yield made
    admin.execute(f"DROP SCHEMA IF EXISTS {made.schema} CASCADE")


def test_o1_transaction_pooling_needs_listen_url(
    pool: Pool, clients: Clients, sc: Scenario
) -> None:
    ch = sc.channel("ch")
    deaf = clients("deaf", pool.url, **pool.options())
    with pytest.raises(accord.Connection, match="listen_url"):
        deaf.listen(ch)
    # Commands through the pooler, LISTEN straight to the server.
    listener = clients("listener", pool.url, listen_url=sc.url, **pool.options())
    sender = clients("sender", pool.url, **pool.options())
    with listener.listen(ch) as sub:
        sender.notify(ch, "through the pooler")
        assert sub.recv(timeout=10) == Message(ch, "through the pooler")
    # prepare_statements reached the core: nothing of the schema is prepared there while the
    # clients are open.
    assert pool.left_prepared() == 0


async def test_o1_transaction_pooling_needs_listen_url_async(
    pool: Pool, aclients: AsyncClients, sc: Scenario
) -> None:
    ch = sc.channel("ch")
    deaf = await aclients("deaf", pool.url, **pool.options())
    with pytest.raises(accord.Connection, match="listen_url"):
        await deaf.listen(ch)
    listener = await aclients("listener", pool.url, listen_url=sc.url, **pool.options())
    sender = await aclients("sender", pool.url, **pool.options())
    async with listener.listen(ch) as sub:
        await sender.notify(ch, "through the pooler")
        assert await sub.recv(timeout=10) == Message(ch, "through the pooler")
    assert pool.left_prepared() == 0


def test_listen_url_is_refused_on_the_embedded_store() -> None:
    with pytest.raises(accord.InvalidArgument, match="listen_url"):
        accord.Client.connect("memory:py-listen-url", listen_url="postgres://localhost/x")


async def test_listen_url_is_refused_on_the_embedded_store_async() -> None:
    with pytest.raises(accord.InvalidArgument, match="listen_url"):
        await accord.AsyncClient.connect(
            "memory:py-listen-url", listen_url="postgres://localhost/x"
        )
