"""The polyglot grant audit (G2 in commit order, across languages): Rust, Python and Node
workers hammer one key with try_acquire + immediate release on one PostgreSQL, while a trigger on
the leases table records every grant in the order grants took the key's row (for one key, that
is commit order: a grant keeps the row locked until it commits). The fences in that order must
strictly increase, and the audit must hold every grant the workers report.

    ACCORD_TEST_DATABASE_URL=postgres://... .venv/bin/python tests/polyglot/run.py

Needs the Python package installed in the venv, the Node addon built (node/), and the Rust
worker (`cargo build -p accord-coord --example contend`); `make test-polyglot` does all of it.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PER_LANGUAGE = int(os.environ.get("ACCORD_POLYGLOT_WORKERS", "3"))
GRANTS = int(os.environ.get("ACCORD_POLYGLOT_GRANTS", "40"))
KEY = "hot"
#: Bounds a hang, never a speed: the run takes seconds.
DEADLINE = 240


def workers(url: str, namespace: str) -> list[tuple[str, list[str]]]:
    contend = os.environ.get(
        "ACCORD_CONTEND", str(REPO / "target/debug/examples/contend")
    )
    grants = str(GRANTS)
    commands = {
        "rust": [contend, url, namespace, "hammer", KEY, grants],
        "python": [
            sys.executable,
            str(HERE / "hammer.py"),
            url,
            namespace,
            KEY,
            grants,
        ],
        "node": ["node", str(HERE / "hammer.js"), url, namespace, KEY, grants],
    }
    return [(lang, cmd) for lang, cmd in commands.items() for _ in range(PER_LANGUAGE)]


def main() -> int:
    url = os.environ["ACCORD_TEST_DATABASE_URL"]
    tag = f"polyglot_{os.getpid()}_{int(time.time())}"
    audit = f"audit_{tag}"
    with psycopg.connect(url, autocommit=True) as db:
        # The schema exists before the trigger goes on its table (a client migrates it).
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import accord,sys; accord.Client.connect(sys.argv[1]).close()",
                url,
            ],
            check=True,
        )
        db.execute(
            f"""CREATE TABLE "{audit}" (id bigserial PRIMARY KEY, fence bigint NOT NULL,
                                        owner text NOT NULL);
                CREATE FUNCTION "{audit}"() RETURNS trigger LANGUAGE plpgsql AS $f$
                BEGIN
                  IF NEW.expires_at IS NOT NULL
                     AND (TG_OP = 'INSERT' OR NEW.fence IS DISTINCT FROM OLD.fence) THEN
                    INSERT INTO "{audit}" (fence, owner) VALUES (NEW.fence, NEW.owner);
                  END IF;
                  RETURN NULL;
                END $f$;
                CREATE TRIGGER "{audit}" AFTER INSERT OR UPDATE ON accord.leases FOR EACH ROW
                  WHEN (NEW.namespace = '{tag}') EXECUTE FUNCTION "{audit}"();"""
        )
        try:
            started = [
                (lang, subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
                for lang, cmd in workers(url, tag)
            ]
            reported = 0
            failures = []
            for lang, process in started:
                try:
                    out, _ = process.communicate(timeout=DEADLINE)
                except subprocess.TimeoutExpired:
                    for _, other in started:
                        other.kill()
                    raise
                lines = [
                    line for line in out.splitlines() if line.startswith("HAMMER ")
                ]
                if process.returncode != 0 or not lines:
                    failures.append(
                        f"a {lang} worker failed (exit {process.returncode}): {out!r}"
                    )
                    continue
                reported += int(lines[-1].split()[1])
        finally:
            db.execute(f'DROP TRIGGER IF EXISTS "{audit}" ON accord.leases')
            db.execute(f'DROP FUNCTION IF EXISTS "{audit}"()')
        rows = db.execute(f'SELECT fence, owner FROM "{audit}" ORDER BY id').fetchall()
    for failure in failures:
        print(f"✗ {failure}")
    fences = [fence for fence, _ in rows]
    languages = sorted({owner.split("-")[0] for _, owner in rows})
    backwards = [(a, b) for a, b in itertools.pairwise(fences) if b <= a]
    checks = [
        (not failures, f"{len(started)} workers in {', '.join(languages)} finished"),
        (
            len(rows) == reported,
            f"the audit holds every grant ({len(rows)} recorded, {reported} reported)",
        ),
        (
            not backwards,
            f"fences strictly increase in commit order ({len(backwards)} out of order"
            + (f", e.g. {backwards[:3]})" if backwards else ")"),
        ),
    ]
    for ok, what in checks:
        print(f"{'✓' if ok else '✗'} {what}")
    return 0 if all(ok for ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
