"""The notify/listen scenarios N1–N6 (docs/semantics.md) through the sync API (Client.notify,
Client.listen, Subscription)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from support import Clients, Database, Scenario

import accord
from accord import Message, Reconnected


def test_n1_from_clients_sql_and_triggers(clients: Clients, admin: Database, sc: Scenario) -> None:
    o1, o2 = clients("o1"), clients("o2")
    jobs = sc.channel("jobs")
    with o1.listen(jobs) as sub:
        assert sub.channels == [jobs]
        o2.notify(jobs, "p1")
        assert sub.recv(timeout=5) == Message(jobs, "p1")
        admin.execute("SELECT pg_notify(%s, 'p2')", jobs)
        event = sub.recv(timeout=5)
        assert isinstance(event, Message)
        assert (event.channel, event.payload) == (jobs, "p2")
        table = f"t_{sc.tag}"
        admin.execute(
            f"""CREATE TABLE {table} (v text);
            CREATE FUNCTION {table}_notify() RETURNS trigger AS $$
            BEGIN PERFORM pg_notify('{jobs}', NEW.v); RETURN NEW; END $$ LANGUAGE plpgsql;
            CREATE TRIGGER {table}_trigger AFTER INSERT ON {table}
              FOR EACH ROW EXECUTE FUNCTION {table}_notify();"""
        )
        try:
            admin.execute(f"INSERT INTO {table} VALUES ('from a trigger')")
            assert sub.recv(timeout=5) == Message(jobs, "from a trigger")
        finally:
            admin.execute(f"DROP TABLE {table}; DROP FUNCTION {table}_notify()")
        o2.notify(jobs)  # an empty payload
        assert sub.recv(timeout=5) == Message(jobs, "")


def test_n2_nothing_sent_after_listen_is_missed(clients: Clients, sc: Scenario) -> None:
    o1, o2 = clients("o1"), clients("o2")
    a, b = sc.channel("a"), sc.channel("b")
    for round in range(20):
        sub = o1.listen(a, b, a)
        assert sorted(sub.channels) == sorted([a, b])
        o2.notify(a if round % 2 else b, str(round))
        event = sub.recv(timeout=5)
        assert event == Message(a if round % 2 else b, str(round))
        sub.close()
        assert sub.recv() is None  # closed: no more events
    with o1.listen(a, b) as sub:
        o2.notify(a, "to a")
        o2.notify(b, "to b")
        assert [sub.recv(timeout=5), sub.recv(timeout=5)] == [
            Message(a, "to a"),
            Message(b, "to b"),
        ]


def test_n3_a_burst_neither_stalls_nor_reorders(
    clients: Clients, admin: Database, sc: Scenario
) -> None:
    o1, o2 = clients("o1"), clients("o2")
    burst = sc.channel("burst")
    with o1.listen(burst) as sub:
        # 10,000 in one transaction, from SQL, while the client keeps working.
        admin.execute("SELECT pg_notify(%s, i::text) FROM generate_series(1, 10000) AS i", burst)
        lease = o1.acquire("during-the-burst", ttl=60, timeout=10)
        lease.release()
        received = [sub.recv(timeout=10) for _ in range(10000)]
        assert received == [Message(burst, str(i)) for i in range(1, 10001)]

        # And 2,000 sent one by one by another client, while reading.
        def send() -> None:
            for i in range(2000):
                o2.notify(burst, str(i))

        sender = threading.Thread(target=send)
        sender.start()
        received = [sub.recv(timeout=10) for _ in range(2000)]
        sender.join()
        assert received == [Message(burst, str(i)) for i in range(2000)]


def test_n4_payload_limit_and_channel_quoting(clients: Clients, sc: Scenario) -> None:
    o1, o2 = clients("o1"), clients("o2")
    plain = sc.channel("plain")
    with pytest.raises(accord.InvalidArgument, match="payload"):
        o2.notify(plain, "x" * 8000)
    with pytest.raises(accord.InvalidArgument, match="channel"):
        o2.notify("c" * 64, "x")
    with pytest.raises(accord.InvalidArgument, match="channel"):
        o1.listen("")
    with pytest.raises(accord.InvalidArgument):
        o1.listen()
    names = [
        f'with "quotes" {sc.tag}',
        f"with spaces; and semicolons {sc.tag}",
        f"ünïcödé ✓ {sc.tag}",
        f'x"; NOTIFY injected; --{sc.tag}',
    ]
    with o1.listen(*names) as sub:
        for name in names:
            o2.notify(name, "p")
            assert sub.recv(timeout=5) == Message(name, "p")
        o2.notify(names[0], "y" * 7000)  # under the limit
        assert sub.recv(timeout=5) == Message(names[0], "y" * 7000)


def test_n5_reconnects_and_unlistens(clients: Clients, admin: Database, sc: Scenario) -> None:
    o1, o2 = clients("o1"), clients("o2")
    ch = sc.channel("ch")
    sub = o1.listen(ch)
    assert admin.terminate(sc.app_name("o1")) > 0
    events: list[Any] = []
    deadline = time.monotonic() + 20
    while Reconnected() not in events:
        assert time.monotonic() < deadline, f"no Reconnected, got {events}"
        events.append(sub.recv(timeout=20))
    assert events[-1] == Reconnected()
    o2.notify(ch, "after")
    assert sub.recv(timeout=5) == Message(ch, "after")

    # Closing stops delivery and releases the LISTEN (as the server reports it).
    assert ch in o1._listening_channels()
    sub.close()
    assert sub.closed
    assert sub.recv(timeout=1) is None
    assert ch not in o1._listening_channels()
    # Dropping a subscription UNLISTENs too (in the background); a channel another
    # subscription still needs stays.
    other, shared = sc.channel("other"), sc.channel("shared")
    keeper = o1.listen(shared)
    dropped = o1.listen(other, shared)
    assert {other, shared} <= set(o1._listening_channels())
    del dropped
    deadline = time.monotonic() + 5
    while other in o1._listening_channels():
        assert time.monotonic() < deadline, "a dropped subscription kept its LISTEN"
        time.sleep(0.05)
    assert shared in o1._listening_channels()
    o2.notify(shared, "still")
    assert keeper.recv(timeout=5) == Message(shared, "still")
    keeper.close()


def test_n6_close_ends_waits_and_subscriptions(clients: Clients, sc: Scenario) -> None:
    o1, o2 = clients("o1"), clients("o2")
    held = o1.acquire("a", ttl=60)
    sub = o2.listen(sc.channel("ch"))
    outcomes: dict[str, BaseException] = {}

    def wait_acquire() -> None:
        try:
            o2.acquire("a", ttl=60)
        except BaseException as e:
            outcomes["acquire"] = e

    def read() -> None:
        try:
            for _ in sub:
                pass
        except BaseException as e:
            outcomes["read"] = e

    threads = [threading.Thread(target=wait_acquire), threading.Thread(target=read)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    started = time.monotonic()
    o2.close()
    for t in threads:
        t.join(10)
        assert not t.is_alive(), "a wait hung after close"
    assert time.monotonic() - started < 5
    assert isinstance(outcomes["acquire"], accord.Closed)
    assert isinstance(outcomes["read"], accord.Closed)
    assert o2.closed
    with pytest.raises(accord.Closed):
        o2.try_acquire("b")
    with pytest.raises(accord.Closed):
        sub.recv(timeout=1)
    o2.close()  # idempotent
    held.release()
