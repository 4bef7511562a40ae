"""The chaos run's source (chaos/run.py starts it; see docs/reliability.md): what the listeners
and the stream readers receive.

Two threads, until killed:

- the notifier, through a plain SQL connection of its own (CHAOS_WRITER_URL): one transaction
  per message, `INSERT INTO chaos_notify_audit (n, at) …` then `pg_notify(CHAOS_CHANNEL, n)`,
  so the server's record of what was sent is exactly the set of committed notifications. After
  an error it reconnects and goes on after the larger of the record's last n and its own last
  attempt: an n is never sent twice, even when a commit's answer was lost;
- the publisher, an accord client appending `<name>:<i>` to CHAOS_STREAM with `publish`, one
  event at a time, i increasing whether or not the publish answered (a publish that failed on
  the connection may or may not be stored; accord never repeats it).

Each step is a JSON line on stdout (`published` with i and seq, errors); the checker judges from
the audit table and the stream's own table, the reports only say what was acknowledged.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import accord
import psycopg

#: Between two messages (and two publishes): about 20 a second each, few enough for a loaded
#: two-core machine with fsync and a synchronous standby.
PERIOD = 0.05


def say(**event: Any) -> None:
    event["t"] = time.time()
    print(json.dumps(event), flush=True)


def notifier(url: str, channel: str) -> None:
    db: psycopg.Connection[Any] | None = None
    last = 0
    while True:
        try:
            if db is None or db.closed:
                db = psycopg.connect(
                    url, autocommit=True, application_name="chaos-source", connect_timeout=3
                )
                row = db.execute("SELECT coalesce(max(n), 0) FROM chaos_notify_audit").fetchone()
                last = max(last, row[0] if row else 0)
            last += 1
            with db.transaction():
                db.execute(
                    "INSERT INTO chaos_notify_audit (n, at) VALUES (%s, clock_timestamp())",
                    (last,),
                )
                db.execute("SELECT pg_notify(%s, %s)", (channel, str(last)))
        except psycopg.Error as e:
            say(ev="error", op="notify", err=str(e)[:200])
            if db is not None:
                db.close()
            time.sleep(0.2)
            continue
        time.sleep(PERIOD)


def publisher(client: accord.Client, stream: str, name: str) -> None:
    i = 0
    while True:
        i += 1
        try:
            seq = client.publish(stream, f"{name}:{i}")
            say(ev="published", i=i, seq=seq)
        except accord.AccordError as e:
            say(ev="error", op="publish", i=i, err=str(e)[:200])
            time.sleep(0.2)
            continue
        time.sleep(PERIOD)


def main() -> None:
    url, name = os.environ["CHAOS_URL"], os.environ["CHAOS_NAME"]
    while True:  # the server may be restarting or failing over when a worker starts
        try:
            client = accord.Client.connect(url, namespace=os.environ["CHAOS_NAMESPACE"], owner=name)
            break
        except accord.AccordError as e:
            say(ev="error", op="connect", err=str(e)[:200])
            time.sleep(0.5)
    say(ev="start", w=name)
    threading.Thread(
        target=notifier,
        args=(os.environ["CHAOS_WRITER_URL"], os.environ["CHAOS_CHANNEL"]),
        daemon=True,
    ).start()
    publisher(client, os.environ["CHAOS_STREAM"], name)


if __name__ == "__main__":
    main()
