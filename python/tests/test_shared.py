"""Shared locks and fair waiting (docs/semantics.md, scenarios X1, X2) through the sync and
asyncio APIs: three shared holders at once, an exclusive acquire waiting for them and a shared
try_acquire refused while it waits; waiters granted in arrival order, each woken once; what a
shared lease may not do. Order is set up without sleeps: each waiter has its place in line
(`queued_count`) before the next one starts."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from support import PATIENCE, AsyncClients, Clients, until_queued, until_queued_async

import accord

TTL = 60.0


def test_x1_shared_holders_and_a_waiting_writer(clients: Clients) -> None:
    readers = [clients(f"r{i}") for i in (1, 2, 3)]
    writer, late = clients("w"), clients("r4")
    held = [r.acquire("k", ttl=TTL, shared=True) for r in readers]
    assert all(lease.shared for lease in held)
    fences = [lease.fence for lease in held]
    assert fences == sorted(set(fences))
    page = writer.list("k")
    assert sorted((i.owner, i.state, i.shared) for i in page) == [
        ("r1", "held", True),
        ("r2", "held", True),
        ("r3", "held", True),
    ]
    # A shared holder renews but cannot change the key or finish it.
    held[0].renew()
    with pytest.raises(accord.InvalidArgument):
        held[0].renew({"x": 1})
    with pytest.raises(accord.InvalidArgument):
        held[0].done()
    assert held[0].status == "held"
    assert writer.try_acquire("k", ttl=TTL) is None

    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(writer.acquire, "k", ttl=TTL, timeout=PATIENCE)
        until_queued(writer)
        # Once the writer waits, a new shared acquire does not get in ahead of it.
        assert late.try_acquire("k", ttl=TTL, shared=True) is None
        held[0].release()
        held[1].release()
        assert not waiting.done() and writer.queued_count() == 1
        held[2].release()
        lease = waiting.result(PATIENCE)
    assert not lease.shared and lease.fence > fences[-1]
    assert [(i.owner, i.shared) for i in writer.list("k")] == [("w", False)]
    lease.release()


def test_x2_waiters_granted_in_arrival_order(clients: Clients) -> None:
    holder = clients("h")
    waiters = [clients(f"c{i}") for i in range(3)]
    lease = holder.acquire("q", ttl=TTL)
    with ThreadPoolExecutor(len(waiters)) as pool:
        waiting: list[Future[accord.Lease]] = []
        for c in waiters:
            waiting.append(pool.submit(c.acquire, "q", ttl=TTL, timeout=PATIENCE))
            until_queued(c)
        # Nobody jumps the line, not even a try.
        assert holder.try_acquire("q", ttl=TTL) is None
        lease.release()
        fence = lease.fence
        for i, task in enumerate(waiting):
            granted = task.result(PATIENCE)
            assert granted.owner == f"c{i}" and granted.fence > fence
            fence = granted.fence
            # Only the head was woken, once; those behind it saw nothing.
            assert [c.waiter_wakeups() for c in waiters] == [int(j <= i) for j in range(3)]
            assert not any(t.done() for t in waiting[i + 1 :])
            granted.release()


async def test_x1_shared_holders_and_a_waiting_writer_async(aclients: AsyncClients) -> None:
    readers = [await aclients(f"r{i}") for i in (1, 2, 3)]
    writer, late = await aclients("w"), await aclients("r4")
    held = [await r.acquire("k", ttl=TTL, shared=True) for r in readers]
    assert all(lease.shared for lease in held)
    fences = [lease.fence for lease in held]
    page = await writer.list("k")
    assert sorted((i.owner, i.shared) for i in page) == [("r1", True), ("r2", True), ("r3", True)]
    await held[0].renew()
    with pytest.raises(accord.InvalidArgument):
        await held[0].renew({"x": 1})
    with pytest.raises(accord.InvalidArgument):
        await held[0].done()
    assert await writer.try_acquire("k", ttl=TTL) is None

    waiting = asyncio.ensure_future(writer.acquire("k", ttl=TTL, timeout=PATIENCE))
    await until_queued_async(writer)
    assert await late.try_acquire("k", ttl=TTL, shared=True) is None
    for lease in held[:2]:
        await lease.release()
    assert not waiting.done() and writer.queued_count() == 1
    await held[2].release()
    async with await asyncio.wait_for(waiting, PATIENCE) as granted:
        assert not granted.shared and granted.fence > fences[-1]
    assert writer.held_count() == 0


async def test_x2_waiters_granted_in_arrival_order_async(aclients: AsyncClients) -> None:
    holder = await aclients("h")
    waiters = [await aclients(f"c{i}") for i in range(3)]
    lease = await holder.acquire("q", ttl=TTL)
    waiting: list[asyncio.Future[accord.AsyncLease]] = []
    for c in waiters:
        waiting.append(asyncio.ensure_future(c.acquire("q", ttl=TTL, timeout=PATIENCE)))
        await until_queued_async(c)
    assert await holder.try_acquire("q", ttl=TTL) is None
    await lease.release()
    fence = lease.fence
    for i, task in enumerate(waiting):
        granted = await asyncio.wait_for(task, PATIENCE)
        assert granted.owner == f"c{i}" and granted.fence > fence
        fence = granted.fence
        assert [c.waiter_wakeups() for c in waiters] == [int(j <= i) for j in range(3)]
        assert not any(t.done() for t in waiting[i + 1 :])
        await granted.release()
