"""Membership and fleets through the asyncio API (AsyncClient, AsyncMember, AsyncMemberWatch,
AsyncFleet): join, members and watch with a member leaving; two fleet members splitting 8
shards in `async for` loops; a hand-off acknowledged by asking for the next event; close
handing everything back; bad input."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from support import AsyncClients, Database

import accord
from accord import Assigned, AsyncFleet, FleetEvent, Joined, Left, Members, Revoked

TTL = 1.5
PERIOD = 0.25
SHARDS = 8
PATIENCE = 20.0


async def open_fleet(clients: AsyncClients, owner: str, **options: Any) -> AsyncFleet:
    merged: dict[str, Any] = {"ttl": TTL, "period": PERIOD, **options}
    client = await clients(owner, ttl=TTL)
    return await client.fleet("f", SHARDS, **merged)


async def test_join_members_and_watch_with_a_member_leaving(aclients: AsyncClients) -> None:
    a, b = await aclients("a"), await aclients("b")
    async with b.watch("workers") as watch:
        first = await watch.next(timeout=5)
        assert isinstance(first, Members) and first.members == []
        member = await a.join("workers", metadata={"role": "x"}, ttl=TTL)
        assert (member.group, member.owner, member.status) == ("workers", "a", "held")
        joined = await watch.next(timeout=5)
        assert isinstance(joined, Joined)
        assert (joined.member.owner, joined.member.metadata) == ("a", {"role": "x"})
        async with b.join("workers") as other:
            event = await watch.next(timeout=5)
            assert isinstance(event, Joined) and event.member.owner == "b"
            await member.update_metadata({"role": "y"})
            infos = await b.members("workers")
            assert [(m.owner, m.metadata) for m in infos] == [("a", {"role": "y"}), ("b", {})]
            await member.leave()
            left = await watch.next(timeout=5)
            assert isinstance(left, Left) and left.member.fence == member.fence
            assert member.status == "released" and other.status == "held"
            await member.leave()  # again: harmless
            with pytest.raises(accord.LeaseLost):
                await member.update_metadata({})
        event = await watch.next(timeout=5)
        assert isinstance(event, Left) and event.member.owner == "b"
        with pytest.raises(accord.Timeout):
            await watch.next(timeout=0.1)
        # A read cancelled loses nothing: the next read gets the event.
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(watch.next(), 0.05)
        async with a.join("workers"):
            event = await watch.next(timeout=5)
            assert isinstance(event, Joined) and event.member.owner == "a"
    assert watch.closed
    assert [e async for e in watch] == []  # iteration ends once closed
    with pytest.raises(accord.Closed):
        await watch.next()


async def test_watch_reads_timed_out_or_cancelled_lose_no_change(aclients: AsyncClients) -> None:
    """M2: a read that times out or is cancelled by asyncio half-way (after taking the
    announcement) loses nothing: the change comes at the next read, well before the 30 s
    safety re-read."""
    a, b = await aclients("a"), await aclients("b")

    async def poll(watch: accord.AsyncMemberWatch, turn: int) -> Any:
        started = time.monotonic()
        while True:
            try:
                if turn % 2:
                    return await asyncio.wait_for(watch.next(), 0.001)
                return await watch.next(timeout=0.001)
            except (accord.Timeout, asyncio.TimeoutError):
                assert time.monotonic() - started < 10, "a cancelled read lost the change"

    async with b.watch("workers") as watch:
        first = await poll(watch, 0)
        assert isinstance(first, Members) and first.members == []
        for turn in range(4):
            member = await a.join("workers", ttl=60)
            joined = await poll(watch, turn)
            assert isinstance(joined, Joined) and joined.member.fence == member.fence
            await member.leave()
            left = await poll(watch, turn + 1)
            assert isinstance(left, Left) and left.member.fence == member.fence


async def test_lost_membership_completes_lost(aclients: AsyncClients) -> None:
    client = await aclients("a", ttl=TTL)
    member = await client.join("g", ttl=TTL)
    lost = member.lost
    assert not lost.done()
    await client.close()
    await asyncio.wait_for(lost, 5)
    assert member.is_lost and member.lost_reason == "client_closed"


async def test_two_members_split_8_shards_and_close_hands_back(aclients: AsyncClients) -> None:
    holds: dict[int, set[str]] = {0: set(), 1: set()}
    log: list[tuple[int, FleetEvent]] = []

    async def run(i: int, fleet: AsyncFleet) -> None:
        async for event in fleet:
            log.append((i, event))
            if isinstance(event, Assigned):
                holds[i].add(event.shard)
            else:
                holds[i].discard(event.shard)

    async def settle(expected: dict[int, int]) -> None:
        deadline = time.monotonic() + PATIENCE
        while any(len(holds[i]) != n for i, n in expected.items()):
            assert time.monotonic() < deadline, holds
            await asyncio.sleep(0.05)

    f1 = await open_fleet(aclients, "m1")
    t1 = asyncio.create_task(run(0, f1))
    await settle({0: SHARDS})
    async with await open_fleet(aclients, "m2") as f2:
        t2 = asyncio.create_task(run(1, f2))
        await settle({0: SHARDS // 2, 1: SHARDS // 2})
        assert sorted(holds[0] | holds[1]) == sorted(str(i) for i in range(SHARDS))
        assert sorted(f1.shards()) == sorted(holds[0])
        assert [m.owner for m in await f2.members()] == ["m1", "m2"]
        handed = [e for i, e in log if i == 0 and isinstance(e, Revoked)]
        assert {e.reason for e in handed} == {"handoff"} and len(handed) == SHARDS // 2
        # Closing f1 hands its shards back (Revoked closed, then its loop ends); f2 takes them.
        await f1.close()
        await asyncio.wait_for(t1, 5)
        assert f1.closed and f1.shards() == [] and holds[0] == set()
        closed = [e for i, e in log if i == 0 and isinstance(e, Revoked) and e.reason == "closed"]
        assert len(closed) == SHARDS // 2
        await settle({1: SHARDS})
    await asyncio.wait_for(t2, 5)
    assert f2.closed and holds[1] == set()


async def test_a_newcomer_gets_a_shard_by_handoff(aclients: AsyncClients, admin: Database) -> None:
    f1 = await open_fleet(aclients, "m1", handoff_timeout=30)
    for _ in range(SHARDS):
        assert isinstance(await f1.next_event(timeout=PATIENCE), Assigned)
    async with await open_fleet(aclients, "m2") as f2:
        revoked = await f1.next_event(timeout=PATIENCE)
        assert isinstance(revoked, Revoked) and revoked.reason == "handoff"
        # Not acknowledged: f2 gets nothing, and a read cancelled meanwhile loses nothing.
        with pytest.raises(accord.Timeout):
            await f2.next_event(timeout=4 * PERIOD)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(f2.next_event(), 0.05)
        key = f"accord.fleet/f/s/{revoked.shard}"
        assert admin.holder(aclients.sc.namespace, key) == "m1"
        reading = asyncio.ensure_future(f1.next_event(timeout=PATIENCE))  # acknowledges
        assigned = await f2.next_event(timeout=TTL)
        assert isinstance(assigned, Assigned) and assigned.shard == revoked.shard
        assert assigned.lease.fence > revoked.fence
        await reading
        await f1.close()


async def test_bad_input_names_the_field(aclients: AsyncClients) -> None:
    client = await aclients("bad")
    with pytest.raises(accord.InvalidArgument, match="invalid shards"):
        await client.fleet("f", 0)
    with pytest.raises(accord.InvalidArgument, match="invalid keys"):
        await client.fleet("f", keys=["a", "a"])
    with pytest.raises(accord.InvalidArgument, match="invalid ttl"):
        await client.fleet("f", 4, ttl=0.01)
    with pytest.raises(accord.InvalidArgument, match="invalid ttl"):
        await client.join("g", ttl=100_000)
    with pytest.raises(accord.InvalidArgument, match="invalid group"):
        await client.members("")
