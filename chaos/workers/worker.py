"""The chaos run's Python worker (chaos/run.py starts it; see docs/reliability.md).

Loops until killed: acquire one of CHAOS_KEYS (waiting up to 3 s, ttl CHAOS_TTL_MS), a little
work, a fenced write to the resource table through a plain connection of its own (one
transaction: `lease.fenced(conn)`, accord's check_fence, then the UPDATE; accepted iff the
check passed and the row's fence was smaller), a little more work, release. With CHAOS_POOL
set it also claims from the work pool CHAOS_POOL (offered by the orchestrator) and marks each
claim done. Every step is a JSON line on stdout; nothing else is judged from them but the
refused writes, the lost reports and the timing of those.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import accord
import psycopg

WRITE = "UPDATE chaos_resource SET fence = %s, writer = %s WHERE key = %s AND fence < %s"
#: check_fence's SQLSTATE: the fence is not the key's live grant.
FENCE_REFUSED = "AC001"


def say(**event: Any) -> None:
    event["t"] = time.time()
    print(json.dumps(event), flush=True)


def watch(lease: accord.Lease) -> None:
    """Reports the lost signal the moment it fires (the thread ends with the lease)."""
    lease.wait_lost()
    if lease.is_lost:
        say(ev="lost", key=lease.key, fence=lease.fence, how="signal")


class Writer:
    """The worker's own plain SQL connection to the resource, reconnected after an error."""

    def __init__(self, url: str, name: str) -> None:
        self.url, self.name = url, name
        self.db: psycopg.Connection[Any] | None = None

    def write(self, key: str, fence: int, check: Callable[[psycopg.Connection[Any]], None]) -> bool:
        """The fenced write: `check` (accord's check_fence) and the UPDATE in one transaction.
        False when the check refused the lease (rolled back, nothing written) or the row's
        fence was not smaller."""
        if self.db is None or self.db.closed:
            self.db = psycopg.connect(
                self.url, autocommit=True, application_name="chaos-writer", connect_timeout=3
            )
        try:
            with self.db.transaction():
                check(self.db)
                cursor = self.db.execute(WRITE, (fence, self.name, key, fence))
                return cursor.rowcount == 1
        except accord.LeaseLost:
            return False
        except psycopg.Error as e:
            if e.sqlstate == FENCE_REFUSED:
                return False
            self.db.close()
            raise
        except Exception:
            self.db.close()
            raise


def main() -> None:
    url, name = os.environ["CHAOS_URL"], os.environ["CHAOS_NAME"]
    keys = os.environ["CHAOS_KEYS"].split(",")
    ttl = int(os.environ["CHAOS_TTL_MS"]) / 1000
    pool = os.environ.get("CHAOS_POOL")
    rng = random.Random(os.environ.get("CHAOS_SEED", name))
    writer = Writer(os.environ["CHAOS_WRITER_URL"], name)
    while True:  # the server may be restarting or failing over when a worker starts
        try:
            client = accord.Client.connect(
                url, namespace=os.environ["CHAOS_NAMESPACE"], owner=name, ttl=ttl
            )
            break
        except accord.AccordError as e:
            say(ev="error", op="connect", err=str(e)[:200])
            time.sleep(0.5)
    say(ev="start", w=name)
    round_ = 0
    while True:
        round_ += 1
        try:
            if pool and round_ % 3 == 0:
                claim(client, pool, ttl, rng)
                continue
            key = rng.choice(keys)
            lease = client.acquire(key, ttl=ttl, timeout=3.0)
        except accord.Timeout:
            continue
        except accord.AccordError as e:  # the coordinator restarting, failing over, cut off
            say(ev="error", op="acquire", err=str(e)[:200])
            time.sleep(0.2)
            continue
        say(ev="granted", key=key, fence=lease.fence)
        threading.Thread(target=watch, args=(lease,), daemon=True).start()
        time.sleep(rng.uniform(0.02, 0.15))
        try:
            accepted = writer.write(key, lease.fence, lease.fenced)
            say(ev="write", key=key, fence=lease.fence, accepted=accepted)
        except (psycopg.Error, accord.AccordError) as e:
            say(ev="write_error", key=key, fence=lease.fence, err=str(e)[:200])
        time.sleep(rng.uniform(0.01, 0.05))
        try:
            lease.release()
            say(ev="released", key=key, fence=lease.fence)
        except accord.LeaseLost:
            say(ev="lost", key=key, fence=lease.fence, how="release")
        except accord.AccordError as e:
            say(ev="error", op="release", err=str(e)[:200])


def claim(client: accord.Client, pool: str, ttl: float, rng: random.Random) -> None:
    for lease in client.claim(pool, limit=2, ttl=ttl, timeout=0.5):
        say(ev="claimed", key=lease.key, fence=lease.fence)
        time.sleep(rng.uniform(0.01, 0.05))
        try:
            lease.done({"fence": lease.fence})
            say(ev="done", key=lease.key, fence=lease.fence)
        except accord.LeaseLost:
            say(ev="lost", key=lease.key, fence=lease.fence, how="done")


if __name__ == "__main__":
    main()
