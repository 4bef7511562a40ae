"""Closing a client ends its leases (docs/semantics.md, G12): the leases held at the close
are given back and their lost signal fires; afterwards renew, release and done on any lease of
the client raise Closed; a scope guard's exit raises it too unless its block raised."""

from __future__ import annotations

import asyncio

import pytest
from support import AsyncClients, Clients

import accord


def test_close_ends_every_lease(clients: Clients) -> None:
    o1 = clients("o1")
    held = o1.acquire("held", ttl=60)
    released = o1.acquire("released", ttl=60)
    released.release()
    o1.close()
    assert held.wait_lost(timeout=5)
    assert held.is_lost and held.lost
    assert not released.is_lost
    for lease in (held, released):
        for call in (lease.renew, lease.release, lease.done):
            with pytest.raises(accord.Closed):
                call()
    assert clients("o2").try_acquire("held", ttl=60) is not None


def test_a_with_block_whose_client_closed_raises_closed(clients: Clients) -> None:
    o1 = clients("o1")
    with pytest.raises(accord.Closed), o1.acquire("a", ttl=60):
        o1.close()
    # The block's own error wins over the release's.
    o2 = clients("o2")
    with pytest.raises(KeyError), o2.acquire("b", ttl=60):
        o2.close()
        raise KeyError("the block's")


async def test_close_ends_every_lease_async(aclients: AsyncClients) -> None:
    o1 = await aclients("o1")
    held = await o1.acquire("held", ttl=60)
    released = await o1.acquire("released", ttl=60)
    await released.release()
    await o1.close()
    await asyncio.wait_for(held.lost, timeout=5)
    assert held.is_lost
    assert not released.is_lost
    for lease in (held, released):
        with pytest.raises(accord.Closed):
            await lease.renew()
        with pytest.raises(accord.Closed):
            await lease.release()
        with pytest.raises(accord.Closed):
            await lease.done()
    o2 = await aclients("o2")
    assert await o2.try_acquire("held", ttl=60) is not None
