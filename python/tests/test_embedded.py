"""Every store opens by URL: the embedded SQLite file (shared by processes) and memory:."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import accord
from accord import Message


@pytest.mark.parametrize("store", ["sqlite", "memory"])
def test_sync_client_on_an_embedded_store(tmp_path: Path, store: str) -> None:
    url = f"sqlite://{tmp_path / 'accord.db'}" if store == "sqlite" else "memory:py-sync"
    with accord.Client.connect(url) as a, accord.Client.connect(url) as b:
        lease = a.try_acquire("k", ttl=5)
        assert lease is not None
        assert b.try_acquire("k") is None
        with b.listen("py_embedded") as sub:
            lease.done({"by": "python"})
            a.notify("py_embedded", "done")
            assert sub.recv(timeout=5) == Message("py_embedded", "done")
        with pytest.raises(accord.Done):
            b.try_acquire("k")
        [info] = b.list(state="done")
        assert info.metadata == {"by": "python"}
        assert b.reset("k")


def test_async_client_on_memory() -> None:
    async def scenario() -> None:
        client = await accord.AsyncClient.connect("memory:py-async")
        async with client, client.acquire("k", timeout=5) as lease:
            assert lease.fence > 0
            assert await client.try_acquire("k") is None

    asyncio.run(scenario())
