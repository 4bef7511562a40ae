"""Stats (docs/semantics.md, "Stats: what a client did"): after a known sequence the counters
are exact, through the sync Client and the asyncio AsyncClient."""

from __future__ import annotations

import time

import pytest
from support import AsyncClients, Clients

import accord


def test_stats_count_what_the_client_did(clients: Clients) -> None:
    o1, o2 = clients("o1"), clients("o2")
    fresh = o1.stats()
    assert isinstance(fresh, accord.Stats)
    assert (fresh.acquires, fresh.grants, fresh.refusals, fresh.releases) == (0, 0, 0, 0)
    assert fresh.hold_time.count == 0 and fresh.hold_time.max == 0.0

    lease = o1.try_acquire("a", ttl=60)
    assert lease is not None
    assert o2.try_acquire("a", ttl=60) is None
    time.sleep(0.02)
    lease.release()

    s1 = o1.stats()
    assert (s1.acquires, s1.grants, s1.refusals, s1.releases) == (1, 1, 0, 1)
    assert (s1.timeouts, s1.cancellations, s1.lost, s1.done, s1.notifications) == (0, 0, 0, 0, 0)
    assert s1.acquire_wait.count == 1
    hold = s1.hold_time
    assert isinstance(hold, accord.Histogram)
    assert hold.count == 1
    # Seconds, as a float: held for at least the 20 ms slept, and well under a minute.
    assert isinstance(hold.max, float) and 0.02 <= hold.max < 60
    assert hold.sum == hold.max and hold.p50 <= hold.max and hold.p99 <= hold.max
    assert s1.statements >= 2
    assert s1.statement_time.count == s1.statements
    assert isinstance(s1.statements, int)

    s2 = o2.stats()
    assert (s2.acquires, s2.grants, s2.refusals, s2.releases) == (1, 0, 1, 0)
    assert s2.acquire_wait.count == 0
    assert s2.statement_time.count == s2.statements

    text = repr(s1)
    assert text.startswith("Stats(acquires=1, grants=1, refusals=0, ")
    assert "releases=1" in text and "hold_time=Histogram(count=1, " in text

    # Frozen: nothing to set.
    with pytest.raises(AttributeError):
        s1.grants = 5  # type: ignore[misc]

    # A closed client still answers, with what it did.
    o2.close()
    assert (o2.stats().acquires, o2.stats().refusals) == (1, 1)


async def test_async_stats_count_what_the_client_did(aclients: AsyncClients) -> None:
    o1, o2 = await aclients("o1"), await aclients("o2")
    lease = await o1.try_acquire("a", ttl=60)
    assert lease is not None
    assert await o2.try_acquire("a", ttl=60) is None
    await lease.release()
    s1, s2 = o1.stats(), o2.stats()  # not awaited: it reads counters
    assert (s1.acquires, s1.grants, s1.refusals, s1.releases) == (1, 1, 0, 1)
    assert (s1.acquire_wait.count, s1.hold_time.count) == (1, 1)
    assert s1.statement_time.count == s1.statements
    assert (s2.acquires, s2.grants, s2.refusals, s2.releases) == (1, 0, 1, 0)
