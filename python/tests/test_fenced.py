"""Fenced writes on the application's own psycopg 3 connection (docs/semantics.md, "Fenced
writes"): ``lease.fenced(conn)`` before the writes, ``lease.done_in(conn, metadata)``, sync and
asyncio."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest
from support import PATIENCE, AsyncClients, Clients, Database, Proxy, Scenario

import accord


@pytest.fixture
def table(admin: Database, sc: Scenario) -> Iterator[str]:
    name = f"py_fenced_{sc.tag}"
    admin.execute(f"CREATE TABLE {name} (key text PRIMARY KEY, result text)")
    yield name
    admin.execute(f"DROP TABLE {name}")


def rows(admin: Database, table: str) -> list[str]:
    return [r[0] for r in admin.rows(f"SELECT key FROM {table} ORDER BY key")]


def run_raw(
    conn: psycopg.Connection[tuple[object, ...]], text: str, params: list[str | None]
) -> None:
    """Runs a statement a lease gave on a raw cursor, its refusal as accord's exception (what
    the helpers do, for a statement made while the lease was live)."""
    with conn.transaction(), psycopg.RawCursor(conn) as raw:
        try:
            raw.execute(text, params)
        except psycopg.Error as e:
            assert e.sqlstate is not None and e.diag.message_primary is not None
            raise accord._accord._fenced_refusal(
                "check_fence", e.sqlstate, e.diag.message_primary
            ) from e


def wait_status(lease: accord.Lease | accord.AsyncLease, want: str) -> None:
    deadline = time.monotonic() + PATIENCE  # a hang bound, not a timing assertion
    while lease.status != want:
        assert time.monotonic() < deadline, f"lease status {lease.status}, never {want}"
        time.sleep(0.01)


def test_fenced_write_commits_only_while_the_lease_is_live(
    clients: Clients, admin: Database, sc: Scenario, table: str
) -> None:
    a = clients("a")
    insert = f"INSERT INTO {table} VALUES (%s, 'ok')"
    with psycopg.connect(sc.url) as conn:
        live = a.acquire("live", ttl=60)
        with conn.transaction(), conn.cursor() as cur:
            live.fenced(cur)
            cur.execute(insert, ("live",))
        assert rows(admin, table) == ["live"]

        # A lease that ended after its statement was made: the server refuses it as LeaseLost
        # (naming key and fence), nothing is written; the helper refuses it here too.
        gone = a.acquire("gone", ttl=60)
        text, params = gone.fence_check_sql()
        assert params == [a.namespace, "gone", str(gone.fence)]
        gone.release()
        with pytest.raises(accord.LeaseLost, match=f"fence {gone.fence} .*'gone'"):
            run_raw(conn, text, params)
        with pytest.raises(accord.LeaseLost), conn.transaction():
            gone.fenced(conn)
            conn.execute(insert, ("gone",))
        assert rows(admin, table) == ["live"]
        with pytest.raises(accord.InvalidArgument, match="conn"):
            live.fenced(object())


def test_an_expired_lease_taken_over_is_refused(
    clients: Clients, proxy: Proxy, admin: Database, sc: Scenario, table: str
) -> None:
    # Its client cut off from the coordinator, the lease runs out unrenewed and another client
    # takes the key: the statement made while it was live is refused by the server (AC001,
    # "superseded"), as LeaseLost; the helper refuses it too (on the client's own deadline).
    a, b = clients("a", url=proxy.url, ttl=1), clients("b")
    lease = a.acquire("job", ttl=1)
    text, params = lease.fence_check_sql()
    proxy.set_cut(True)
    deadline = time.monotonic() + PATIENCE
    while admin.holder(a.namespace, "job") is not None:
        assert time.monotonic() < deadline, "the lease never expired on the server"
        time.sleep(0.05)
    newer = b.acquire("job", ttl=60)
    with psycopg.connect(sc.url) as conn:
        with pytest.raises(accord.LeaseLost, match=f"superseded by fence {newer.fence}"):
            run_raw(conn, text, params)
        with pytest.raises(accord.LeaseLost), conn.transaction():
            lease.fenced(conn)
            conn.execute(f"INSERT INTO {table} VALUES ('job', 'stale')")
    assert rows(admin, table) == []
    proxy.set_cut(False)


def test_done_in_commits_with_the_write_or_not_at_all(
    clients: Clients, admin: Database, sc: Scenario, table: str
) -> None:
    a, b = clients("a"), clients("b")
    insert = f"INSERT INTO {table} VALUES (%s, 'ok')"
    with psycopg.connect(sc.url) as conn:
        kept = a.acquire("kept", ttl=60)
        with conn.transaction(force_rollback=True):
            conn.execute(insert, ("kept",))
            assert kept.done_in(conn, {"r": 1}) == {"r": 1}
            # The server's refusal through the helper: the key is done in this transaction.
            with pytest.raises(accord.LeaseLost, match="the key is done"):
                kept.fenced(conn)
        assert rows(admin, table) == []
        assert kept.status == "held"
        assert b.try_acquire("kept") is None
        kept.renew()

        job = a.acquire("job", ttl=60)
        with conn.transaction():
            job.fenced(conn)
            conn.execute(insert, ("job",))
            job.done_in(conn)
        wait_status(job, "done")
        assert rows(admin, table) == ["job"]
        with pytest.raises(accord.Done):
            b.try_acquire("job")
        assert kept.status == "held"
        assert a.stats().lost == 0


async def test_async_fenced_and_done_in(
    aclients: AsyncClients, admin: Database, sc: Scenario, table: str
) -> None:
    a = await aclients("a")
    async with await psycopg.AsyncConnection.connect(sc.url) as conn:
        job = await a.acquire("job", ttl=60)
        gone = await a.acquire("gone", ttl=60)
        await gone.release()
        async with conn.transaction(), conn.cursor() as cur:
            await job.fenced(cur)
            await cur.execute(f"INSERT INTO {table} VALUES ('job', 'ok')")
            assert await job.done_in(cur, {"r": 2}) == {"r": 2}
        wait_status(job, "done")
        with pytest.raises(accord.LeaseLost):
            async with conn.transaction():
                await gone.fenced(conn)
        assert rows(admin, table) == ["job"]
        with pytest.raises(accord.InvalidArgument, match="AsyncConnection"):
            await (await a.acquire("other", ttl=60)).fenced(object())


def test_the_embedded_store_has_no_fenced_writes(sc: Scenario) -> None:
    with accord.Client.connect("memory:py-fenced") as c:
        lease = c.try_acquire("k")
        assert lease is not None
        with psycopg.connect(sc.url) as conn:
            with pytest.raises(accord.Unsupported, match="PostgreSQL"):
                lease.fenced(conn)
            with pytest.raises(accord.Unsupported, match="PostgreSQL"):
                lease.done_in(conn)
