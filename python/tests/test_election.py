"""Elections (docs/semantics.md, scenarios E1-E3) through the sync and asyncio APIs: two
campaigners, one leader that `leader()` agrees on from every client and an observer yields;
`proclaim` changes the value (same fence); `resign` hands over to the campaigner waiting in
line (a larger fence), which the observer sees; vacancies (None) after a resignation and after
a leader's expiry (E4); reads with a tiny timeout or cancelled by asyncio lose no change (E5); a
waiting campaign that times out or is cancelled leaves nothing behind; a leadership lost with
its client; bad input."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import pytest
from support import (
    PATIENCE,
    AsyncClients,
    Clients,
    Proxy,
    until_queued,
    until_queued_async,
)

import accord

TTL = 60.0
#: Well before the 30 s safety re-read: a change lost by a timed-out read shows as this passing.
REREAD_BOUND = 10.0
#: A timeout that ends most reads half-way.
TINY = 0.001


def next_leader(observer: accord.Observer) -> accord.Leader:
    """The next leader, past at most one vacancy: a resignation frees the key before the
    campaigner in line, woken, takes it, and a read in between finds nobody leading."""
    seen = observer.next(timeout=PATIENCE)
    if seen is None:
        seen = observer.next(timeout=PATIENCE)
    assert seen is not None
    return seen


async def next_leader_async(observer: accord.AsyncObserver) -> accord.Leader:
    """`next_leader` of the asyncio API."""
    seen = await observer.next(timeout=PATIENCE)
    if seen is None:
        seen = await observer.next(timeout=PATIENCE)
    assert seen is not None
    return seen


def poll(observer: accord.Observer) -> Optional[accord.Leader]:
    """The next change, asked for with a tiny timeout until it comes."""
    started = time.monotonic()
    while True:
        try:
            return observer.next(timeout=TINY)
        except accord.Timeout:
            assert time.monotonic() - started < REREAD_BOUND, "a timed-out read lost the change"


async def poll_async(observer: accord.AsyncObserver, turn: int) -> Optional[accord.Leader]:
    """`poll` of the asyncio API: a tiny timeout, or (every other turn) asyncio's cancellation."""
    started = time.monotonic()
    while True:
        try:
            if turn % 2:
                return await asyncio.wait_for(observer.next(), TINY)
            return await observer.next(timeout=TINY)
        except (accord.Timeout, asyncio.TimeoutError):
            assert time.monotonic() - started < REREAD_BOUND, "a cancelled read lost the change"


def test_e1_e3_one_leader_handed_on(clients: Clients) -> None:
    a, b, watcher = clients("a"), clients("b"), clients("watcher")
    election = watcher.election("primary")
    assert election.name == "primary" and election.leader() is None
    with election.observe() as observer, ThreadPoolExecutor(1) as pool:
        first = a.election("primary").campaign("a-value", ttl=TTL)
        assert (first.key, first.owner, first.value, first.ttl) == (
            "accord.election/primary",
            "a",
            "a-value",
            TTL,
        )
        assert first.status == "held" and not first.is_lost and not first.lost
        assert first.election.name == "primary"
        waiting = pool.submit(b.election("primary").campaign, "b-value", ttl=TTL, timeout=PATIENCE)
        until_queued(b)
        for c in (a, b, watcher):
            leader = c.election("primary").leader()
            assert leader is not None
            assert (leader.owner, leader.value, leader.fence) == ("a", "a-value", first.fence)
        seen = observer.next(timeout=PATIENCE)
        assert seen is not None
        assert (seen.owner, seen.value, seen.fence) == ("a", "a-value", first.fence)
        assert seen.since.tzinfo is not None and seen.expires_at > seen.since

        first.proclaim("a-new")
        assert first.value == "a-new"
        seen = observer.next(timeout=PATIENCE)
        assert seen is not None
        assert (seen.owner, seen.value, seen.fence) == ("a", "a-new", first.fence)

        first.resign()
        assert (first.status, first.is_lost) == ("released", False)
        first.resign()  # again: harmless
        with pytest.raises(accord.LeaseLost):
            first.proclaim("late")
        with waiting.result(PATIENCE) as second:
            assert second.owner == "b" and second.fence > first.fence
            seen = next_leader(observer)
            assert (seen.owner, seen.value, seen.fence) == ("b", "b-value", second.fence)
        assert second.status == "released"  # the end of the block resigned
        assert election.leader() is None
        assert next(observer) is None  # a vacancy: nobody was in line
    assert observer.closed
    assert list(observer) == []  # iteration ends once closed
    with pytest.raises(accord.Closed):
        observer.next()


def test_a_campaign_that_times_out_leaves_nothing(clients: Clients) -> None:
    a, b = clients("a"), clients("b")
    with a.election("e").campaign("a", ttl=TTL) as leading:
        with pytest.raises(accord.Timeout):
            b.election("e").campaign("b", ttl=TTL, timeout=0.2)
        assert (b.held_count(), b.queued_count()) == (0, 0)
        leader = b.election("e").leader()
        assert leader is not None and leader.fence == leading.fence


def test_a_leadership_is_lost_with_its_client(clients: Clients) -> None:
    a = clients("a")
    leadership = a.election("e").campaign("a", ttl=TTL)
    a.close()
    assert leadership.lost.wait(PATIENCE)
    assert leadership.is_lost and leadership.lost_reason == "client_closed"
    with pytest.raises(accord.Closed):  # as a lease's release after its client closed
        leadership.resign()


def test_bad_input_names_the_field(clients: Clients) -> None:
    client = clients("bad")
    with pytest.raises(accord.InvalidArgument, match="election"):
        client.election("")
    with pytest.raises(accord.InvalidArgument, match="invalid ttl"):
        client.election("e").campaign("v", ttl=0.01)
    with pytest.raises(accord.InvalidArgument, match="invalid timeout"):
        client.election("e").campaign("v", timeout=-1)


async def test_e1_e3_one_leader_handed_on_async(aclients: AsyncClients) -> None:
    a, b, watcher = await aclients("a"), await aclients("b"), await aclients("watcher")
    election = watcher.election("primary")
    assert await election.leader() is None
    async with election.observe() as observer:
        first = await a.election("primary").campaign("a-value", ttl=TTL)
        assert (first.owner, first.value, first.status) == ("a", "a-value", "held")
        waiting = asyncio.ensure_future(
            b.election("primary").campaign("b-value", ttl=TTL, timeout=PATIENCE)
        )
        await until_queued_async(b)
        for c in (a, b, watcher):
            leader = await c.election("primary").leader()
            assert leader is not None
            assert (leader.owner, leader.value, leader.fence) == ("a", "a-value", first.fence)
        seen = await observer.next(timeout=PATIENCE)
        assert seen is not None
        assert (seen.owner, seen.value, seen.fence) == ("a", "a-value", first.fence)
        # A read cancelled loses nothing: the next read gets the change.
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(observer.next(), 0.05)
        await first.proclaim("a-new")
        assert first.value == "a-new"
        seen = await observer.next(timeout=PATIENCE)
        assert seen is not None
        assert (seen.owner, seen.value, seen.fence) == ("a", "a-new", first.fence)

        await first.resign()
        with pytest.raises(accord.LeaseLost):
            await first.proclaim("late")
        async with await asyncio.wait_for(waiting, PATIENCE) as second:
            assert second.owner == "b" and second.fence > first.fence
            seen = await next_leader_async(observer)
            assert (seen.owner, seen.value, seen.fence) == ("b", "b-value", second.fence)
        assert second.status == "released"
        assert await election.leader() is None
        async for vacancy in observer:  # nobody was in line
            assert vacancy is None
            break
    assert observer.closed
    assert [leader async for leader in observer] == []
    with pytest.raises(accord.Closed):
        await observer.next()


async def test_a_cancelled_campaign_leaves_nothing_async(aclients: AsyncClients) -> None:
    a, b = await aclients("a"), await aclients("b")
    async with a.election("e").campaign("a", ttl=TTL) as leading:
        campaign = asyncio.ensure_future(b.election("e").campaign("b", ttl=TTL))
        await until_queued_async(b)
        campaign.cancel()
        with pytest.raises(asyncio.CancelledError):
            await campaign
        assert (b.held_count(), b.queued_count()) == (0, 0)
        with pytest.raises(accord.Timeout):
            await b.election("e").campaign("b", timeout=0.2)
        leader = await b.election("e").leader()
        assert leader is not None and leader.fence == leading.fence


async def test_a_leadership_is_lost_with_its_client_async(aclients: AsyncClients) -> None:
    a = await aclients("a")
    leadership = await a.election("e").campaign("a", ttl=TTL)
    lost = leadership.lost
    await a.close()
    await asyncio.wait_for(lost, PATIENCE)
    assert leadership.is_lost and leadership.lost_reason == "client_closed"


async def test_bad_input_names_the_field_async(aclients: AsyncClients) -> None:
    client = await aclients("bad")
    with pytest.raises(accord.InvalidArgument, match="election"):
        client.election("a" * 10_000)
    with pytest.raises(accord.InvalidArgument, match="invalid ttl"):
        await client.election("e").campaign("v", ttl=100_000)


def test_e4_vacancies_are_reported(clients: Clients, proxy: Proxy) -> None:
    leader, watcher = clients("leader"), clients("watcher")
    doomed = clients("doomed", url=proxy.url)
    with watcher.election("e4").observe() as observer:
        assert observer.next(timeout=PATIENCE) is None  # the current state: nobody leads
        leading = leader.election("e4").campaign("v", ttl=TTL)
        seen = observer.next(timeout=PATIENCE)
        assert seen is not None and (seen.owner, seen.fence) == ("leader", leading.fence)
        leading.resign()
        assert observer.next(timeout=PATIENCE) is None
        dying = doomed.election("e4").campaign("d", ttl=1.0)
        seen = next(observer)
        assert seen is not None and (seen.owner, seen.fence) == ("doomed", dying.fence)
        proxy.set_cut(True)  # the leader's process, as the coordinator sees it, died
        # Reported at the lease's expiry, 1 s after its last renewal; PATIENCE bounds a hang.
        assert observer.next(timeout=PATIENCE) is None
        assert watcher.election("e4").leader() is None


def test_e5_reads_with_a_tiny_timeout_lose_no_change(clients: Clients) -> None:
    leader, watcher = clients("leader"), clients("watcher")
    with watcher.election("e5").observe() as observer:
        assert poll(observer) is None
        for _ in range(3):
            leading = leader.election("e5").campaign("v", ttl=TTL)
            seen = poll(observer)
            assert seen is not None and seen.fence == leading.fence
            leading.proclaim("w")
            seen = poll(observer)
            assert seen is not None and (seen.fence, seen.value) == (leading.fence, "w")
            leading.resign()
            assert poll(observer) is None


async def test_e4_vacancies_are_reported_async(aclients: AsyncClients) -> None:
    leader, watcher = await aclients("leader"), await aclients("watcher")
    async with watcher.election("e4").observe() as observer:
        assert await observer.next(timeout=PATIENCE) is None
        for _ in range(2):
            leading = await leader.election("e4").campaign("v", ttl=TTL)
            seen = await observer.next(timeout=PATIENCE)
            assert seen is not None and seen.fence == leading.fence
            await leading.resign()
            async for vacancy in observer:
                assert vacancy is None
                break


async def test_e5_reads_timed_out_or_cancelled_lose_no_change_async(
    aclients: AsyncClients,
) -> None:
    leader, watcher = await aclients("leader"), await aclients("watcher")
    async with watcher.election("e5").observe() as observer:
        assert await poll_async(observer, 0) is None
        for turn in range(4):
            leading = await leader.election("e5").campaign("v", ttl=TTL)
            seen = await poll_async(observer, turn)
            assert seen is not None and seen.fence == leading.fence
            await leading.proclaim("w")
            seen = await poll_async(observer, turn + 1)
            assert seen is not None and (seen.fence, seen.value) == (leading.fence, "w")
            await leading.resign()
            assert await poll_async(observer, turn) is None
