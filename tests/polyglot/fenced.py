"""The polyglot fenced run (the trigger `fenced_write` under contention, across languages):
writers in Rust, Python and Node processes take turns on two keys with a short ttl and insert
rows that carry their lease's fence into a table that accord's trigger guards. Some holders are
SIGSTOPped once they report their grant and resumed only after the key was granted again (so
their keepalive is frozen and their lease is stale when they write).

The checks come from the server's record, not the writers: a trigger on accord.leases records
every grant and one on the table every accepted row, both with values of one sequence taken
while the key's lease row is locked (a grant holds it FOR UPDATE, the fenced trigger FOR SHARE
until the writer's commit), so per key the sequence is the commit order of grants and writes.
Every accepted row's fence must be the key's latest grant before it (no accepted row older than
a later grant); every stopped holder's write must be refused (`AC001`) with no row left; each
language must have had writes accepted and stale writes refused; and the table must hold exactly
the writes the writers report accepted.

    ACCORD_TEST_DATABASE_URL=postgres://... .venv/bin/python tests/polyglot/fenced.py

Needs the Python package installed in the venv, the Node addon built (node/), and the Rust
worker (`cargo build -p accord-coord --example contend`); `make test-polyglot` does all of it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

import accord
import psycopg
from procs import Worker, spawn, stop_all

KEYS = ["k0", "k1"]
TTL_MS = 500
PER_LANGUAGE = 2
ROUNDS = 8
#: The rounds (of each writer) in which the holder is stopped before it writes.
STOPPED_ROUNDS = {2, 5}
LANGUAGES = ("rust", "python", "node")


def schema(tag: str) -> str:
    return f"""
CREATE SEQUENCE "seq_{tag}";
CREATE TABLE "grants_{tag}" (seq bigint NOT NULL, key text NOT NULL, fence bigint NOT NULL,
                             owner text NOT NULL);
CREATE FUNCTION "grants_{tag}"() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF NEW.expires_at IS NOT NULL AND (TG_OP = 'INSERT' OR NEW.fence IS DISTINCT FROM OLD.fence)
  THEN
    INSERT INTO "grants_{tag}" VALUES (nextval('"seq_{tag}"'), NEW.key, NEW.fence, NEW.owner);
  END IF;
  RETURN NULL;
END $f$;
CREATE TRIGGER "grants_{tag}" AFTER INSERT OR UPDATE ON accord.leases FOR EACH ROW
  WHEN (NEW.namespace = '{tag}') EXECUTE FUNCTION "grants_{tag}"();
CREATE TABLE "fenced_{tag}" (key text NOT NULL, fence bigint NOT NULL, writer text NOT NULL);
CREATE TRIGGER "fenced_{tag}" BEFORE INSERT OR UPDATE ON "fenced_{tag}" FOR EACH ROW
  EXECUTE FUNCTION accord.fenced_write('{tag}', 'key', 'fence');
-- After accord's BEFORE trigger took the lease row: the row's place in the key's commit order.
CREATE TABLE "writes_{tag}" (seq bigint NOT NULL, key text NOT NULL, fence bigint NOT NULL);
CREATE FUNCTION "writes_{tag}"() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO "writes_{tag}" VALUES (nextval('"seq_{tag}"'), NEW.key, NEW.fence);
  RETURN NULL;
END $f$;
CREATE TRIGGER "writes_{tag}" AFTER INSERT ON "fenced_{tag}" FOR EACH ROW
  EXECUTE FUNCTION "writes_{tag}"();
"""


def drop(tag: str) -> str:
    return f"""
DROP TRIGGER IF EXISTS "grants_{tag}" ON accord.leases;
DROP TABLE IF EXISTS "grants_{tag}", "fenced_{tag}", "writes_{tag}";
DROP FUNCTION IF EXISTS "grants_{tag}"(), "writes_{tag}"();
DROP SEQUENCE IF EXISTS "seq_{tag}";
"""


def drive(
    worker: Worker,
    client: accord.Client,
    rounds: list[dict[str, Any]],
    errors: list[str],
) -> None:
    """Lets `worker` write ROUNDS times; in STOPPED_ROUNDS it is SIGSTOPped as it reports its
    grant and resumed only once this process was granted the key after it (so after its lease
    expired on the server), then lets it write."""
    try:
        for n in range(ROUNDS):
            key, fence = worker.expect("HELD")
            stopped = n in STOPPED_ROUNDS
            if stopped:
                worker.process.send_signal(signal.SIGSTOP)
                later = client.acquire(key, ttl=TTL_MS / 1000, timeout=30.0)
                if later.fence <= int(fence):
                    errors.append(
                        f"{key} granted again with fence {later.fence} <= {fence}"
                    )
                later.release()
                worker.process.send_signal(signal.SIGCONT)
            worker.tell()
            wkey, wfence, accepted = worker.expect("WROTE")
            assert (wkey, wfence) == (key, fence), (worker.log[-3:], key, fence)
            rounds.append(
                {
                    "lang": worker.lang,
                    "key": key,
                    "fence": int(fence),
                    "stopped": stopped,
                    "accepted": accepted == "1",
                }
            )
        worker.expect("HELD")
        assert worker.process.stdin is not None
        worker.process.stdin.close()
        if worker.process.wait(timeout=60) != 0:
            errors.append(
                f"a {worker.lang} writer exited with {worker.process.returncode}"
            )
    except (AssertionError, SystemExit, OSError, ValueError, accord.AccordError) as e:
        errors.append(f"{worker.lang} writer: {e!r}")


def judge(
    grants: list[tuple[int, str, int]], rows: list[tuple[int, str, int]]
) -> list[tuple[str, int, int]]:
    """The accepted rows (seq, key, fence) whose fence is not the key's latest grant before
    them in the sequence: (key, fence, that grant's fence)."""
    events = sorted(
        [(s, k, f, "grant") for s, k, f in grants]
        + [(s, k, f, "row") for s, k, f in rows]
    )
    live: dict[str, int] = {}
    wrong = []
    for _seq, key, fence, what in events:
        if what == "grant":
            live[key] = fence
        elif live.get(key) != fence:
            wrong.append((key, fence, live.get(key, 0)))
    return wrong


def selftest() -> None:
    """The judge catches a row written after a later grant of its key."""
    grants = [(1, "k", 10), (3, "k", 11)]
    assert judge(grants, [(2, "k", 10)]) == []
    assert judge(grants, [(4, "k", 10)]) == [("k", 10, 11)]


def main() -> int:
    selftest()
    url = os.environ["ACCORD_TEST_DATABASE_URL"]
    tag = f"fenced_{os.getpid()}_{int(time.time())}"
    rounds: list[dict[str, Any]] = []
    errors: list[str] = []
    with (
        accord.Client.connect(url, namespace=tag, owner="orchestrator") as client,
        psycopg.connect(url, autocommit=True) as db,
    ):
        db.execute(schema(tag))
        try:
            writers = [
                spawn(
                    lang,
                    "fenced_worker",
                    url,
                    tag,
                    "fenced",
                    ",".join(KEYS),
                    str(TTL_MS),
                    f"fenced_{tag}",
                )
                for lang in LANGUAGES
                for _ in range(PER_LANGUAGE)
            ]
            threads = [
                threading.Thread(target=drive, args=(w, client, rounds, errors))
                for w in writers
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            grants = db.execute(
                f'SELECT seq, key, fence FROM "grants_{tag}"'
            ).fetchall()
            rows = db.execute(f'SELECT seq, key, fence FROM "writes_{tag}"').fetchall()
            table = db.execute(f'SELECT key, fence FROM "fenced_{tag}"').fetchall()
        finally:
            stop_all()
            db.execute(drop(tag))
    for error in errors:
        print(f"✗ {error}")
    written = {(key, fence) for key, fence in table}
    accepted = {(r["key"], r["fence"]) for r in rounds if r["accepted"]}
    stale = [r for r in rounds if r["stopped"]]
    wrong = judge(grants, rows)
    per_lang = {
        lang: (
            sum(1 for r in rounds if r["lang"] == lang and r["accepted"]),
            sum(
                1
                for r in rounds
                if r["lang"] == lang and r["stopped"] and not r["accepted"]
            ),
        )
        for lang in LANGUAGES
    }
    checks = [
        (
            not errors,
            f"{len(LANGUAGES) * PER_LANGUAGE} writers ran {ROUNDS} rounds each",
        ),
        (
            all(
                not r["accepted"] and (r["key"], r["fence"]) not in written
                for r in stale
            ),
            (
                f"every stopped holder's write was refused, no row left ({len(stale)} stale "
                f"writes, {sum(1 for r in stale if r['accepted'])} accepted)"
            ),
        ),
        (
            not wrong,
            f"every accepted row's fence is its key's latest grant before it in commit order "
            f"({len(rows)} rows, {len(grants)} grants; {len(wrong)} older than a later grant"
            + (f", e.g. {wrong[:3]})" if wrong else ")"),
        ),
        (
            written == accepted and len(table) == len(written) == len(rows),
            (
                f"the table holds exactly the writes reported accepted ({len(table)} rows, "
                f"{len(accepted)} reported)"
            ),
        ),
        (
            all(a > 0 and s > 0 for a, s in per_lang.values()),
            "each language had writes accepted and stale writes refused: "
            + ", ".join(
                f"{lang} {a} accepted, {s} refused" for lang, (a, s) in per_lang.items()
            ),
        ),
    ]
    for ok, what in checks:
        print(f"{'✓' if ok else '✗'} {what}")
    return 0 if all(ok for ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
