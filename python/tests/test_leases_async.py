"""The lease scenarios L1–L9 (docs/semantics.md) through the asyncio API (AsyncClient,
AsyncLease)."""

from __future__ import annotations

import asyncio
import gc
import time
from datetime import timedelta
from typing import Optional

import pytest
from support import AsyncClients, Database, Proxy, Scenario, assert_set_between

import accord


async def test_l1_acquire_records_everything(aclients: AsyncClients, admin: Database) -> None:
    o1 = await aclients("o1")
    before = admin.now()
    lease = await o1.acquire("a", ttl=60, metadata={"k": "v"})
    after = admin.now()
    assert (lease.key, lease.owner, lease.namespace) == ("a", "o1", o1.namespace)
    assert lease.fence > 0
    assert lease.expires_at.tzinfo is not None
    assert_set_between(lease.expires_at, before, after, 60)
    assert lease.metadata == {"k": "v"}
    assert not lease.is_lost
    page = await o1.list()
    assert len(page) == 1
    info = page[0]
    assert (info.key, info.state, info.owner, info.fence) == ("a", "held", "o1", lease.fence)
    assert info.metadata == {"k": "v"}


async def test_l2_not_reentrant(aclients: AsyncClients) -> None:
    o1, o1_again, o2 = await aclients("o1"), await aclients("o1"), await aclients("o2")
    async with o1.acquire("a", ttl=60) as lease:
        assert await o1.try_acquire("a", ttl=60) is None
        assert await o1_again.try_acquire("a", ttl=60) is None
        assert await o2.try_acquire("a", ttl=60) is None
        assert o2.held_count() == 0
    again = await o2.try_acquire("a", ttl=60)
    assert again is not None and again.fence > lease.fence
    await again.release()


async def test_l3_expiry_hands_over_with_a_larger_fence(
    aclients: AsyncClients, proxy: Proxy, admin: Database, sc: Scenario
) -> None:
    o1 = await aclients("o1", url=proxy.url)
    o2 = await aclients("o2")
    stale = await o1.acquire("a", ttl=1)
    lost = stale.lost
    proxy.set_cut(True)
    await asyncio.wait_for(lost, 5)  # the lost signal fires
    await asyncio.wait_for(stale.lost, 1)  # and stays fired
    taken = await o2.acquire("a", ttl=60, timeout=10)
    assert taken.fence > stale.fence
    proxy.set_cut(False)
    assert stale.is_lost
    with pytest.raises(accord.LeaseLost):
        await stale.renew()
    with pytest.raises(accord.LeaseLost):
        await stale.release()
    with pytest.raises(accord.LeaseLost):
        await stale.done()
    assert admin.holder(sc.namespace, "a") == "o2"


async def test_l4_renew_extends_and_merges(aclients: AsyncClients, admin: Database) -> None:
    o1 = await aclients("o1")
    lease = await o1.acquire("a", ttl=5, metadata={"k": "v"})
    first = lease.expires_at
    await asyncio.sleep(1.2)
    before = admin.now()
    await lease.renew({"b": 2})
    expires_at = lease.expires_at
    after = admin.now()
    assert (expires_at - first).total_seconds() >= 1.0
    assert_set_between(expires_at, before, after, 5)
    assert lease.metadata == {"k": "v", "b": 2}
    assert (await o1.list())[0].metadata == {"k": "v", "b": 2}
    await lease.renew()


async def test_l5_done_is_final_until_reset(aclients: AsyncClients) -> None:
    o1, o2 = await aclients("o1"), await aclients("o2")
    lease = await o1.acquire("a", ttl=60, metadata={"k": "v"})
    await lease.done({"l": "w"})
    with pytest.raises(accord.Done):
        await o2.try_acquire("a", ttl=1)
    with pytest.raises(accord.Done):
        await o1.acquire("a", ttl=1, timeout=1)
    done = await o1.list(state="done")
    assert [(i.key, i.owner, i.metadata) for i in done] == [("a", "o1", {"k": "v", "l": "w"})]
    with pytest.raises(accord.LeaseLost):
        await lease.done()
    with pytest.raises(accord.LeaseLost):
        await lease.renew()
    await lease.release()  # harmless after done
    assert await o2.reset("a") is True
    assert await o2.reset("a") is False
    again = await o2.try_acquire("a", ttl=60)
    assert again is not None and again.fence > lease.fence
    with pytest.raises(accord.Held):
        await o1.reset("a")


async def test_l6_release_is_idempotent_and_fenced(aclients: AsyncClients, proxy: Proxy) -> None:
    o1, o2 = await aclients("o1"), await aclients("o2")
    o1p, o2p = await aclients("o1", url=proxy.url), await aclients("o2", url=proxy.url)
    lease = await o1.acquire("a", ttl=60)
    await lease.release()
    await lease.release()

    old = await o1p.acquire("b", ttl=1)
    foreign = await o2p.acquire("c", ttl=1)
    proxy.set_cut(True)
    await asyncio.wait_for(asyncio.gather(old.lost, foreign.lost), 5)
    await asyncio.sleep(0.3)
    proxy.set_cut(False)

    new = await o1.acquire("b", ttl=60, timeout=10)
    assert new.fence > old.fence
    with pytest.raises(accord.LeaseLost):
        await old.release()
    assert await o2.try_acquire("b", ttl=1) is None

    mine = await o1.acquire("c", ttl=60, timeout=10)
    with pytest.raises(accord.LeaseLost):
        await foreign.release()
    assert await o2.try_acquire("c", ttl=1) is None
    del mine  # dropping a lease releases it (in the background)
    gc.collect()
    deadline = time.monotonic() + 5
    while (taken := await o2.try_acquire("c", ttl=1)) is None:
        assert time.monotonic() < deadline, "dropping a lease releases it"
        await asyncio.sleep(0.05)
    await taken.release()


async def test_l7_list_filters_and_pages(aclients: AsyncClients) -> None:
    o1 = await aclients("o1")
    ab = await o1.acquire("a/b", ttl=60)
    for key, meta in (("a/b/c", {"a": 1}), ("a/x", {"a": 1, "b": 2})):
        await (await o1.acquire(key, ttl=60, metadata=meta)).done()
    assert len(await o1.list()) == 3
    assert len(await o1.list(state="done")) == 2
    assert len(await o1.list(state="held")) == 1
    await ab.release()
    assert len(await o1.list(state="free")) == 1
    assert len(await o1.list("a/b")) == 2
    assert len(await o1.list("a/x/y")) == 0
    assert len(await o1.list(metadata={"a": 1})) == 2
    assert len(await o1.list(metadata={"b": 2})) == 1
    for key in ("p%q/1", "p_q/2", "pxq/3", "pq/4"):
        await (await o1.acquire(key, ttl=60)).release()
    assert [i.key for i in await o1.list("p%q")] == ["p%q/1"]
    assert [i.key for i in await o1.list("p_q")] == ["p_q/2"]
    seen: list[tuple[int, str]] = []
    cursor: Optional[str] = None
    while True:
        page = await o1.list(limit=3, cursor=cursor)
        seen += [(i.fence, i.key) for i in page]
        if (cursor := page.next_cursor) is None:
            break
    assert [key for _, key in seen] == ["a/b", "a/b/c", "a/x", "p%q/1", "p_q/2", "pq/4", "pxq/3"], (
        seen
    )
    with pytest.raises(accord.InvalidArgument):
        await o1.list(cursor="nonsense")


async def test_l8_waiting_is_woken(
    aclients: AsyncClients, proxy: Proxy, admin: Database, sc: Scenario
) -> None:
    o1, o2 = await aclients("o1"), await aclients("o2")

    held = await o1.acquire("a", ttl=60)

    async def wait() -> tuple[float, accord.AsyncLease]:
        lease = await o2.acquire("a", ttl=60, timeout=20)
        return time.monotonic(), lease

    waiter = asyncio.create_task(wait())
    await asyncio.sleep(0.3)  # most likely waiting by now; the outcome is the same if not
    released_at = time.monotonic()
    await held.release()
    # Granted within the wait's 20 s timeout: only the release's wake-up does that (the holder's
    # ttl is 60 s, a waiter re-checks unprompted every 30 s); how soon is a benchmark's business.
    acquired_at, lease = await waiter
    assert acquired_at >= released_at
    await lease.release()

    o1p = await aclients("o1", url=proxy.url)
    stuck = await o1p.acquire("b", ttl=1)
    proxy.set_cut(True)
    # Granted within the wait's 20 s timeout, with no release: only the wake-up at the holder's
    # expiry does that (the unprompted re-check comes after 30 s).
    following = await o2.acquire("b", ttl=60, timeout=20)
    granted_at = following.expires_at - timedelta(seconds=60)
    assert granted_at >= stuck.expires_at

    held_c = await o1.acquire("c", ttl=60)
    with pytest.raises(accord.Timeout):
        await o2.acquire("c", ttl=1, timeout=0.2)
    # asyncio's own timeout cancels the acquire: nothing is left held either.
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(o2.acquire("c", ttl=1), 0.2)
    assert o2.held_count() == 1
    assert admin.holder(sc.namespace, "c") == "o1"
    await held_c.release()


async def test_l9_cancellation_leaves_nothing_held(
    aclients: AsyncClients, admin: Database, sc: Scenario
) -> None:
    """Task cancellation at many points, including while the release that would grant the key
    is in flight: once the CancelledError is raised, nothing is held."""
    o1, o2 = await aclients("o1"), await aclients("o2")
    cancelled = 0
    for round in range(24):
        key = f"k{round}"
        held = await o1.acquire(key, ttl=60)
        waiter = asyncio.create_task(o2.acquire(key, ttl=60, timeout=20))
        await asyncio.sleep(round * 0.0007)

        async def cancel_later(
            waiter: asyncio.Task[accord.AsyncLease] = waiter, delay: float = (round % 4) * 0.0003
        ) -> None:
            await asyncio.sleep(delay)
            waiter.cancel()

        await asyncio.gather(held.release(), cancel_later())
        try:
            lease = await waiter
        except asyncio.CancelledError:
            cancelled += 1
            assert admin.holder(sc.namespace, key) is None, f"round {round} left {key} held"
        else:
            assert admin.holder(sc.namespace, key) == "o2"
            await lease.release()
    assert o2.held_count() == 0
    assert cancelled > 0

    # Cancelled while waiting, through async with as well.
    async with o1.acquire("w", ttl=60):

        async def hold_it() -> None:
            async with o2.acquire("w", ttl=60):
                raise AssertionError("granted while held")

        task = asyncio.create_task(hold_it())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert o2.held_count() == 0
    assert admin.holder(sc.namespace, "w") is None


async def test_async_with_reports_a_lost_lease(aclients: AsyncClients, proxy: Proxy) -> None:
    o1 = await aclients("o1", url=proxy.url)
    with pytest.raises(accord.LeaseLost):
        async with o1.acquire("a", ttl=1) as lease:
            proxy.set_cut(True)
            await asyncio.wait_for(lease.lost, 5)
    proxy.set_cut(False)
    with pytest.raises(KeyError):
        async with o1.acquire("b", ttl=1, timeout=10) as lease:
            proxy.set_cut(True)
            await asyncio.wait_for(lease.lost, 5)
            raise KeyError("the block's own error wins")
    proxy.set_cut(False)


async def test_tasks_share_one_client(aclients: AsyncClients) -> None:
    shared, other = await aclients("o1"), await aclients("o2")
    inside = 0
    overlaps = 0

    async def work(client: accord.AsyncClient) -> None:
        nonlocal inside, overlaps
        for _ in range(30):
            async with client.acquire("k", timeout=30):
                inside += 1
                overlaps += inside > 1
                await asyncio.sleep(0.0005)
                inside -= 1

    await asyncio.gather(*(work(c) for c in (shared, shared, shared, other)))
    assert overlaps == 0
    assert shared.held_count() == 0 and other.held_count() == 0


def test_every_loop_gets_its_completions(sc: Scenario) -> None:
    """Async calls complete through a pipe per event loop: loops run one after another (as
    asyncio.run does) each get theirs, and a burst of calls on one loop settles every future,
    cancelled ones included."""

    async def burst(round: int) -> None:
        async with accord.AsyncClient.connect(sc.url, **sc.options(f"o{round}")) as client:
            keys = [f"burst-{round}-{i}" for i in range(200)]
            leases = await asyncio.gather(*(client.try_acquire(k, ttl=60) for k in keys))
            assert all(lease is not None for lease in leases)
            assert client.held_count() == len(keys)
            cancelled = asyncio.ensure_future(client.try_acquire(f"burst-{round}-cancelled"))
            await asyncio.sleep(0)
            cancelled.cancel()
            await asyncio.gather(*(lease.release() for lease in leases if lease is not None))
            with pytest.raises(asyncio.CancelledError):
                await cancelled
            assert client.held_count() == 0

    for round in range(3):
        asyncio.run(burst(round))
