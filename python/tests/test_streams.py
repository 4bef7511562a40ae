"""Durable streams (docs/semantics.md D1-D5) through the sync and asyncio APIs: publish and
publish_many, subscribe from "earliest", "latest", a seq or a named consumer's ack, retention
and Trimmed, payloads up to 64 KiB (NUL included), the arguments' checks, and close and
Ctrl-C ending a waiting read."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import timedelta, timezone
from pathlib import Path

import pytest
from support import AsyncClients, Clients, Database, Scenario

import accord
from accord import StreamEvent

#: Every kind of character a payload may hold: NUL, accents, CJK, an emoji, SQL's quotes.
ODD = "nul\x00byte é中🦀 quote'\"\\$accord$"


def payloads(sub: accord.StreamSubscription, n: int) -> list[tuple[int, str]]:
    got = []
    for _ in range(n):
        event = sub.next(timeout=10)
        assert event is not None
        got.append((event.seq, event.payload))
    return got


def test_publish_replays_from_earliest_then_goes_live(
    clients: Clients, admin: Database, sc: Scenario
) -> None:
    pub, reader = clients("pub"), clients("reader")
    info = reader.stream_info("s")
    assert (info.stream, info.first_seq, info.last_seq) == ("s", 1, 0)  # never published
    assert (info.max_len, info.max_age) == (None, None)
    before = admin.now()
    assert [pub.publish("s", f"e{i}") for i in range(1, 4)] == [1, 2, 3]
    assert pub.publish_many("s", (f"e{i}" for i in range(4, 6))) == [4, 5]
    assert pub.publish_many("s", []) == []
    with reader.subscribe("s", after="earliest", page_size=2) as sub:
        assert (sub.stream, sub.consumer, sub.position) == ("s", None, 0)
        events = [sub.next(timeout=10) for _ in range(5)]
        assert [(e.seq, e.payload) for e in events if e] == [(i, f"e{i}") for i in range(1, 6)]
        first = events[0]
        assert first is not None and first.stream == "s"
        assert first.published_at.tzinfo is not None
        assert first.published_at.utcoffset() == timezone.utc.utcoffset(None)
        stamps = [e.published_at for e in events if e]
        assert stamps == sorted(stamps)
        assert before - timedelta(seconds=1) <= stamps[0] <= admin.now() + timedelta(seconds=1)
        assert sub.position == 5
        assert first == StreamEvent("s", 1, "e1", first.published_at)
        assert "seq=1" in repr(first) and "position=5" in repr(sub)
        # Live: published after the replay, from another thread while this one waits.
        threading.Timer(0.2, lambda: pub.publish("s", "live")).start()
        live = sub.next(timeout=10)
        assert live is not None and (live.seq, live.payload) == (6, "live")
        with pytest.raises(accord.Timeout, match="no event within"):
            sub.next(timeout=0.05)
    assert sub.closed
    assert sub.next() is None
    assert list(sub) == []
    info = reader.stream_info("s")
    assert (info.first_seq, info.last_seq) == (1, 6)


def test_latest_a_seek_and_iteration(clients: Clients) -> None:
    c = clients("c")
    c.publish_many("s", ["old1", "old2", "old3"])
    latest = c.subscribe("s")  # "latest" by default: nothing already stored
    after_one = c.subscribe("s", after=1)
    c.publish("s", "new")
    assert payloads(latest, 1) == [(4, "new")]
    assert payloads(after_one, 3) == [(2, "old2"), (3, "old3"), (4, "new")]
    c.publish("s", "newer")
    got = []
    for event in after_one:  # iteration ends once closed
        got.append(event.seq)
        after_one.close()
    assert got == [5]
    latest.close()


def test_a_named_consumer_resumes_after_its_ack(clients: Clients) -> None:
    c, other = clients("c"), clients("other")
    c.publish_many("s", [f"e{i}" for i in range(1, 6)])
    with c.subscribe("s", after="earliest", consumer="billing") as sub:
        assert sub.consumer == "billing"
        assert payloads(sub, 3) == [(1, "e1"), (2, "e2"), (3, "e3")]
        with pytest.raises(accord.InvalidArgument, match="seq"):
            sub.ack(4)  # not delivered yet
        sub.ack(2)
        sub.ack(1)  # positions only move forward
    # Another client (any process, any language) resumes after the ack; "earliest" applies
    # only to a consumer without a stored position.
    with other.subscribe("s", after="earliest", consumer="billing") as sub:
        assert sub.position == 2
        assert payloads(sub, 3) == [(3, "e3"), (4, "e4"), (5, "e5")]
        sub.ack(5)
    with other.subscribe("s", consumer="billing") as sub:
        assert sub.position == 5
        other.publish("s", "e6")
        assert payloads(sub, 1) == [(6, "e6")]
    # A seq always wins (a seek), and another consumer has a position of its own.
    with other.subscribe("s", after=0, consumer="billing") as sub:
        assert payloads(sub, 1) == [(1, "e1")]
    with other.subscribe("s", after="earliest", consumer="audit") as sub:
        assert payloads(sub, 1) == [(1, "e1")]
    with c.subscribe("s", after="earliest") as sub:
        assert payloads(sub, 1) == [(1, "e1")]
        with pytest.raises(accord.InvalidArgument, match="consumer"):
            sub.ack(1)


def test_retention_trims_and_trimmed_names_the_new_start(clients: Clients) -> None:
    c = clients("c")
    c.publish_many("s", [f"e{i}" for i in range(1, 6)])
    behind = c.subscribe("s", after="earliest", page_size=1)
    assert payloads(behind, 1) == [(1, "e1")]
    assert c.set_stream_retention("s", max_len=2) == 3
    info = c.stream_info("s")
    assert (info.first_seq, info.last_seq, info.max_len, info.max_age) == (4, 5, 2, None)
    # A reader that had not read the deleted events learns it, then its subscription ends.
    with pytest.raises(accord.Trimmed, match="starts at seq 4"):
        behind.next(timeout=10)
    assert behind.next(timeout=1) is None
    with pytest.raises(accord.Trimmed, match="starts at seq 4") as e:
        c.subscribe("s", after=1)
    assert e.value.code == "ACCORD_TRIMMED" and isinstance(e.value, accord.AccordError)
    # "earliest" starts where the stream starts now.
    with c.subscribe("s", after="earliest") as sub:
        assert payloads(sub, 2) == [(4, "e4"), (5, "e5")]
    assert c.set_stream_retention("s", max_age=3600.0) == 0
    info = c.stream_info("s")
    assert (info.max_len, info.max_age) == (None, 3600.0)
    assert c.set_stream_retention("s") == 0  # keep everything
    info = c.stream_info("s")
    assert (info.first_seq, info.max_len, info.max_age) == (4, None, None)


def test_payloads_up_to_64_kib_round_trip(clients: Clients) -> None:
    c = clients("c")
    assert accord.MAX_EVENT_BYTES == 65536
    exact = ODD + "x" * (accord.MAX_EVENT_BYTES - len(ODD.encode()))
    assert len(exact.encode()) == accord.MAX_EVENT_BYTES
    sent = [ODD, "", exact, "🦀" * (accord.MAX_EVENT_BYTES // 4)]
    assert c.publish_many("s", sent[:2]) == [1, 2]
    assert [c.publish("s", p) for p in sent[2:]] == [3, 4]
    with c.subscribe("s", after=0) as sub:
        assert [p for _, p in payloads(sub, 4)] == sent
    for too_big in [exact + "x", "é" * (accord.MAX_EVENT_BYTES // 2) + "x"]:
        with pytest.raises(accord.InvalidArgument, match="payload"):
            c.publish("s", too_big)
        with pytest.raises(accord.InvalidArgument, match="payload"):
            c.publish_many("s", ["fine", too_big])
    assert c.stream_info("s").last_seq == 4  # nothing of a refused publish_many was stored


def test_bad_arguments_name_their_field(clients: Clients) -> None:
    c = clients("c")
    cases: list[tuple[str, Callable[[], object]]] = [
        ("stream", lambda: c.publish("", "p")),
        ("stream", lambda: c.publish("s\x00", "p")),
        ("stream", lambda: c.publish("s" * (accord.MAX_NAME_BYTES + 1), "p")),
        ("stream", lambda: c.publish_many("", ["p"])),
        ("stream", lambda: c.subscribe("")),
        ("stream", lambda: c.stream_info("")),
        ("stream", lambda: c.set_stream_retention("", max_len=1)),
        ("consumer", lambda: c.subscribe("s", consumer="")),
        ("consumer", lambda: c.subscribe("s", consumer="c\x00")),
        ("page_size", lambda: c.subscribe("s", page_size=0)),
        ("page_size", lambda: c.subscribe("s", page_size=accord.MAX_PAGE_SIZE + 1)),
        ("after", lambda: c.subscribe("s", after=-1)),
        # Past the stream's last seq (0: never published to): an event that never existed.
        ("after", lambda: c.subscribe("s", after=10**12)),
        ("after", lambda: c.subscribe("s", after=1)),
        ("after", lambda: c.subscribe("s", after="oldest")),  # type: ignore[arg-type]
        ("max_len", lambda: c.set_stream_retention("s", max_len=0)),
        ("max_len", lambda: c.set_stream_retention("s", max_len=-1)),
        ("max_age", lambda: c.set_stream_retention("s", max_age=0.05)),
        ("max_age", lambda: c.set_stream_retention("s", max_age=-1.0)),
        ("timeout", lambda: c.subscribe("s").next(timeout=-1)),
        (
            "payloads",
            lambda: c.publish_many("s", ["p"] * (accord.MAX_PUBLISH_EVENTS + 1)),
        ),
    ]
    for field, call in cases:
        with pytest.raises(accord.InvalidArgument) as e:
            call()
        assert str(e.value).startswith(f"invalid {field}:"), (field, str(e.value))
    with pytest.raises(accord.InvalidArgument) as e:
        c.subscribe("s", page_size=accord.MAX_PAGE_SIZE + 1)
    assert str(e.value) == f"invalid page_size: 1001 is outside 1..={accord.MAX_PAGE_SIZE}"
    with pytest.raises(TypeError, match="after"):
        c.subscribe("s", after=True)
    with pytest.raises(TypeError, match="after"):
        c.subscribe("s", after=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="payloads"):
        c.publish_many("s", "one string")
    with pytest.raises(TypeError, match="payloads"):
        c.publish_many("s", [b"bytes"])  # type: ignore[list-item]
    assert c.stream_info("s").last_seq == 0


def test_close_ends_a_waiting_next(clients: Clients) -> None:
    c = clients("c")
    sub = c.subscribe("s")
    outcome: list[object] = []
    reader = threading.Thread(target=lambda: outcome.append(sub.next()))
    reader.start()
    time.sleep(0.2)
    sub.close()
    reader.join(10)
    assert not reader.is_alive() and outcome == [None]
    assert sub.closed
    sub.close()  # idempotent

    # Closing the client: a waiting read raises Closed.
    sub = c.subscribe("s")
    errors: list[BaseException] = []

    def iterate() -> None:
        try:
            for _ in sub:
                pass
        except BaseException as e:
            errors.append(e)

    reader = threading.Thread(target=iterate)
    reader.start()
    time.sleep(0.2)
    c.close()
    reader.join(10)
    assert not reader.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], accord.Closed)
    with pytest.raises(accord.Closed):
        c.publish("s", "p")


def test_ctrl_c_ends_a_waiting_next(sc: Scenario) -> None:
    code = """if True:
        import os, accord
        c = accord.Client.connect(os.environ["URL"], namespace=os.environ["NS"])
        sub = c.subscribe("never")
        print("reading", flush=True)
        for event in sub:
            print(event, flush=True)
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "URL": sc.url, "NS": sc.namespace},
        cwd=tempfile.gettempdir(),  # not python/: `accord` is the installed package
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "reading"
    time.sleep(0.3)  # most likely inside the read; any point holds
    proc.send_signal(signal.SIGINT)
    # The read would wait forever otherwise: ending within the bound is the proof.
    _, err = proc.communicate(timeout=20)
    assert "KeyboardInterrupt" in err, err


@pytest.mark.parametrize("store", ["sqlite", "memory"])
def test_streams_on_an_embedded_store(tmp_path: Path, store: str) -> None:
    url = f"sqlite://{tmp_path / 'accord.db'}" if store == "sqlite" else "memory:py-streams"
    with accord.Client.connect(url) as a, accord.Client.connect(url) as b:
        assert a.publish_many("s", ["one", ODD]) == [1, 2]
        with b.subscribe("s", after="earliest", consumer="c") as sub:
            assert payloads(sub, 2) == [(1, "one"), (2, ODD)]
            sub.ack(2)
            threading.Timer(0.1, lambda: a.publish("s", "three")).start()
            assert payloads(sub, 1) == [(3, "three")]
        with b.subscribe("s", consumer="c") as sub:
            assert sub.position == 2
        assert a.set_stream_retention("s", max_len=1) == 2
        with pytest.raises(accord.Trimmed, match="starts at seq 3"):
            b.subscribe("s", after=0)


# The asyncio API.


async def test_async_publish_subscribe_ack_and_trim(aclients: AsyncClients) -> None:
    pub, reader = await aclients("pub"), await aclients("reader")
    seqs = await asyncio.gather(*(pub.publish("s", f"e{i}") for i in range(10)))
    assert sorted(seqs) == list(range(1, 11))  # concurrent publishes: seqs 1..10, no gaps
    assert await pub.publish_many("s", ["a", ODD]) == [11, 12]
    async with reader.subscribe("s", after="earliest", consumer="c", page_size=5) as sub:
        assert isinstance(sub, accord.AsyncStreamSubscription)
        got = []
        async for event in sub:
            got.append(event.seq)
            await sub.ack(event.seq)
            if event.seq == 12:
                assert event.payload == ODD
                break
        assert got == list(range(1, 13))
        with pytest.raises(accord.Timeout, match="no event within"):
            await sub.next(timeout=0.05)
        publishing = asyncio.ensure_future(pub.publish("s", "live"))
        live = await sub.next(timeout=10)
        assert live is not None and (live.seq, live.payload) == (13, "live")
        assert await publishing == 13
    assert sub.closed and await sub.next() is None
    async with reader.subscribe("s", consumer="c") as sub:
        assert sub.position == 12
        again = await sub.next(timeout=10)
        assert again is not None and again.seq == 13
        with pytest.raises(accord.InvalidArgument, match="seq"):
            await sub.ack(14)
    assert await pub.set_stream_retention("s", max_len=3, max_age=60) == 10
    info = await reader.stream_info("s")
    assert (info.first_seq, info.last_seq, info.max_len, info.max_age) == (11, 13, 3, 60.0)
    with pytest.raises(accord.Trimmed, match="starts at seq 11"):
        await reader.subscribe("s", after=5)
    with pytest.raises(accord.InvalidArgument, match="page_size"):
        await reader.subscribe("s", page_size=0)
    with pytest.raises(accord.InvalidArgument, match="payload"):
        await pub.publish("s", "x" * (accord.MAX_EVENT_BYTES + 1))


async def test_async_cancelled_reads_lose_nothing(aclients: AsyncClients) -> None:
    """Reads that time out or are cancelled (asyncio.wait_for) never swallow an event."""
    pub, reader = await aclients("pub"), await aclients("reader")
    sub = await reader.subscribe("s", page_size=7)

    async def send() -> None:
        for i in range(100):
            await pub.publish("s", str(i))
            if i % 10 == 0:
                await asyncio.sleep(0.002)

    sender = asyncio.create_task(send())
    received: list[str] = []
    while len(received) < 100:
        try:
            event = await asyncio.wait_for(sub.__anext__(), 0.001)
        except TimeoutError:
            continue
        received.append(event.payload)
    await sender
    assert received == [str(i) for i in range(100)]
    await sub.close()


async def test_async_close_ends_a_waiting_next(aclients: AsyncClients) -> None:
    c = await aclients("c")
    sub = await c.subscribe("s")
    reading = asyncio.create_task(sub.next())
    await asyncio.sleep(0.1)
    await sub.close()
    assert await asyncio.wait_for(reading, 10) is None
    # Cancelling a waiting read ends it at once, and the subscription reads on.
    sub = await c.subscribe("s")
    reading = asyncio.create_task(sub.next())
    await asyncio.sleep(0.1)
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    await c.publish("s", "after")
    event = await sub.next(timeout=10)
    assert event is not None and event.payload == "after"
    # Closing the client: a waiting read raises Closed.
    reading = asyncio.create_task(sub.next())
    await asyncio.sleep(0.1)
    await c.close()
    with pytest.raises(accord.Closed):
        await asyncio.wait_for(reading, 10)
