"""A Python writer of the polyglot fenced run (tests/polyglot/fenced.py): loops acquire one of
KEYS (ttl TTL_MS) → ``HELD <key> <fence>`` → waits for a line on standard input → inserts
``(key, fence, writer)`` into TABLE, which accord's trigger ``fenced_write`` guards →
``WROTE <key> <fence> <1|0>`` (accepted, or refused with ``AC001``) → release. It ends at the end
of its standard input.

    python fenced_worker.py URL NAMESPACE fenced KEYS TTL_MS TABLE
"""

from __future__ import annotations

import os
import random
import sys

import accord
import psycopg
from psycopg import sql

#: The trigger's SQLSTATE: the row's fence is not its key's live grant.
FENCE_REFUSED = "AC001"


def main() -> None:
    url, namespace, _mode, keys, ttl_ms, table = sys.argv[1:7]
    owner = f"python-{os.getpid()}"
    ttl = int(ttl_ms) / 1000
    insert = sql.SQL("INSERT INTO {} (key, fence, writer) VALUES (%s, %s, %s)").format(
        sql.Identifier(table)
    )
    with (
        accord.Client.connect(url, namespace=namespace, owner=owner, ttl=ttl) as client,
        psycopg.connect(url, autocommit=True) as db,
    ):
        while True:
            key = random.choice(keys.split(","))
            try:
                lease = client.acquire(key, ttl=ttl, timeout=10.0)
            except accord.Timeout:
                continue
            print(f"HELD {key} {lease.fence}", flush=True)
            if not sys.stdin.readline():
                return
            try:
                db.execute(insert, (key, lease.fence, owner))
                accepted = 1
            except psycopg.Error as e:
                if e.sqlstate != FENCE_REFUSED:
                    raise
                accepted = 0
            print(f"WROTE {key} {lease.fence} {accepted}", flush=True)
            try:
                lease.release()
            except accord.LeaseLost:
                pass


if __name__ == "__main__":
    main()
