"""How a lease ends, as the core says it (docs/semantics.md, G4 and G12): ``status`` and
``lost_reason``, and the lost signal, whose waits end when the lease ends in any way and report
a loss only if it ended lost. The same surface in both APIs: ``is_lost`` is the bool; the sync
``lost`` is a ``LostSignal`` (``is_set``, ``wait``, ``bool``), the async one an awaitable."""

from __future__ import annotations

import asyncio
import gc

import pytest
from support import AsyncClients, Clients, Proxy

import accord


def test_a_released_lease_ends_the_lost_wait_unset(clients: Clients) -> None:
    o1 = clients("o1")
    lease = o1.acquire("a", ttl=60)
    assert (lease.status, lease.lost_reason) == ("held", None)
    lost = lease.lost
    assert isinstance(lost, accord.LostSignal)
    assert lease.lost is lost, "one signal per lease"
    assert not lost and not lost.is_set() and not lease.is_lost
    assert lost.wait(0) is False
    lease.release()
    assert (lease.status, lease.lost_reason) == ("released", None)
    # The lease ended: a wait without a timeout returns at once, unset.
    assert lost.wait() is False
    assert lease.wait_lost() is False
    assert not lost and "unset" in repr(lost)


def test_a_done_lease_ends_the_lost_wait_unset(clients: Clients) -> None:
    lease = clients("o1").acquire("a", ttl=60)
    lease.done({"n": 1})
    assert (lease.status, lease.lost_reason) == ("done", None)
    assert lease.lost.wait() is False
    assert "done" in repr(lease)


def test_a_dropped_lease_ends_the_lost_wait_unset(clients: Clients) -> None:
    o1 = clients("o1")
    lease = o1.acquire("a", ttl=60)
    lost = lease.lost
    del lease
    gc.collect()
    # Dropping the handle released the lease (the core did): the wait ends, unset.
    assert lost.wait() is False
    assert o1.held_count() == 0


def test_close_ends_the_lost_wait_set(clients: Clients) -> None:
    o1 = clients("o1")
    lease = o1.acquire("a", ttl=60)
    lost = lease.lost
    o1.close()
    assert lost.wait() is True
    assert lost and lost.is_set() and lease.is_lost
    assert (lease.status, lease.lost_reason) == ("lost", "client_closed")
    assert "set" in repr(lost) and "lost" in repr(lease)


def test_a_failed_release_leaves_the_lease_watched(clients: Clients, proxy: Proxy) -> None:
    """G4: a release that fails on the way leaves the lease ending (unrenewed), and lost fires
    at its deadline unless a retry succeeds."""
    o1 = clients("o1", url=proxy.url)
    lease = o1.acquire("a", ttl=4)
    proxy.set_cut(True)
    with pytest.raises(accord.Connection):
        lease.release()
    assert lease.status == "ending"
    assert not lease.lost
    # The deadline is under 4 s away; 20 s only bounds a hang.
    assert lease.lost.wait(20)
    assert (lease.status, lease.lost_reason) == ("lost", "not_renewed")
    proxy.set_cut(False)
    with pytest.raises(accord.LeaseLost):
        lease.release()


async def test_async_lease_status(aclients: AsyncClients) -> None:
    o1 = await aclients("o1")
    lease = await o1.acquire("a", ttl=60)
    assert (lease.status, lease.lost_reason, lease.is_lost) == ("held", None, False)
    await lease.release()
    assert (lease.status, lease.lost_reason, lease.is_lost) == ("released", None, False)
    done = await o1.acquire("b", ttl=60)
    await done.done()
    assert done.status == "done"
    held = await o1.acquire("c", ttl=60)
    await o1.close()
    await asyncio.wait_for(held.lost, 5)
    assert (held.status, held.lost_reason, held.is_lost) == ("lost", "client_closed", True)


async def test_a_failed_release_leaves_the_async_lease_watched(
    aclients: AsyncClients, proxy: Proxy
) -> None:
    o1 = await aclients("o1", url=proxy.url)
    lease = await o1.acquire("a", ttl=4)
    lost = lease.lost
    proxy.set_cut(True)
    with pytest.raises(accord.Connection):
        await lease.release()
    assert lease.status == "ending"
    assert not lost.done()
    await asyncio.wait_for(lost, 20)
    assert (lease.status, lease.lost_reason) == ("lost", "not_renewed")
    proxy.set_cut(False)
