"""Uncontended try_acquire + release on one key through the Python binding: the counterpart of
core/examples/loopback_latency.rs (same schema, pool size and key), to run side by side with it.
A quick look, not the benchmark suite:

    ACCORD_URL=postgres://… python benchmarks/loopback_latency.py [rounds]
    ACCORD_URL=postgres://… cargo run --release -p accord-coord --example loopback_latency [rounds]
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import accord


def report(name: str, samples: list[float], total: float) -> None:
    samples.sort()

    def pct(p: float) -> float:
        return samples[round((len(samples) - 1) * p)] * 1e6

    print(
        f"{name:<34} {len(samples) / total:>9.0f} pairs/s"
        f"   p50 {pct(0.5):>7.1f} µs   p99 {pct(0.99):>7.1f} µs",
        flush=True,
    )


def sync_rounds(client: accord.Client, rounds: int) -> tuple[list[float], float]:
    samples = []
    started = time.perf_counter()
    for _ in range(rounds):
        t = time.perf_counter()
        lease = client.try_acquire("k")
        assert lease is not None, "held"
        lease.release()
        samples.append(time.perf_counter() - t)
    return samples, time.perf_counter() - started


async def async_rounds(client: accord.AsyncClient, rounds: int) -> tuple[list[float], float]:
    samples = []
    started = time.perf_counter()
    for _ in range(rounds):
        t = time.perf_counter()
        lease = await client.try_acquire("k")
        assert lease is not None, "held"
        await lease.release()
        samples.append(time.perf_counter() - t)
    return samples, time.perf_counter() - started


async def run_async(url: str, rounds: int) -> None:
    async with accord.AsyncClient.connect(url, schema="accord_latency", pool_size=1) as client:
        for round in range(3):
            samples, total = await async_rounds(client, rounds)
            if round > 0:
                report("python AsyncClient try_acquire+release", samples, total)


def main() -> None:
    url = os.environ["ACCORD_URL"]
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    with accord.Client.connect(url, schema="accord_latency", pool_size=1) as client:
        for round in range(3):
            samples, total = sync_rounds(client, rounds)
            if round > 0:
                report("python Client try_acquire+release", samples, total)
    asyncio.run(run_async(url, rounds))


if __name__ == "__main__":
    main()
