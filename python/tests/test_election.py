"""Elections (docs/semantics.md, scenarios E1-E3) through the sync and asyncio APIs: two
campaigners, one leader that `leader()` agrees on from every client and an observer yields;
`proclaim` changes the value (same fence); `resign` hands over to the campaigner waiting in
line (a larger fence), which the observer sees; a waiting campaign that times out or is
cancelled leaves nothing behind; a leadership lost with its client; bad input."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from support import PATIENCE, AsyncClients, Clients, until_queued, until_queued_async

import accord

TTL = 60.0


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
        assert (seen.owner, seen.value, seen.fence) == ("a", "a-value", first.fence)
        assert seen.since.tzinfo is not None and seen.expires_at > seen.since

        first.proclaim("a-new")
        assert first.value == "a-new"
        seen = observer.next(timeout=PATIENCE)
        assert (seen.owner, seen.value, seen.fence) == ("a", "a-new", first.fence)

        first.resign()
        assert (first.status, first.is_lost) == ("released", False)
        first.resign()  # again: harmless
        with pytest.raises(accord.LeaseLost):
            first.proclaim("late")
        with waiting.result(PATIENCE) as second:
            assert second.owner == "b" and second.fence > first.fence
            seen = next(observer)
            assert (seen.owner, seen.value, seen.fence) == ("b", "b-value", second.fence)
        assert second.status == "released"  # the end of the block resigned
        assert election.leader() is None
    assert observer.closed
    assert list(observer) == []  # iteration ends once closed
    with pytest.raises(accord.Closed):
        observer.next()


def test_a_campaign_that_times_out_leaves_nothing(clients: Clients) -> None:
    a, b = clients("a"), clients("b")
    with a.election("e").campaign("a", ttl=TTL) as leading:
        with pytest.raises(accord.Timeout):
            b.election("e").campaign("b", ttl=TTL, timeout=0.2)
        assert (b.held_count, b.queued_count()) == (0, 0)
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
        assert (seen.owner, seen.value, seen.fence) == ("a", "a-value", first.fence)
        # A read cancelled loses nothing: the next read gets the change.
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(observer.next(), 0.05)
        await first.proclaim("a-new")
        assert first.value == "a-new"
        seen = await observer.next(timeout=PATIENCE)
        assert (seen.owner, seen.value, seen.fence) == ("a", "a-new", first.fence)

        await first.resign()
        with pytest.raises(accord.LeaseLost):
            await first.proclaim("late")
        async with await asyncio.wait_for(waiting, PATIENCE) as second:
            assert second.owner == "b" and second.fence > first.fence
            async for seen in observer:
                assert (seen.owner, seen.value, seen.fence) == ("b", "b-value", second.fence)
                break
        assert second.status == "released"
        assert await election.leader() is None
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
        assert (b.held_count, b.queued_count()) == (0, 0)
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
