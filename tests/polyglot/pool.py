"""The polyglot pool run (P2): 8 workers in Rust, Python and Node drain one work pool (claim a
batch → 1 ms of work → done, until empty), on PostgreSQL or on etcd. Every key must be done
exactly once, no key granted to two workers at once, and the calls to the store must be about one
per claim batch plus one per done, never one per key tried. What the workers report is checked
against what the store recorded, each store's way:

- PostgreSQL (`pool.py postgres`): a trigger records every grant; pg_stat_statements counts the
  claim, done and acquire statements.
- etcd (`pool.py etcd`, the test cluster of scripts/with-etcd.sh, under a key prefix of its
  own): a watch of the run's prefix from its start revision (chaos/etcd_run.py's audit) records
  every grant (a holder record's create and delete: no two live at once per key, fences growing
  per key) and every done (a row put that turns `done` on: exactly once per key, under a fence
  the key was granted to that owner); the workers' stats count their calls to etcd.

    ACCORD_TEST_DATABASE_URL=postgres://... .venv/bin/python tests/polyglot/pool.py postgres
    ACCORD_TEST_ETCD_URL=etcd://... ACCORD_TEST_ETCD_MEMBERS=... .venv/bin/python \\
        tests/polyglot/pool.py etcd

Needs what tests/polyglot/run.py needs; `make test-polyglot` runs both.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
#: The etcd run's key prefix (the URL's `prefix=`): its records stay apart from other suites'.
ETCD_PREFIX = "/accord-test/polyglot-pool"

Checks = list[tuple[bool, str]]


@dataclass
class Drained:
    """What the workers of one run reported, and what the pool says afterwards."""

    offered: int
    first_batches: list[int]
    failures: list[str] = field(default_factory=list)
    #: key → [(language, fence)] of every `DONE` line.
    done_by: dict[str, list[tuple[str, int]]] = field(
        default_factory=lambda: collections.defaultdict(list)
    )
    #: Per worker: (claim calls, the store calls made during them, all its store calls).
    stats: list[tuple[int, int, int]] = field(default_factory=list)
    counts: Any = None


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


def offer(url: str, tag: str) -> int:
    """Offers the pool (the first connect also migrates a new database); how many were new."""
    with accord.Client.connect(url, namespace=tag) as client:
        return client.offer(PREFIX, [f"{PREFIX}{i:05}" for i in range(KEYS)])


def drain(url: str, tag: str, offered: int) -> Drained:
    """Has the workers drain the offered pool, and reads its counts: the same on every store."""
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
    drained = Drained(offered, [first_batch(process) for _, process in started])
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
            drained.failures.append(
                f"a {lang} worker failed (exit {process.returncode}): {out[-500:]!r}"
            )
        for line in lines:
            if line.startswith("DONE "):
                _, key, fence = line.split()
                drained.done_by[key].append((lang, int(fence)))
            elif line.startswith("STATS "):
                claims, during, calls = (int(n) for n in line.split()[1:])
                drained.stats.append((claims, during, calls))
    with accord.Client.connect(url, namespace=tag) as client:
        drained.counts = client.counts(PREFIX)
    return drained


def common_checks(drained: Drained) -> Checks:
    """What every store must show: the workers' reports and the pool's counts."""
    keys = [f"{PREFIX}{i:05}" for i in range(KEYS)]
    done_by, counts = drained.done_by, drained.counts
    languages = sorted({lang for done in done_by.values() for lang, _ in done})
    return [
        (drained.offered == KEYS, f"{drained.offered} of {KEYS} keys offered"),
        (
            all(n > 0 for n in drained.first_batches),
            f"every worker held keys before any worked ({drained.first_batches})",
        ),
        (not drained.failures, f"{sum(WORKERS.values())} workers finished"),
        (len(languages) == 3, f"keys were done in {', '.join(languages)}"),
        (
            sorted(done_by) == keys and all(len(v) == 1 for v in done_by.values()),
            f"every key done exactly once, say the workers ({len(done_by)} keys reported)",
        ),
        (
            counts.done == KEYS and counts.free + counts.held == 0,
            f"counts say {counts.done} done, {counts.free} free, {counts.held} held",
        ),
    ]


# --------------------------------------------------------------------------------------------
# PostgreSQL: a grant trigger and pg_stat_statements.

STATEMENTS = """SELECT
    COALESCE(sum(calls) FILTER (WHERE query LIKE '%FOR UPDATE SKIP LOCKED%'), 0)::bigint,
    COALESCE(sum(calls) FILTER (WHERE query LIKE '%SET done =%'), 0)::bigint,
    COALESCE(sum(calls) FILTER (WHERE query LIKE '%seen AS MATERIALIZED%'), 0)::bigint
  FROM pg_stat_statements WHERE query LIKE '%"accord".leases%'"""


def on_postgres(url: str, tag: str) -> tuple[Drained, Checks]:
    audit = f"audit_{tag}"
    offered = offer(url, tag)
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
        try:
            drained = drain(url, tag, offered)
        finally:
            db.execute(f'DROP TRIGGER IF EXISTS "{audit}" ON accord.leases')
            db.execute(f'DROP FUNCTION IF EXISTS "{audit}"()')
        after = db.execute(STATEMENTS).fetchone()
        grants = db.execute(
            f'SELECT key, count(*) FROM "{audit}" GROUP BY key'
        ).fetchall()
        db.execute(f'DROP TABLE "{audit}"')
    assert before is not None and after is not None
    claims, dones, acquires = (a - b for a, b in zip(after, before, strict=True))
    twice = [key for key, n in grants if n != 1]
    return drained, [
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


# --------------------------------------------------------------------------------------------
# etcd: the cluster's own history, and the clients' stats.


def counted(text: str) -> str:
    """A namespace as etcd's records spell it (core/src/backend/etcd/keys.rs)."""
    return f"{len(text)}:{text}"


def on_etcd(url: str, tag: str) -> tuple[Drained, Checks]:
    # chaos/etcd_run.py: the cluster's JSON gateway and the audit of the chaos run on etcd.
    sys.path.insert(0, str(REPO / "chaos"))
    from etcd_run import Cluster, done_rows, grant_rows, judge_pool
    from run import judge

    cluster = Cluster()
    start = cluster.revision() + 1
    drained = drain(url, tag, offer(url, tag))
    events = cluster.history(f"{ETCD_PREFIX}/", start)
    rows, live = grant_rows(events, f"{ETCD_PREFIX}/l/h/{counted(tag)}/")
    # What the workers were told (each `DONE` line's fence) must be a grant on record.
    told = [
        {"ev": "claimed", "key": key, "fence": fence, "lang": lang, "role": "pool"}
        for key, done in drained.done_by.items()
        for lang, fence in done
    ]
    result = judge(rows, [], told)
    pool = judge_pool(rows, done_rows(events, f"{ETCD_PREFIX}/k/{counted(tag)}/"))
    workers = sum(WORKERS.values())
    claims = sum(s[0] for s in drained.stats)
    during = sum(s[1] for s in drained.stats)
    others = sum(s[2] for s in drained.stats) - during
    batches = -(-KEYS // BATCH)
    return drained, [
        (
            result["grants"] == KEYS and not result["double"] and not live,
            (
                f"{result['grants']} grants in etcd's history, none while the key's previous grant "
                f"lived ({result['double']} did), {live} holder records left"
            ),
        ),
        (
            not result["backwards"],
            f"fences grew per key ({result['backwards']} went back)",
        ),
        (
            not result["lost_grants"],
            f"every fence a worker reported is a grant on record ({result['lost_grants']} not)",
        ),
        (
            pool["done"] == KEYS and not pool["violations"],
            (
                f"etcd's history has each key turned done exactly once ({pool['done']} keys; "
                f"twice: {pool['twice']}; under a fence not granted to the owner: "
                f"{pool['foreign']}; granted again after done: {pool['regranted']})"
            ),
        ),
        # A claim is a read and a granting transaction (one more read per race lost, none
        # when the failed transaction answers with the read), never a call per key tried; each
        # worker's empty claims at the end and its races are its allowance, as on PostgreSQL.
        (
            len(drained.stats) == workers and during <= 3 * batches + 20 * workers,
            (
                f"{during} calls to etcd in {claims} claims for {batches} batches of {BATCH} "
                f"(at most 3 a batch + 20 a worker)"
            ),
        ),
        # A done of a claimed key is a read of its row and the transaction (the client did not
        # write the row it reads: docs/semantics.md, "On etcd"); besides: a counts after each
        # empty claim, connects, keep-alives.
        (
            others <= 2 * KEYS + claims + 10 * workers,
            (
                f"{others} other calls to etcd for {KEYS} dones (at most 2 a done + 1 a claim + "
                f"10 a worker)"
            ),
        ),
    ]


def main() -> int:
    store = sys.argv[1] if len(sys.argv) > 1 else "postgres"
    tag = f"pool_{os.getpid()}_{int(time.time())}"
    if store == "postgres":
        drained, checks = on_postgres(os.environ["ACCORD_TEST_DATABASE_URL"], tag)
    elif store == "etcd":
        base = os.environ["ACCORD_TEST_ETCD_URL"]
        url = f"{base}{'&' if '?' in base else '?'}prefix={ETCD_PREFIX}"
        drained, checks = on_etcd(url, tag)
    else:
        print(f"usage: pool.py [postgres | etcd], not {store!r}", file=sys.stderr)
        return 2
    checks = common_checks(drained) + checks
    print(f"pool run on {store}:")
    for failure in drained.failures:
        print(f"✗ {failure}")
    for ok, what in checks:
        print(f"{'✓' if ok else '✗'} {what}")
    return 0 if all(ok for ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
