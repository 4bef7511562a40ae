"""The demo's Python worker: python worker.py URL NAMESPACE NAME TASKS (see demo/README.md)."""

from __future__ import annotations

import json
import random
import sys
import time

import accord

TTL = 2.0  # seconds: a killed worker's task is free again after at most this long
BATCH = 50
CLAIM = 3  # tasks claimed at once
CLAIM_WAIT = 0.5  # seconds a claim waits for a task to come free


def say(**event: object) -> None:
    print(json.dumps(event), flush=True)


def main() -> None:
    url, namespace, name, tasks = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    offered = 0  # batches this worker offered so far
    completed = 0
    with accord.Client.connect(url, namespace=namespace, owner=name, ttl=TTL) as client:
        say(ev="start", worker=name, lang="python")
        # Every worker offers every task: idempotent, the first offer makes the pool.
        client.offer("task/", [f"task/{i:03}" for i in range(tasks)])
        while True:
            leases = client.claim("task/", limit=CLAIM, ttl=TTL, timeout=CLAIM_WAIT)
            if not leases:
                # Nothing claimable in time: finished once nothing is free or held (a killed
                # worker's task counts as held until its ttl expires, then as free).
                counts = client.counts("task/")
                if counts.free == 0 and counts.held == 0:
                    break
                continue
            for lease in leases:
                key = lease.key
                say(ev="acquired", worker=name, key=key, fence=lease.fence)
                time.sleep(random.uniform(0.02, 0.06))  # the "work"
                try:
                    # Fenced by the core: refused (LeaseLost) if the lease was lost meanwhile.
                    lease.done({"worker": name, "lang": "python", "fence": lease.fence})
                except accord.LeaseLost:
                    say(ev="lost", worker=name, key=key, fence=lease.fence)
                    continue
                say(ev="done", worker=name, key=key, fence=lease.fence)
                completed += 1
                offered = announce(client, name, offered)
        say(ev="exit", worker=name, completed=completed)


def announce(client: accord.Client, name: str, offered: int) -> int:
    """Every BATCH completions, one worker notifies: the announcements are a work pool too.

    Whoever sees a batch complete offers its key to the pool `batch/` (idempotent: others may
    offer it too); whoever claims it announces it and marks it done, so each is announced once.
    A worker killed holding one loses it at its ttl, and the next claim takes it. Returns the
    batches offered so far.
    """
    ready = client.counts("task/").done // BATCH
    if ready > offered:
        client.offer("batch/", [f"batch/{b}" for b in range(offered + 1, ready + 1)])
    if ready == 0:
        return ready
    for lease in client.claim("batch/", limit=ready, ttl=TTL):
        batch = int(lease.key.removeprefix("batch/"))
        client.notify("demo", f"batch {batch} finished by {name}")
        lease.done({"worker": name})
        say(ev="notify", worker=name, batch=batch)
    return ready


if __name__ == "__main__":
    main()
