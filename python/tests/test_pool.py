"""Work pools and semaphores (docs/semantics.md, scenarios P1, P3, P4, P6) through the sync and
the asyncio API, on PostgreSQL and on the embedded store (``memory:``), and their bad input."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any, Optional

import pytest
from support import URL, AsyncClients, Clients, Scenario

import accord
from accord import PoolCounts

STORES = ["postgres", "memory"]
TASKS = [f"task/{i:03}" for i in range(200)]


def store_url(store: str) -> str:
    if store == "memory":
        return f"memory:py-pool-{uuid.uuid4().hex[:10]}"
    if not URL:
        pytest.skip("ACCORD_TEST_DATABASE_URL is not set: run `make test-python`")
    return URL


@pytest.fixture(params=STORES)
def pool_clients(request: pytest.FixtureRequest) -> Iterator[Clients]:
    made = Clients(Scenario(store_url(request.param)))
    yield made
    made.close()


@pytest.fixture(params=STORES)
async def pool_aclients(request: pytest.FixtureRequest) -> AsyncIterator[AsyncClients]:
    made = AsyncClients(Scenario(store_url(request.param)))
    yield made
    await made.close()


def in_thread(target: Any) -> tuple[threading.Thread, list[Any]]:
    """Runs `target` in a thread; its result (or exception) lands in the returned list."""
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(target())
        except BaseException as e:  # handed to the test
            result.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


# P1: offer is idempotent, counts count.


def test_p1_offer_and_counts(pool_clients: Clients) -> None:
    c = pool_clients("o1")
    assert c.counts("task/") == PoolCounts()
    assert c.offer("task/", TASKS, {"batch": 1}) == 200
    counts = c.counts("task/")
    assert counts == PoolCounts(free=200, held=0, done=0)
    assert (counts.free, counts.held, counts.done, counts.total) == (200, 0, 0, 200)
    assert repr(counts) == "PoolCounts(free=200, held=0, done=0)"
    assert hash(counts) == hash(PoolCounts(200, 0, 0))
    [first] = c.claim("task/")
    assert first.key in TASKS and first.metadata == {"batch": 1}
    first.done({"ok": True})
    [held] = c.claim("task/")
    # Offering again (from a generator, by another client) joins nothing, and changes nothing.
    assert pool_clients("o2").offer("task/", (k for k in TASKS)) == 0
    assert c.counts("task/") == PoolCounts(free=198, held=1, done=1)
    assert c.counts("task/").total == 200
    assert held.status == "held"
    assert c.counts("other/") == PoolCounts()


async def test_p1_offer_and_counts_async(pool_aclients: AsyncClients) -> None:
    c = await pool_aclients("o1")
    assert await c.offer("task/", TASKS) == 200
    assert await c.counts("task/") == PoolCounts(free=200)
    [first] = await c.claim("task/")
    await first.done()
    [held] = await c.claim("task/")
    other = await pool_aclients("o2")
    assert await other.offer("task/", tuple(TASKS)) == 0
    assert await c.counts("task/") == PoolCounts(free=198, held=1, done=1)
    await held.release()
    assert await c.counts("task/") == PoolCounts(free=199, held=0, done=1)


# P3: one claim grants a batch; concurrent claimers never get the same key.


def test_p3_claim_a_batch(pool_clients: Clients) -> None:
    c = pool_clients("o1")
    c.offer("task/", TASKS)
    leases = c.claim("task/", limit=50, ttl=5, metadata={"by": "o1"})
    assert len(leases) == 50
    assert len({lease.key for lease in leases}) == 50
    assert all(lease.key.startswith("task/") for lease in leases)
    assert len({lease.fence for lease in leases}) == 50
    assert all(lease.ttl == 5 and lease.metadata == {"by": "o1"} for lease in leases)
    assert all(isinstance(lease, accord.Lease) for lease in leases)
    assert c.held_count() == 50
    assert c.counts("task/") == PoolCounts(free=150, held=50)
    # Three more claimers at once take the rest, each key once.
    others = [pool_clients(f"o{n}") for n in (2, 3, 4)]
    runs = [in_thread(lambda o=o: o.claim("task/", limit=50)) for o in others]
    for thread, _ in runs:
        thread.join(60)
    batches = [result[0] for _, result in runs]
    keys = [lease.key for batch in [leases, *batches] for lease in batch]
    assert sorted(keys) == TASKS
    assert c.claim("task/", limit=50) == []  # nothing left: empty, not an error
    assert c.counts("task/") == PoolCounts(held=200)


async def test_p3_claim_a_batch_async(pool_aclients: AsyncClients) -> None:
    c = await pool_aclients("o1")
    await c.offer("task/", TASKS)
    leases = await c.claim("task/", 50)
    assert len({lease.key for lease in leases}) == 50
    assert all(isinstance(lease, accord.AsyncLease) for lease in leases)
    others = [await pool_aclients(f"o{n}") for n in (2, 3, 4)]
    batches = await asyncio.gather(*(o.claim("task/", limit=50) for o in others))
    keys = [lease.key for batch in [leases, *batches] for lease in batch]
    assert sorted(keys) == TASKS
    assert await c.claim("task/", limit=50) == []
    await asyncio.gather(*(lease.done() for lease in leases))
    assert await c.counts("task/") == PoolCounts(held=150, done=50)


# P4: a claim waiting on an exhausted pool is woken by a release.


def test_p4_a_waiting_claim_is_woken_by_a_release(pool_clients: Clients) -> None:
    holder, waiter = pool_clients("holder"), pool_clients("waiter")
    holder.offer("job/", ["job/a", "job/b"])
    held = holder.claim("job/", limit=2)
    assert len(held) == 2
    assert waiter.claim("job/") == []  # at once
    started = time.monotonic()
    assert waiter.claim("job/", timeout=0.2) == []  # after the timeout: not an error
    assert time.monotonic() - started >= 0.1  # it waited
    thread, result = in_thread(lambda: waiter.claim("job/", timeout=60))
    time.sleep(0.3)  # most likely waiting by now; either way the released key is what it gets
    started = time.monotonic()
    held[1].release()
    thread.join(60)
    [lease] = result[0]
    assert time.monotonic() - started < 30  # woken, not timed out
    assert lease.key == held[1].key and lease.fence > held[1].fence
    assert lease.owner == "waiter"
    assert waiter.counts("job/") == PoolCounts(held=2)


async def test_p4_a_waiting_claim_is_woken_by_a_release_async(
    pool_aclients: AsyncClients,
) -> None:
    holder, waiter = await pool_aclients("holder"), await pool_aclients("waiter")
    await holder.offer("job/", ["job/a"])
    [held] = await holder.claim("job/")
    assert await waiter.claim("job/", timeout=0.2) == []
    waiting = asyncio.ensure_future(waiter.claim("job/", timeout=60))
    await asyncio.sleep(0.3)  # most likely waiting by now; the outcome is the same either way
    await held.release()
    [lease] = await asyncio.wait_for(waiting, 30)
    assert (lease.key, lease.owner) == ("job/a", "waiter")
    assert lease.fence > held.fence


async def test_a_cancelled_claim_leaves_nothing_held(pool_aclients: AsyncClients) -> None:
    holder, waiter = await pool_aclients("holder"), await pool_aclients("waiter")
    await holder.offer("job/", ["job/a"])
    [held] = await holder.claim("job/")
    waiting = asyncio.ensure_future(waiter.claim("job/", timeout=60))
    await asyncio.sleep(0.1)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert waiter.held_count() == 0
    await held.release()
    assert await holder.counts("job/") == PoolCounts(free=1)
    # A claim not awaited starts nothing.
    never = waiter.claim("job/")
    never.close()
    assert await holder.counts("job/") == PoolCounts(free=1)


# P6: a semaphore admits `limit` holders.


def test_p6_semaphore(pool_clients: Clients) -> None:
    contenders = [pool_clients(f"o{n}") for n in range(5)]
    semaphores = [c.semaphore("printer", 3) for c in contenders]
    sem = semaphores[0]
    assert (sem.name, sem.limit) == ("printer", 3)
    assert repr(sem) == "<accord.Semaphore name='printer' limit=3>"
    got: list[Optional[accord.Lease]] = [s.try_acquire(ttl=5) for s in semaphores]
    holders = [lease for lease in got if lease is not None]
    assert len(holders) == 3
    assert len({lease.key for lease in holders}) == 3
    assert all(lease.key.startswith("printer#") for lease in holders)
    assert sum(c.held_count() for c in contenders) == 3
    late = contenders[4] if got[4] is None else contenders[3]
    late_sem = semaphores[contenders.index(late)]
    with pytest.raises(accord.Timeout):
        late_sem.acquire(timeout=0.2)
    assert late.held_count() == 0
    # A release hands the permit to a waiting acquire.
    thread, result = in_thread(lambda: late_sem.acquire(60, metadata={"late": True}))
    time.sleep(0.3)  # most likely waiting by now; the outcome is the same either way
    holders[0].release()
    thread.join(60)
    [lease] = result
    assert isinstance(lease, accord.Lease), lease
    assert lease.key == holders[0].key and lease.metadata == {"late": True}
    lease.release()


async def test_p6_semaphore_async(pool_aclients: AsyncClients) -> None:
    contenders = [await pool_aclients(f"o{n}") for n in range(5)]
    semaphores = [await c.semaphore("printer", 3) for c in contenders]
    assert repr(semaphores[0]) == "<accord.AsyncSemaphore name='printer' limit=3>"
    got = await asyncio.gather(*(s.try_acquire() for s in semaphores))
    holders = [lease for lease in got if lease is not None]
    assert len({lease.key for lease in holders}) == 3
    assert sum(c.held_count() for c in contenders) == 3
    index = got.index(None)
    with pytest.raises(accord.Timeout):
        await semaphores[index].acquire(timeout=0.2)
    assert contenders[index].held_count() == 0
    waiting = asyncio.ensure_future(semaphores[index].acquire(timeout=60))
    await asyncio.sleep(0.1)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert contenders[index].held_count() == 0
    # A release hands the permit to a waiting acquire.
    waiting = asyncio.ensure_future(semaphores[index].acquire(60))
    await asyncio.sleep(0.3)  # most likely waiting by now; the outcome is the same either way
    await holders[0].release()
    async with await asyncio.wait_for(waiting, 30) as lease:
        assert lease.key == holders[0].key
        assert contenders[index].held_count() == 1
    assert contenders[index].held_count() == 0


# Bad input: InvalidArgument naming the field (TypeError for a wrong type), nothing held.


def test_bad_pool_arguments(pool_clients: Clients) -> None:
    c = pool_clients("o1")
    with pytest.raises(accord.InvalidArgument, match="prefix"):
        c.offer("", ["a"])
    with pytest.raises(accord.InvalidArgument, match="prefix"):
        c.claim("")
    with pytest.raises(accord.InvalidArgument, match="prefix"):
        c.counts("")
    for key in ("other/1", "task/", "task/\0"):
        with pytest.raises(accord.InvalidArgument, match="key"):
            c.offer("task/", ["task/1", key])
    with pytest.raises(accord.InvalidArgument, match="keys"):
        c.offer("task/", (f"task/{i}" for i in range(accord.MAX_OFFER_KEYS + 1)))
    with pytest.raises(TypeError, match="keys"):
        c.offer("task/", "task/1")  # a str is not a list of keys
    with pytest.raises(TypeError, match="keys"):
        c.offer("task/", ["task/1", 2])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="keys"):
        c.offer("task/", 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dict"):
        c.offer("task/", ["task/1"], ["not", "a", "dict"])  # type: ignore[arg-type]
    assert c.counts("task/") == PoolCounts()  # a refused offer offers nothing
    assert c.offer("task/", ["task/1"]) == 1
    for limit in (0, -1, accord.MAX_CLAIM_LIMIT + 1):
        with pytest.raises(accord.InvalidArgument) as e:
            c.claim("task/", limit=limit)
        assert str(e.value) == f"invalid limit: {limit} is outside 1..={accord.MAX_CLAIM_LIMIT}"
    with pytest.raises(accord.InvalidArgument, match="ttl"):
        c.claim("task/", ttl=0)
    with pytest.raises(accord.InvalidArgument, match="timeout"):
        c.claim("task/", timeout=-1)
    for limit in (0, accord.MAX_PERMITS + 1):
        with pytest.raises(accord.InvalidArgument) as e:
            c.semaphore("s", limit)
        assert str(e.value) == f"invalid limit: {limit} is outside 1..={accord.MAX_PERMITS}"
    with pytest.raises(accord.InvalidArgument, match="name"):
        c.semaphore("", 1)
    sem = c.semaphore("s", 1)
    with pytest.raises(accord.InvalidArgument, match="ttl"):
        sem.try_acquire(ttl=0)
    with pytest.raises(accord.InvalidArgument, match="timeout"):
        sem.acquire(timeout=-1)
    assert c.held_count() == 0
    assert c.counts("task/") == PoolCounts(free=1)
    assert c.counts("s#") == PoolCounts(free=1)


async def test_bad_pool_arguments_async(pool_aclients: AsyncClients) -> None:
    c = await pool_aclients("o1")
    with pytest.raises(accord.InvalidArgument, match="prefix"):
        await c.offer("", ["a"])
    with pytest.raises(accord.InvalidArgument, match="key"):
        await c.offer("task/", ["other/1"])
    with pytest.raises(TypeError, match="keys"):
        await c.offer("task/", "task/1")
    for limit in (0, accord.MAX_CLAIM_LIMIT + 1):
        with pytest.raises(accord.InvalidArgument, match="limit"):
            await c.claim("task/", limit=limit)
    for limit in (0, accord.MAX_PERMITS + 1):
        with pytest.raises(accord.InvalidArgument, match="limit"):
            await c.semaphore("s", limit)
    assert c.held_count() == 0
    assert await c.counts("task/") == PoolCounts()
