"""Quick start (asyncio API): the same calls as the sync API, awaited.

ACCORD_URL=postgres://app:secret@localhost/app python examples/quickstart_async.py

Like the sync quick start, it resets the key it marks done at the end, so that it runs again.
"""

from __future__ import annotations

import asyncio
import os

import accord


async def write_report(lease: accord.AsyncLease) -> None:
    await asyncio.sleep(0.1)  # ... work, passing lease.fence to whatever you write ...


async def main() -> None:
    url = os.environ.get("ACCORD_URL", "postgres://localhost/postgres")
    namespace = os.environ.get("ACCORD_NAMESPACE", "reports")
    async with accord.AsyncClient.connect(url, namespace=namespace, ttl=10) as client:
        try:
            async with client.acquire("daily/2026-11-23", timeout=5) as lease:
                print(f"holding {lease.key} with fence {lease.fence}")
                work = asyncio.create_task(write_report(lease))
                lost = lease.lost
                await asyncio.wait([work, lost], return_when=asyncio.FIRST_COMPLETED)
                if lost.done():
                    work.cancel()
                    raise SystemExit("lost the lease: stopped writing")
                lost.cancel()
                await lease.done({"rows": 42})
        except accord.Done:
            print("already done")

        async with client.listen("jobs") as subscription:
            await client.notify("jobs", "report ready")
            async for event in subscription:
                print(event)
                break

        await client.reset("daily/2026-11-23")  # done is final until reset: now it runs again


if __name__ == "__main__":
    asyncio.run(main())
