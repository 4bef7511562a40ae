"""A Python member of the polyglot fleet run: opens the fleet FLEET with SHARDS shards and
prints one line per event, flushed at once:

    READY <owner>                      once the fleet is open
    ASSIGNED <shard> <fence>
    WROTE <shard> <fence> <accepted 0|1>   the fenced write of each assignment
    REVOKED <shard> <reason> <fence>   reason: handoff | lost | closed
    CLOSED                             after SIGTERM or stdin EOF: the fleet closed (its
                                       Revoked closed lines first), then the client

The fenced write goes to the table fleet_resource(shard, fence, owner), which the harness
creates: the row takes the write only if its fence is smaller than this grant's.

    python fleet_worker.py URL NAMESPACE FLEET SHARDS TTL_MS PERIOD_MS
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

import accord

try:
    import psycopg

    HAVE_DRIVER = True
except ImportError:  # no driver: the events are still printed, without the writes
    HAVE_DRIVER = False

WRITE = (
    "INSERT INTO fleet_resource(shard, fence, owner) VALUES (%s, %s, %s) "
    "ON CONFLICT (shard) DO UPDATE SET fence = EXCLUDED.fence, owner = EXCLUDED.owner "
    "WHERE fleet_resource.fence < EXCLUDED.fence"
)
#: How often the event loop looks at the stop flag while no event comes.
POLL = 0.1

stop = threading.Event()


def say(line: str) -> None:
    print(line, flush=True)


def report(event: accord.FleetEvent) -> None:
    if isinstance(event, accord.Assigned):
        say(f"ASSIGNED {event.shard} {event.lease.fence}")
    else:
        say(f"REVOKED {event.shard} {event.reason} {event.fence}")


def on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    stop.set()


def watch_stdin() -> None:
    """Stops the worker when its standard input ends."""
    while sys.stdin.readline():
        pass
    stop.set()


def main() -> None:
    url, namespace, name = sys.argv[1], sys.argv[2], sys.argv[3]
    shards, ttl_ms, period_ms = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    ttl, period = ttl_ms / 1000, period_ms / 1000
    owner = f"python-{os.getpid()}"
    signal.signal(signal.SIGTERM, on_sigterm)
    threading.Thread(target=watch_stdin, daemon=True).start()
    # The fenced resource is a PostgreSQL table the test run creates (ACCORD_FLEET_WRITES=1);
    # the demo has none.
    writes = os.environ.get("ACCORD_FLEET_WRITES") == "1"
    db: Any = psycopg.connect(url, autocommit=True) if HAVE_DRIVER and writes else None
    if db is None and writes:
        print(
            "fleet_worker: psycopg is not installed: no fenced writes", file=sys.stderr
        )
    client = accord.Client.connect(url, namespace=namespace, owner=owner, ttl=ttl)
    fleet = client.fleet(name, shards, ttl=ttl, period=period)
    say(f"READY {owner}")
    # Each read acknowledges the event before it: a shard revoked for a hand-off is released
    # once its line is out. Timeouts only let the loop look at the stop flag.
    while not stop.is_set():
        try:
            event = fleet.next_event(timeout=POLL)
        except accord.Timeout:
            continue
        if event is None:  # the fleet stopped on its own (its client closed)
            break
        report(event)
        if isinstance(event, accord.Assigned) and db is not None:
            with db.cursor() as cur:
                cur.execute(WRITE, (event.shard, event.lease.fence, owner))
                accepted = 1 if cur.rowcount > 0 else 0
                say(f"WROTE {event.shard} {event.lease.fence} {accepted}")
    fleet.close()
    # What was still queued, then Revoked closed for every shard it held.
    for event in fleet:
        report(event)
    client.close()
    if db is not None:
        db.close()
    say("CLOSED")


if __name__ == "__main__":
    main()
