"""Scenario 9 of `make bench`: fleets. Members are processes (the Rust `contend` example in its
`fleet` mode), so a kill is a real SIGKILL. For each size (shards x members):

- a member joins a balanced fleet, one leaves gracefully (SIGTERM: close), one is killed with
  SIGKILL: the time until every live member holds its share (all shards held, counts within 1)
  and how many shards moved (assignments after the change);
- a stable window of 10 periods: the statements each member sends per period
  (pg_stat_statements: every statement of the database in the window, over members x periods).

    ACCORD_TEST_DATABASE_URL=postgres://... .venv/bin/python bench/fleet_bench.py OUT.json [--quick]

Writes the results in the format of the other bench programs (bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "polyglot"))

import fleet as harness  # the polyglot run's member handling

TTL_MS = 1500
PERIOD_MS = 500


def settle(
    members: list[harness.Member], live: list[harness.Member], shards: int
) -> float:
    """Seconds until the live members hold every shard evenly (bounded: a hang fails)."""
    started = time.monotonic()
    while time.monotonic() - started < 120:
        harness.read(members)
        counts = [len(m.held) for m in live]
        held = {s for m in live for s in m.held}
        if (
            len(held) == shards
            and sum(counts) == shards
            and max(counts) - min(counts) <= 1
        ):
            return time.monotonic() - started
        time.sleep(0.005)
    raise SystemExit(
        f"fleet of {shards} shards did not settle: {[len(m.held) for m in live]}"
    )


def assignments(members: list[harness.Member]) -> int:
    harness.read(members)
    return sum(1 for m in members for line in m.log if line.startswith("ASSIGNED "))


def statements(db: psycopg.Connection[tuple[int]]) -> int:
    row = db.execute(
        """SELECT COALESCE(sum(calls), 0)::bigint FROM pg_stat_statements
            WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"""
    ).fetchone()
    return int(row[0]) if row else 0


def run_size(
    url: str, shards: int, count: int, db: psycopg.Connection[tuple[int]]
) -> list[dict[str, object]]:
    namespace = f"bench_fleet_{shards}x{count}_{os.getpid()}"
    harness.SHARDS, harness.TTL_MS, harness.PERIOD_MS = shards, TTL_MS, PERIOD_MS
    members = [harness.start("rust", url, namespace) for _ in range(count - 1)]
    live = list(members)
    records: list[dict[str, object]] = []

    def record(change: str, took: float, moved: int) -> None:
        records.append(
            {
                "id": f"fleet/{change}-{shards}x{count}",
                "label": f"{change}: {shards} shards, {count} members",
                "ops": 1,
                "seconds": took,
                "latencies_us": [took * 1e6],
                "metrics": {
                    "shards": shards,
                    "members": count,
                    "change": change,
                    "moves": moved,
                    "periods": took * 1000 / PERIOD_MS,
                    "ttl_ms": TTL_MS,
                    "period_ms": PERIOD_MS,
                },
            }
        )

    try:
        settle(members, live, shards)
        # Joining: the newcomer's first decision waits a period (members started together
        # see each other first); then hand-offs, at most 4 asked per member and period.
        before = assignments(members)
        newcomer = harness.start("rust", url, namespace)
        members.append(newcomer)
        live.append(newcomer)
        record("join", settle(members, live, shards), assignments(members) - before)

        # Stable: what each member sends per period.
        first = statements(db)
        time.sleep(10 * PERIOD_MS / 1000)
        sent = statements(db) - first - 1
        per = sent / (len(live) * 10)
        records.append(
            {
                "id": f"fleet/stable-{shards}x{count}",
                "label": f"stable: {shards} shards, {count} members, 10 periods",
                "ops": sent,
                "seconds": 10 * PERIOD_MS / 1000,
                "latencies_us": [],
                "metrics": {
                    "shards": shards,
                    "members": count,
                    "statements_per_member_period": per,
                },
            }
        )

        before = assignments(members)
        leaver = live.pop(0)
        leaver.process.send_signal(signal.SIGTERM)
        record("leave", settle(members, live, shards), assignments(members) - before)

        before = assignments(members)
        victim = live.pop(0)
        victim.process.kill()
        victim.held.clear()
        record("kill", settle(members, live, shards), assignments(members) - before)
    finally:
        for m in members:
            if m.process.poll() is None:
                m.process.send_signal(signal.SIGTERM)
        for m in members:
            try:
                m.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                m.process.kill()
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--quick", action="store_true", help="one small size (make test)"
    )
    args = parser.parse_args()
    url = os.environ.get("ACCORD_BENCH_URL") or os.environ["ACCORD_TEST_DATABASE_URL"]
    sizes = [(16, 3)] if args.quick else [(64, 4), (64, 16), (1024, 4), (1024, 16)]
    results: list[dict[str, object]] = []
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        db.execute(
            """CREATE TABLE IF NOT EXISTS fleet_resource (shard text PRIMARY KEY,
                 fence bigint NOT NULL, owner text NOT NULL)"""
        )
        for shards, count in sizes:
            found = run_size(url, shards, count, db)
            for r in found:
                m = r["metrics"]
                assert isinstance(m, dict)
                print(f"  {r['id']:<26} {float(r['seconds']):7.2f} s  {m}")  # type: ignore[arg-type]
            results.extend(found)
    args.out.write_text(
        json.dumps({"results": results, "source": "fleet", "versions": {}})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
