"""The polyglot waiting run (X2, X3, E1-E2 across languages): waiters and campaigners in Rust,
Python and Node processes on one PostgreSQL.

- Fair waiting: five waiters in three languages queue on a held key in a known order (each one
  started only once the coordinator shows the one before it in line) and are granted in that
  order; each was woken exactly once (each worker counts its own wake-ups): one wake-up per
  release, no herd.
- Dead and stopped waiters: a waiter killed with SIGKILL and one stopped with SIGSTOP stand in
  the line; the waiter behind them is granted once their places expired (a ttl), and the
  stopped one, resumed, is granted later (it lost its place and queued again).
- Elections: campaigners in three languages; an observer (this process, through the Python
  package) sees every leader once, in order, fences increasing, as the leader resigns, is
  killed with SIGKILL, and is stopped with SIGSTOP past its ttl (which then reports LOST).

    ACCORD_TEST_DATABASE_URL=postgres://... .venv/bin/python tests/polyglot/waiting.py

Needs the Python package installed in the venv, the Node addon built (node/), and the Rust
worker (`cargo build -p accord-coord --example contend`); `make test-polyglot` does all of it.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time

import accord
import psycopg
from procs import BOUND, Worker, spawn, stop_all

LONG_TTL_MS = 30_000
SHORT_TTL_MS = 1_500


def start(lang: str, url: str, namespace: str, *args: str) -> Worker:
    worker = spawn(lang, "waiting_worker", url, namespace, *args)
    worker.expect("READY")
    return worker


def in_line(
    db: psycopg.Connection[tuple[object, ...]], namespace: str, key: str
) -> int:
    """How many live waiters the coordinator has in `key`'s line."""
    row = db.execute(
        """SELECT count(*) FROM accord.tickets
            WHERE namespace = %s AND key = %s AND NOT granted
              AND expires_at > clock_timestamp()""",
        (namespace, key),
    ).fetchone()
    assert row is not None
    return int(str(row[0]))


def queue_up(
    db: psycopg.Connection[tuple[object, ...]],
    url: str,
    namespace: str,
    key: str,
    specs: list[tuple[str, list[str]]],
) -> list[Worker]:
    """Starts one worker per (language, args) in order, each once the one before is in line."""
    workers = []
    for lang, args in specs:
        workers.append(start(lang, url, namespace, *args))
        deadline = time.monotonic() + BOUND
        while in_line(db, namespace, key) < len(workers):
            if time.monotonic() > deadline:
                raise SystemExit(f"✗ the {lang} waiter never stood in line on {key}")
            time.sleep(0.01)
    return workers


def fair_order(db: psycopg.Connection[tuple[object, ...]], url: str, tag: str) -> None:
    key = "fair"
    holder = start("rust", url, tag, "wait", key, str(LONG_TTL_MS))
    holder.expect("GRANTED")
    langs = ["python", "node", "rust", "python", "node"]
    waiters = queue_up(
        db, url, tag, key, [(lang, ["wait", key, str(LONG_TTL_MS)]) for lang in langs]
    )
    holder.tell()
    holder.expect("RELEASED")
    fences = []
    for i, w in enumerate(waiters):
        fences.append(int(w.expect("GRANTED")[0]))
        early = [x.lang for x in waiters[i + 1 :] if x.said("GRANTED")]
        if early:
            raise SystemExit(f"✗ X2: granted out of turn: {early} before waiter {i}")
        w.tell()
        wakeups = int(w.expect("RELEASED")[0])
        if wakeups != 1:
            raise SystemExit(f"✗ X2: the {w.lang} waiter {i} was woken {wakeups} times")
    if fences != sorted(fences):
        raise SystemExit(f"✗ X2: fences out of order: {fences}")
    print(
        f"✓ X2: 5 waiters in {', '.join(langs)} granted in arrival order, "
        "each woken once by the release before it"
    )


def dead_and_stopped(
    db: psycopg.Connection[tuple[object, ...]], url: str, tag: str
) -> None:
    key = "dead"
    holder = start("rust", url, tag, "wait", key, str(LONG_TTL_MS))
    holder.expect("GRANTED")
    first, killed, stopped, last = queue_up(
        db,
        url,
        tag,
        key,
        [
            ("python", ["wait", key, str(LONG_TTL_MS)]),
            ("node", ["wait", key, str(SHORT_TTL_MS)]),
            ("rust", ["wait", key, str(SHORT_TTL_MS)]),
            ("python", ["wait", key, str(LONG_TTL_MS)]),
        ],
    )
    killed.process.send_signal(signal.SIGKILL)
    stopped.process.send_signal(signal.SIGSTOP)
    holder.tell()
    holder.expect("RELEASED")
    first_fence = int(first.expect("GRANTED")[0])
    first.tell()
    first.expect("RELEASED")
    # The next two in line are dead or stopped: their places expire after their ttl, and the
    # last waiter goes ahead (bounded generously; how soon is a benchmark's business).
    last_fence = int(last.expect("GRANTED")[0])
    if last_fence <= first_fence:
        raise SystemExit(f"✗ X3: fence {last_fence} after {first_fence}")
    # Resumed, the stopped waiter finds its place gone, queues again, and is granted next.
    stopped.process.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + BOUND
    while in_line(db, tag, key) < 1:
        if time.monotonic() > deadline:
            raise SystemExit("✗ X3: the resumed waiter never queued again")
        time.sleep(0.01)
    if stopped.said("GRANTED"):
        raise SystemExit(
            "✗ X3: the resumed waiter was granted while another held the key"
        )
    last.tell()
    last.expect("RELEASED")
    resumed_fence = int(stopped.expect("GRANTED")[0])
    if resumed_fence <= last_fence:
        raise SystemExit(f"✗ X3: fence {resumed_fence} after {last_fence}")
    stopped.tell()
    stopped.expect("RELEASED")
    print(
        "✓ X3: a waiter killed (SIGKILL) and one stopped (SIGSTOP) cost the line their ttl; "
        "the stopped one, resumed, queued again and was granted"
    )


def elections(db: psycopg.Connection[tuple[object, ...]], url: str, tag: str) -> None:
    name = "lead"
    key = f"accord.election/{name}"
    seen: queue.Queue[accord.Leader] = queue.Queue()
    with accord.Client.connect(url, namespace=tag, owner="observer") as client:
        observer = client.election(name).observe()

        def follow() -> None:
            try:
                for leader in observer:
                    # Vacancies (None: nobody leads between a leader's end and the next
                    # campaigner's grant) are E4's; this checks the leaders' order.
                    if leader is not None:
                        seen.put(leader)
            except accord.Closed:
                pass

        threading.Thread(target=follow, daemon=True).start()

        def next_seen(worker: Worker) -> accord.Leader:
            try:
                leader = seen.get(timeout=BOUND)
            except queue.Empty:
                raise SystemExit(
                    f"✗ E2: the observer never saw the {worker.lang} leader"
                ) from None
            fence = int(worker.log[-1].split()[1])
            if leader.fence != fence:
                raise SystemExit(
                    f"✗ E2: observed {leader.owner} fence {leader.fence}, expected the "
                    f"{worker.lang} leader's {fence}"
                )
            return leader

        campaign = ["campaign", name]
        first = start("rust", url, tag, *campaign, "rust-1", str(LONG_TTL_MS))
        first.expect("LEADER")
        next_seen(first)
        killed, stopped, last = queue_up(
            db,
            url,
            tag,
            key,
            [
                ("python", [*campaign, "python", str(SHORT_TTL_MS)]),
                ("node", [*campaign, "node", str(SHORT_TTL_MS)]),
                ("rust", [*campaign, "rust-2", str(LONG_TTL_MS)]),
            ],
        )
        fences = []
        first.tell()
        first.expect("RESIGNED")
        killed.expect("LEADER")
        fences.append(next_seen(killed).fence)
        # Killed while leading: the next campaigner leads once the lease expired.
        killed.process.send_signal(signal.SIGKILL)
        stopped.expect("LEADER")
        fences.append(next_seen(stopped).fence)
        # Stopped past its ttl while leading: replaced, and told LOST once resumed.
        stopped.process.send_signal(signal.SIGSTOP)
        last.expect("LEADER")
        fences.append(next_seen(last).fence)
        stopped.process.send_signal(signal.SIGCONT)
        stopped.expect("LOST")
        stopped.tell()
        stopped.expect("RESIGNED")
        last.tell()
        last.expect("RESIGNED")
        observer.close()
    if fences != sorted(fences):
        raise SystemExit(f"✗ E2: fences out of order: {fences}")
    print(
        "✓ E1-E2: leaders in Rust, Python, Node and Rust, each seen once in order by an "
        "observer, through a resignation, a SIGKILL and a SIGSTOP (which reported LOST)"
    )


def main() -> int:
    url = os.environ["ACCORD_TEST_DATABASE_URL"]
    tag = f"queue_{os.getpid()}_{int(time.time())}"
    with psycopg.connect(url, autocommit=True) as db:
        # The schema, so that the line can be read before any worker connected.
        accord.Client.connect(url).close()
        try:
            fair_order(db, url, tag)
            dead_and_stopped(db, url, tag)
            elections(db, url, tag)
        finally:
            stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
