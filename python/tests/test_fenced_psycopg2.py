"""Fenced writes on a psycopg2 connection (docs/semantics.md, "Fenced writes"): the statements
in DB-API's ``%s`` style, made by the core; ``lease.fenced(conn)`` before the writes,
``lease.done_in(conn, metadata)``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest
from support import PATIENCE, Clients, Database, Proxy, Scenario
from test_fenced import rows, wait_status

import accord


@pytest.fixture
def table(admin: Database, sc: Scenario) -> Iterator[str]:
    name = f"py2_fenced_{sc.tag}"
    admin.execute(f"CREATE TABLE {name} (key text PRIMARY KEY, result text)")
    yield name
    admin.execute(f"DROP TABLE {name}")


@pytest.fixture
def conn(sc: Scenario, table: str) -> Iterator[Any]:
    # After `table`, so closed before it is dropped: a failed test's open transaction would
    # hold the table.
    c = psycopg2.connect(sc.url)
    yield c
    c.close()


def refusal(conn: Any, text: str, params: list[str | None]) -> tuple[str, str]:
    """Runs a statement a lease gave, as it is, on psycopg2; the server's SQLSTATE and message
    for its refusal."""
    with pytest.raises(psycopg2.Error) as refused, conn, conn.cursor() as cur:
        cur.execute(text, params)
    return refused.value.pgcode, refused.value.diag.message_primary


def test_psycopg2_fenced_write_commits_only_while_the_lease_is_live(
    clients: Clients, admin: Database, conn: Any, table: str
) -> None:
    a = clients("a")
    insert = f"INSERT INTO {table} VALUES (%s, 'ok')"
    live = a.acquire("live", ttl=60)
    # `with conn` is one transaction: committed at the end of the block, rolled back on error.
    with conn, conn.cursor() as cur:
        live.fenced(cur)
        cur.execute(insert, ("live",))
    assert rows(admin, table) == ["live"]

    # The statement in psycopg2's style: `%s` placeholders, made by the core.
    gone = a.acquire("gone", ttl=60)
    text, params = gone.fence_check_sql(placeholders="%s")
    assert "%s::bigint" in text and "$" not in text, text
    assert params == [a.namespace, "gone", str(gone.fence)]
    gone.release()
    code, message = refusal(conn, text, params)
    assert code == "AC001" and f"fence {gone.fence} " in message and "'gone'" in message
    with pytest.raises(accord.LeaseLost), conn, conn.cursor() as cur:
        gone.fenced(conn)
        cur.execute(insert, ("gone",))
    assert rows(admin, table) == ["live"]
    with pytest.raises(accord.InvalidArgument, match="psycopg2"):
        live.fenced(object())
    with pytest.raises(accord.InvalidArgument, match="placeholders"):
        live.fence_check_sql(placeholders="?")  # type: ignore[call-overload]


def test_psycopg2_an_expired_lease_taken_over_is_refused(
    clients: Clients, proxy: Proxy, admin: Database, conn: Any, table: str
) -> None:
    # Its client cut off from the coordinator, the lease runs out unrenewed and another client
    # takes the key: the server refuses the statement made while it was live ("superseded"),
    # and the helper refuses the write as LeaseLost.
    a, b = clients("a", url=proxy.url, ttl=1), clients("b")
    lease = a.acquire("job", ttl=1)
    text, params = lease.fence_check_sql(placeholders="%s")
    proxy.set_cut(True)
    deadline = time.monotonic() + PATIENCE
    while admin.holder(a.namespace, "job") is not None:
        assert time.monotonic() < deadline, "the lease never expired on the server"
        time.sleep(0.05)
    newer = b.acquire("job", ttl=60)
    code, message = refusal(conn, text, params)
    assert code == "AC001" and f"superseded by fence {newer.fence}" in message, message
    with pytest.raises(accord.LeaseLost), conn, conn.cursor() as cur:
        lease.fenced(cur)
        cur.execute(f"INSERT INTO {table} VALUES ('job', 'stale')")
    assert rows(admin, table) == []
    proxy.set_cut(False)


def test_psycopg2_done_in_commits_with_the_write_or_not_at_all(
    clients: Clients, admin: Database, conn: Any, table: str
) -> None:
    a, b = clients("a"), clients("b")
    insert = f"INSERT INTO {table} VALUES (%s, 'ok')"
    kept = a.acquire("kept", ttl=60)
    with conn.cursor() as cur:
        cur.execute(insert, ("kept",))
        assert kept.done_in(cur, {"r": 1}) == {"r": 1}
        # The server's refusal through the helper: the key is done in this transaction.
        with pytest.raises(accord.LeaseLost, match="the key is done"):
            kept.fenced(cur)
    conn.rollback()
    assert rows(admin, table) == []
    assert kept.status == "held"
    assert b.try_acquire("kept") is None
    kept.renew()

    job = a.acquire("job", ttl=60)
    with conn, conn.cursor() as cur:
        job.fenced(cur)
        cur.execute(insert, ("job",))
        assert job.done_in(conn, {"r": "%s"}) == {"r": "%s"}
    wait_status(job, "done")
    assert rows(admin, table) == ["job"]
    with pytest.raises(accord.Done):
        b.try_acquire("job")
    assert kept.status == "held"
    assert a.stats().lost == 0
