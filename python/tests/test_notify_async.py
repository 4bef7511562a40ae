"""The notify/listen scenarios N1–N6 (docs/semantics.md) through the asyncio API
(AsyncClient.listen, AsyncSubscription)."""

from __future__ import annotations

import asyncio
import time

import pytest
from support import AsyncClients, Database, Scenario

import accord
from accord import Message, Reconnected


async def test_n1_from_clients_and_sql(
    aclients: AsyncClients, admin: Database, sc: Scenario
) -> None:
    o1, o2 = await aclients("o1"), await aclients("o2")
    jobs = sc.channel("jobs")
    async with o1.listen(jobs) as sub:
        assert sub.channels == [jobs]
        await o2.notify(jobs, "p1")
        assert await sub.recv(timeout=5) == Message(jobs, "p1")
        admin.execute("SELECT pg_notify(%s, 'p2')", jobs)
        async for event in sub:
            assert event == Message(jobs, "p2")
            break
    assert sub.closed
    assert await sub.recv() is None
    async for _ in sub:
        raise AssertionError("a closed subscription yields nothing")


async def test_n2_nothing_sent_after_listen_is_missed(aclients: AsyncClients, sc: Scenario) -> None:
    o1, o2 = await aclients("o1"), await aclients("o2")
    a, b = sc.channel("a"), sc.channel("b")
    for round in range(20):
        sub = await o1.listen(a, b)
        await o2.notify(a if round % 2 else b, str(round))
        assert await sub.recv(timeout=5) == Message(a if round % 2 else b, str(round))
        await sub.close()


async def test_n3_a_burst_neither_stalls_nor_reorders(
    aclients: AsyncClients, admin: Database, sc: Scenario
) -> None:
    o1, o2 = await aclients("o1"), await aclients("o2")
    burst = sc.channel("burst")
    async with o1.listen(burst) as sub:
        admin.execute("SELECT pg_notify(%s, i::text) FROM generate_series(1, 10000) AS i", burst)
        await (await o1.acquire("during-the-burst", ttl=60, timeout=10)).release()
        received = [await sub.recv(timeout=10) for _ in range(10000)]
        assert received == [Message(burst, str(i)) for i in range(1, 10001)]

        async def send() -> None:
            for i in range(2000):
                await o2.notify(burst, str(i))

        sender = asyncio.create_task(send())
        received = []
        async for event in sub:
            received.append(event)
            if len(received) == 2000:
                break
        await sender
        assert received == [Message(burst, str(i)) for i in range(2000)]


async def test_n3_cancelled_reads_lose_nothing(aclients: AsyncClients, sc: Scenario) -> None:
    """Reads that time out or are cancelled (asyncio.wait_for) never swallow a notification."""
    o1, o2 = await aclients("o1"), await aclients("o2")
    ch = sc.channel("ch")
    sub = await o1.listen(ch)

    async def send() -> None:
        for i in range(300):
            await o2.notify(ch, str(i))
            if i % 10 == 0:
                await asyncio.sleep(0.002)

    sender = asyncio.create_task(send())
    received: list[str] = []
    while len(received) < 300:
        try:
            event = await asyncio.wait_for(sub.__anext__(), 0.001)
        except TimeoutError:
            continue
        assert isinstance(event, Message)
        received.append(event.payload)
    await sender
    assert received == [str(i) for i in range(300)]
    with pytest.raises(accord.Timeout):
        await sub.recv(timeout=0.05)
    await sub.close()


async def test_n4_payload_limit_and_channel_quoting(aclients: AsyncClients, sc: Scenario) -> None:
    o1, o2 = await aclients("o1"), await aclients("o2")
    with pytest.raises(accord.InvalidArgument, match="payload"):
        await o2.notify(sc.channel("plain"), "x" * 8000)
    with pytest.raises(accord.InvalidArgument, match="channel"):
        await o1.listen("c" * 64)
    names = [f'with "quotes" {sc.tag}', f"semi; colons {sc.tag}", f"ünïcödé ✓ {sc.tag}"]
    async with o1.listen(*names) as sub:
        for name in names:
            await o2.notify(name, "p")
            assert await sub.recv(timeout=5) == Message(name, "p")


async def test_n5_reconnects_and_unlistens(
    aclients: AsyncClients, admin: Database, sc: Scenario
) -> None:
    o1, o2 = await aclients("o1"), await aclients("o2")
    ch = sc.channel("ch")
    sub = await o1.listen(ch)
    assert admin.terminate(sc.app_name("o1")) > 0
    deadline = time.monotonic() + 20
    while (event := await sub.recv(timeout=20)) != Reconnected():
        assert time.monotonic() < deadline, f"no Reconnected, got {event}"
    await o2.notify(ch, "after")
    assert await sub.recv(timeout=5) == Message(ch, "after")
    assert ch in await o1._listening_channels()
    await sub.close()
    assert ch not in await o1._listening_channels()


async def test_n6_close_ends_waits_and_subscriptions(aclients: AsyncClients, sc: Scenario) -> None:
    o1, o2 = await aclients("o1"), await aclients("o2")
    held = await o1.acquire("a", ttl=60)
    sub = await o2.listen(sc.channel("ch"))

    async def read() -> None:
        async for _ in sub:
            pass

    waiting = asyncio.create_task(o2.acquire("a", ttl=60))
    reading = asyncio.create_task(read())
    await asyncio.sleep(0.3)
    await o2.close()
    results = await asyncio.wait_for(asyncio.gather(waiting, reading, return_exceptions=True), 5)
    assert all(isinstance(r, accord.Closed) for r in results), results
    with pytest.raises(accord.Closed):
        await o2.try_acquire("b")
    await o2.close()
    await held.release()


def test_a_closed_loop_keeps_nothing_alive(sc: Scenario) -> None:
    """A read left in flight when its loop closes (a recv that timed out keeps its read for the
    next call) must not keep the loop, its completion pipe or the future alive."""
    import gc
    import weakref

    from accord import _aio

    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def leave_a_read_in_flight() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        client = await accord.AsyncClient.connect(sc.url, **sc.options("o1"))
        sub = await client.listen(sc.channel("c"))
        with pytest.raises(accord.Timeout):
            await sub.recv(timeout=0.05)
        # Neither the subscription nor the client is closed: the read stays in flight.

    asyncio.run(leave_a_read_in_flight())
    gc.collect()
    assert loops[0]() is None, "the closed loop is still alive"
    assert len(_aio._completers) == 0
