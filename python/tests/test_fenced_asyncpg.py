"""Fenced writes on an asyncpg connection (docs/semantics.md, "Fenced writes"): the core's
statements with each parameter bound by its type; ``await lease.fenced(conn)`` before the
writes, ``await lease.done_in(conn, metadata)``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
from support import PATIENCE, AsyncClients, Database, Proxy, Scenario
from test_fenced import rows, wait_status

import accord


@pytest.fixture
def table(admin: Database, sc: Scenario) -> Iterator[str]:
    name = f"pg_fenced_{sc.tag}"
    admin.execute(f"CREATE TABLE {name} (key text PRIMARY KEY, result text)")
    yield name
    admin.execute(f"DROP TABLE {name}")


@pytest.fixture
async def conn(sc: Scenario, table: str) -> AsyncIterator[Any]:
    # After `table`, so closed before it is dropped: a failed test's open transaction would
    # hold the table.
    c = await asyncpg.connect(sc.url)
    yield c
    await c.close()


async def test_asyncpg_fenced_write_commits_only_while_the_lease_is_live(
    aclients: AsyncClients, admin: Database, conn: Any, table: str
) -> None:
    a = await aclients("a")
    insert = f"INSERT INTO {table} VALUES ($1, 'ok')"
    live = await a.acquire("live", ttl=60)
    async with conn.transaction():
        await live.fenced(conn)
        await conn.execute(insert, "live")
    assert rows(admin, table) == ["live"]

    # The parameters by type, as asyncpg binds them: the fence is an int.
    gone = await a.acquire("gone", ttl=60)
    text, params = gone.fence_check_sql(typed=True)
    assert params == [a.namespace, "gone", gone.fence]
    await gone.release()
    with pytest.raises(asyncpg.PostgresError) as refused:
        await conn.fetchval(text, *params)
    assert refused.value.sqlstate == "AC001"
    with pytest.raises(accord.LeaseLost):
        async with conn.transaction():
            await gone.fenced(conn)
            await conn.execute(insert, "gone")
    assert rows(admin, table) == ["live"]
    with pytest.raises(accord.InvalidArgument, match="asyncpg"):
        await live.fenced(object())


async def test_asyncpg_an_expired_lease_taken_over_is_refused(
    aclients: AsyncClients, proxy: Proxy, admin: Database, conn: Any, table: str
) -> None:
    # Its client cut off from the coordinator, the lease runs out unrenewed and another client
    # takes the key: the server refuses the statement made while it was live ("superseded"),
    # and the helper refuses the write as LeaseLost.
    a, b = await aclients("a", url=proxy.url, ttl=1), await aclients("b")
    lease = await a.acquire("job", ttl=1)
    text, params = lease.fence_check_sql(typed=True)
    proxy.set_cut(True)
    deadline = time.monotonic() + PATIENCE
    while admin.holder(a.namespace, "job") is not None:
        assert time.monotonic() < deadline, "the lease never expired on the server"
        await asyncio.sleep(0.05)
    newer = await b.acquire("job", ttl=60)
    with pytest.raises(asyncpg.PostgresError) as refused:
        await conn.fetchval(text, *params)
    assert f"superseded by fence {newer.fence}" in refused.value.message
    with pytest.raises(accord.LeaseLost):
        async with conn.transaction():
            await lease.fenced(conn)
            await conn.execute(f"INSERT INTO {table} VALUES ('job', 'stale')")
    assert rows(admin, table) == []
    proxy.set_cut(False)


async def test_asyncpg_done_in_commits_with_the_write_or_not_at_all(
    aclients: AsyncClients, admin: Database, conn: Any, table: str
) -> None:
    a, b = await aclients("a"), await aclients("b")
    insert = f"INSERT INTO {table} VALUES ($1, 'ok')"
    kept = await a.acquire("kept", ttl=60)
    tx = conn.transaction()
    await tx.start()
    await conn.execute(insert, "kept")
    assert await kept.done_in(conn, {"r": 1}) == {"r": 1}
    # The server's refusal through the helper: the key is done in this transaction.
    with pytest.raises(accord.LeaseLost, match="the key is done"):
        await kept.fenced(conn)
    await tx.rollback()
    assert rows(admin, table) == []
    assert kept.status == "held"
    assert await b.try_acquire("kept") is None
    await kept.renew()

    job = await a.acquire("job", ttl=60)
    async with conn.transaction():
        await job.fenced(conn)
        await conn.execute(insert, "job")
        assert await job.done_in(conn) == {}
    wait_status(job, "done")
    assert rows(admin, table) == ["job"]
    with pytest.raises(accord.Done):
        await b.try_acquire("job")
    assert kept.status == "held"
    assert a.stats().lost == 0


async def test_asyncpg_a_pool_connection_takes_fenced_writes(
    aclients: AsyncClients, admin: Database, sc: Scenario, table: str
) -> None:
    # What a pool's acquire() gives is a proxy (PoolConnectionProxy) of a connection the pool
    # keeps: the helpers take it as the connection it stands for.
    a = await aclients("a")
    pool = await asyncpg.create_pool(sc.url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            assert isinstance(conn, asyncpg.pool.PoolConnectionProxy)
            job = await a.acquire("pooled", ttl=60)
            async with conn.transaction():
                await job.fenced(conn)
                await conn.execute(f"INSERT INTO {table} VALUES ('pooled', 'ok')")
                assert await job.done_in(conn, {"via": "pool"}) == {"via": "pool"}
            wait_status(job, "done")
            gone = await a.acquire("gone", ttl=60)
            await gone.release()
            with pytest.raises(accord.LeaseLost, match="released"):
                async with conn.transaction():
                    await gone.fenced(conn)
    finally:
        await pool.close()
    assert rows(admin, table) == ["pooled"]
