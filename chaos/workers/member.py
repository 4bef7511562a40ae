"""The chaos run's Python fleet member (chaos/run.py starts it; see docs/reliability.md): opens
the fleet CHAOS_FLEET of CHAOS_SHARDS shards (ttl CHAOS_TTL_MS) and, for every shard assigned,
makes a fenced write to the shard's row of the resource table (its key is the shard's lease
key) through a plain connection of its own, until killed.

JSON lines on stdout: `assigned` (key, shard, fence), `write` (key, fence, accepted),
`revoked` (shard, reason, fence). The checker judges the shards from the lease audit (no shard
granted while another member's grant of it was live) and times the rebalancing after a kill -9
from it; the reports only say which shards the member held when it was killed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import accord
import psycopg
from worker import Writer


def say(**event: Any) -> None:
    event["t"] = time.time()
    print(json.dumps(event), flush=True)


def shard_check(namespace: str, key: str, fence: int) -> Callable[[psycopg.Connection[Any]], None]:
    """accord's check_fence called directly: a shard's lease has no `fenced` helper of its own
    (the function is the same one the helper runs)."""

    def check(db: psycopg.Connection[Any]) -> None:
        db.execute("SELECT accord.check_fence(%s, %s, %s)", (namespace, key, fence))

    return check


def main() -> None:
    url, name = os.environ["CHAOS_URL"], os.environ["CHAOS_NAME"]
    ttl = int(os.environ["CHAOS_TTL_MS"]) / 1000
    writer = Writer(os.environ["CHAOS_WRITER_URL"], name)
    namespace = os.environ["CHAOS_NAMESPACE"]
    while True:  # the server may be restarting or failing over when a worker starts
        try:
            client = accord.Client.connect(url, namespace=namespace, owner=name, ttl=ttl)
            fleet = client.fleet(
                os.environ["CHAOS_FLEET"], int(os.environ["CHAOS_SHARDS"]), ttl=ttl
            )
            break
        except accord.AccordError as e:
            say(ev="error", op="connect", err=str(e)[:200])
            time.sleep(0.5)
    say(ev="start", w=name)
    # Asking for the next event acknowledges this one (a hand-off is released then): the write
    # of an assignment is made first.
    for event in fleet:
        if isinstance(event, accord.Revoked):
            say(ev="revoked", shard=event.shard, reason=event.reason, fence=event.fence)
            continue
        key, fence = event.lease.key, event.lease.fence
        say(ev="assigned", key=key, shard=event.shard, fence=fence)
        try:
            accepted = writer.write(key, fence, shard_check(namespace, key, fence))
            say(ev="write", key=key, fence=fence, accepted=accepted)
        except (psycopg.Error, accord.AccordError) as e:
            say(ev="write_error", key=key, fence=fence, err=str(e)[:200])
    say(ev="error", op="fleet", err="the fleet ended")
    raise SystemExit(3)


if __name__ == "__main__":
    main()
