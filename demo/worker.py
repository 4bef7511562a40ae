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
    announced: set[int] = set()
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
                announce(client, name, announced)
        say(ev="exit", worker=name, completed=completed)


def announce(client: accord.Client, name: str, announced: set[int]) -> None:
    """Every BATCH completions, one worker (whoever gets the batch's key first) notifies."""
    done = client.counts("task/").done
    for batch in range(1, done // BATCH + 1):
        if batch in announced:
            continue
        try:
            lease = client.try_acquire(f"batch/{batch}")
        except accord.Done:
            announced.add(batch)
            continue
        if lease is None:
            continue
        client.notify("demo", f"batch {batch} finished by {name}")
        lease.done({"worker": name})
        say(ev="notify", worker=name, batch=batch)
        announced.add(batch)


if __name__ == "__main__":
    main()
