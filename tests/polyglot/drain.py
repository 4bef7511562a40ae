"""A Python worker of the polyglot pool run: claim BATCH → 1 ms of work → done, until the pool
is empty. Prints ``CLAIMED <n>`` after its first claim and waits for a line on stdin before it
works (the run starts the work once every worker holds keys), then ``DONE <key> <fence>`` per
key, and at the end ``STATS <claims> <their calls> <all calls>`` (claim calls, the store calls
made during them, the client's calls in all: its stats' ``statements``) and ``DRAINED <n>``.

    python drain.py URL NAMESPACE PREFIX BATCH
"""

from __future__ import annotations

import os
import sys
import time

import accord


def main() -> None:
    url, namespace, prefix, batch = (
        sys.argv[1],
        sys.argv[2],
        sys.argv[3],
        int(sys.argv[4]),
    )
    owner = f"python-{os.getpid()}"
    finished = 0
    first = True
    claims = claim_calls = 0  # the claims' share of the client's calls to the store
    with accord.Client.connect(url, namespace=namespace, owner=owner, ttl=30) as client:
        while True:
            before = client.stats().statements
            leases = client.claim(prefix, limit=batch, ttl=30, timeout=0.2)
            claims += 1
            claim_calls += client.stats().statements - before
            if first:
                first = False
                print(f"CLAIMED {len(leases)}", flush=True)
                sys.stdin.readline()
            if not leases:
                counts = client.counts(prefix)
                if counts.free + counts.held == 0:
                    break
                continue
            for lease in leases:
                time.sleep(0.001)
                print(f"DONE {lease.key} {lease.fence}", flush=True)
                lease.done()
                finished += 1
        print(f"STATS {claims} {claim_calls} {client.stats().statements}", flush=True)
    print(f"DRAINED {finished}", flush=True)


if __name__ == "__main__":
    main()
