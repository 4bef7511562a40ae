"""A Python worker of the polyglot waiting run: waits in a key's line, or campaigns in an
election, and prints one line per step, flushed at once:

    READY <owner>
    GRANTED <fence>            (wait)  its turn came
    LEADER <fence>             (campaign)  it leads
    LOST                       the lease or leadership was lost while held
    RELEASED <wake-ups>        (wait) after a line on standard input: released; how many times
                               a release woke this worker's waiting acquire
    RESIGNED                   (campaign) after a line on standard input: resigned

    python waiting_worker.py URL NAMESPACE wait KEY TTL_MS [shared]
    python waiting_worker.py URL NAMESPACE campaign NAME VALUE TTL_MS
"""

from __future__ import annotations

import os
import sys
import threading

import accord


def say(line: str) -> None:
    print(line, flush=True)


def until_told_or_lost(lost: accord.LostSignal) -> None:
    """Waits for a line (or EOF) on standard input; says LOST if the lease is lost first."""
    told = threading.Event()

    def read() -> None:
        sys.stdin.readline()
        told.set()

    threading.Thread(target=read, daemon=True).start()
    while not told.wait(0.05):
        if lost.is_set():
            say("LOST")
            told.wait()
            return


def main() -> None:
    url, namespace, mode, *args = sys.argv[1:]
    owner = f"python-{os.getpid()}"
    client = accord.Client.connect(url, namespace=namespace, owner=owner)
    say(f"READY {owner}")
    if mode == "wait":
        key, ttl_ms = args[0], int(args[1])
        shared = args[2:] == ["shared"]
        lease = client.acquire(key, ttl=ttl_ms / 1000, shared=shared)
        say(f"GRANTED {lease.fence}")
        until_told_or_lost(lease.lost)
        try:
            lease.release()
        except accord.LeaseLost:
            pass
        say(f"RELEASED {client.waiter_wakeups()}")
    elif mode == "campaign":
        name, value, ttl_ms = args[0], args[1], int(args[2])
        leadership = client.election(name).campaign(value, ttl=ttl_ms / 1000)
        say(f"LEADER {leadership.fence}")
        until_told_or_lost(leadership.lost)
        try:
            leadership.resign()
        except accord.LeaseLost:
            pass
        say("RESIGNED")
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    client.close()


if __name__ == "__main__":
    main()
