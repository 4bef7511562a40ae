"""The polyglot pool run (P2): 8 workers in Rust, Python and Node drain one work pool on one
PostgreSQL (claim a batch → 1 ms of work → done, until empty). Every key must be done exactly
once, no key granted to two workers (a trigger records every grant), and the statements must be
about one per claim batch plus one per done, never one per key tried.

    ACCORD_TEST_DATABASE_URL=postgres://... .venv/bin/python tests/polyglot/pool.py

Needs what tests/polyglot/run.py needs; `make test-polyglot` runs both.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time
from pathlib import Path

import accord
import psycopg

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
KEYS = int(os.environ.get("ACCORD_POOL_KEYS", "400"))
BATCH = 10
PREFIX = "files/"
WORKERS = {"rust": 3, "python": 3, "node": 2}
#: Bounds a hang, never a speed: the run takes seconds.
DEADLINE = 240

STATEMENTS = """SELECT
    COALESCE(sum(calls) FILTER (WHERE query LIKE '%FOR UPDATE SKIP LOCKED%'), 0)::bigint,
    COALESCE(sum(calls) FILTER (WHERE query LIKE '%SET done =%'), 0)::bigint,
    COALESCE(sum(calls) FILTER (WHERE query LIKE '%seen AS MATERIALIZED%'), 0)::bigint
  FROM pg_stat_statements WHERE query LIKE '%"accord".leases%'"""


def commands(url: str, namespace: str) -> list[tuple[str, list[str]]]:
    contend = os.environ.get(
        "ACCORD_CONTEND", str(REPO / "target/debug/examples/contend")
    )
    batch = str(BATCH)
    by_language = {
        "rust": [contend, url, namespace, "drain", PREFIX, batch],
        "python": [
            sys.executable,
            str(HERE / "drain.py"),
            url,
            namespace,
            PREFIX,
            batch,
        ],
        "node": ["node", str(HERE / "drain.js"), url, namespace, PREFIX, batch],
    }
    return [(lang, by_language[lang]) for lang, n in WORKERS.items() for _ in range(n)]


def first_batch(process: subprocess.Popen[str]) -> int:
    """The size of a worker's first claim, from its ``CLAIMED <n>`` line (0 if it ended)."""
    assert process.stdout is not None
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            return 0
        if line.startswith("CLAIMED "):
            return int(line.split()[1])
    return 0


def main() -> int:
    url = os.environ["ACCORD_TEST_DATABASE_URL"]
    tag = f"pool_{os.getpid()}_{int(time.time())}"
    audit = f"audit_{tag}"
    keys = [f"{PREFIX}{i:05}" for i in range(KEYS)]
    with accord.Client.connect(url, namespace=tag) as client:
        offered = client.offer(PREFIX, keys)
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        db.execute(
            f"""CREATE TABLE "{audit}" (id bigserial PRIMARY KEY, key text NOT NULL,
                                        fence bigint NOT NULL, owner text NOT NULL);
                CREATE FUNCTION "{audit}"() RETURNS trigger LANGUAGE plpgsql AS $f$
                BEGIN
                  IF NEW.expires_at IS NOT NULL AND NEW.fence IS DISTINCT FROM OLD.fence THEN
                    INSERT INTO "{audit}" (key, fence, owner)
                    VALUES (NEW.key, NEW.fence, NEW.owner);
                  END IF;
                  RETURN NULL;
                END $f$;
                CREATE TRIGGER "{audit}" AFTER UPDATE ON accord.leases FOR EACH ROW
                  WHEN (NEW.namespace = '{tag}') EXECUTE FUNCTION "{audit}"();"""
        )
        before = db.execute(STATEMENTS).fetchone()
        done_by: dict[str, list[str]] = collections.defaultdict(list)
        failures = []
        try:
            started = [
                (
                    lang,
                    subprocess.Popen(
                        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
                    ),
                )
                for lang, cmd in commands(url, tag)
            ]
            # Every worker holds its first batch before any works: each language does keys,
            # whichever starts fastest.
            first_batches = [first_batch(process) for _, process in started]
            for _, process in started:
                assert process.stdin is not None
                process.stdin.write("go\n")
                process.stdin.flush()  # communicate() below closes it
            for lang, process in started:
                try:
                    out, _ = process.communicate(timeout=DEADLINE)
                except subprocess.TimeoutExpired:
                    for _, other in started:
                        other.kill()
                    raise
                lines = out.splitlines()
                if process.returncode != 0 or not any(
                    line.startswith("DRAINED ") for line in lines
                ):
                    failures.append(
                        f"a {lang} worker failed (exit {process.returncode}): {out[-500:]!r}"
                    )
                for line in lines:
                    if line.startswith("DONE "):
                        done_by[line.split()[1]].append(lang)
        finally:
            db.execute(f'DROP TRIGGER IF EXISTS "{audit}" ON accord.leases')
            db.execute(f'DROP FUNCTION IF EXISTS "{audit}"()')
        after = db.execute(STATEMENTS).fetchone()
        grants = db.execute(
            f'SELECT key, count(*) FROM "{audit}" GROUP BY key'
        ).fetchall()
        db.execute(f'DROP TABLE "{audit}"')
    with accord.Client.connect(url, namespace=tag) as client:
        counts = client.counts(PREFIX)
    claims, dones, acquires = (a - b for a, b in zip(after, before, strict=True))
    twice = [key for key, n in grants if n != 1]
    languages = sorted({lang for langs in done_by.values() for lang in langs})
    checks = [
        (offered == KEYS, f"{offered} of {KEYS} keys offered"),
        (
            all(n > 0 for n in first_batches),
            f"every worker held keys before any worked ({first_batches})",
        ),
        (not failures, f"{sum(WORKERS.values())} workers finished"),
        (len(languages) == 3, f"keys were done in {', '.join(languages)}"),
        (
            sorted(done_by) == keys and all(len(v) == 1 for v in done_by.values()),
            f"every key done exactly once ({len(done_by)} keys reported)",
        ),
        (
            counts.done == KEYS and counts.free + counts.held == 0,
            f"counts say {counts.done} done, {counts.free} free, {counts.held} held",
        ),
        (
            len(grants) == KEYS and not twice,
            f"no key was granted twice ({len(twice)} were)",
        ),
        (dones == KEYS, f"one done statement per key ({dones})"),
        (
            claims <= KEYS // BATCH + 20 * sum(WORKERS.values()),
            f"{claims} claim statements for {KEYS} keys in batches of {BATCH}",
        ),
        (acquires == 0, f"no key was tried one by one ({acquires} acquires)"),
    ]
    for failure in failures:
        print(f"✗ {failure}")
    for ok, what in checks:
        print(f"{'✓' if ok else '✗'} {what}")
    return 0 if all(ok for ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
