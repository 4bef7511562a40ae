"""The fleet's property run: random joins, graceful leaves (SIGTERM) and kills (SIGKILL) of
members in Rust, Python and Node over 64 shards for a while (ACCORD_CHURN_SECONDS, 15 in
`make test`, 60 for the full run), seeded (ACCORD_CHURN_SEED; printed, so a failure can be
replayed). Judged from the server's own record (the audit trigger of tests/polyglot/fleet.py):
no shard was ever granted while its previous grant was live, fences per shard only grow; and
after the last change the fleet settles to an even split (counts within 1), within the killed
members' ttl plus 5 periods (reported; a generous bound is asserted, timing belongs in bench).

    ACCORD_TEST_DATABASE_URL=postgres://... .venv/bin/python tests/polyglot/fleet_churn.py
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import sys
import time
from collections import defaultdict

import fleet as harness
import psycopg

SHARDS = 64
SECONDS = float(os.environ.get("ACCORD_CHURN_SECONDS", "15"))
LANGUAGES = os.environ.get("ACCORD_FLEET_LANGUAGES", "rust,python,node").split(",")
MOST, FEWEST = 8, 2


def main() -> int:
    url = os.environ["ACCORD_TEST_DATABASE_URL"]
    seed = int(os.environ.get("ACCORD_CHURN_SEED", str(random.randrange(1 << 32))))
    rng = random.Random(seed)
    print(f"seed {seed} (ACCORD_CHURN_SEED={seed} replays this run)")
    harness.SHARDS = SHARDS
    ttl, period = harness.TTL_MS / 1000, harness.PERIOD_MS / 1000
    tag = f"churn_{os.getpid()}_{int(time.time())}"
    audit = f"audit_{tag}"
    members: list[harness.Member] = []
    live: list[harness.Member] = []
    changes: list[str] = []
    with psycopg.connect(url, autocommit=True) as db:
        harness.prepare(db, url, audit, tag)
        try:
            for lang in (rng.choice(LANGUAGES) for _ in range(4)):
                m = harness.start(lang, url, tag)
                members.append(m)
                live.append(m)
            last_kill = 0.0
            last_change = time.monotonic()
            ends = time.monotonic() + SECONDS
            while time.monotonic() < ends:
                time.sleep(rng.uniform(0.2, 2.0))
                harness.read(members)
                kind = rng.choice(["join", "leave", "kill"])
                if kind == "join" and len(live) < MOST or len(live) <= FEWEST:
                    m = harness.start(rng.choice(LANGUAGES), url, tag)
                    members.append(m)
                    live.append(m)
                    changes.append(f"join {m.lang}")
                else:
                    # Only a member that said READY has its SIGTERM handler in place (and a
                    # SIGKILL before READY would test nothing): pick among those.
                    ready = [m for m in live if m.owner]
                    if not ready:
                        continue
                    m = ready[rng.randrange(len(ready))]
                    live.remove(m)
                    if kind == "kill":
                        m.process.kill()
                        m.held.clear()
                        last_kill = time.monotonic()
                    else:
                        m.process.send_signal(signal.SIGTERM)
                    changes.append(f"{kind} {m.lang}")
                last_change = time.monotonic()
            print(f"  {len(changes)} changes: {', '.join(changes)}")
            # The departed may still be closing: settled means the live hold every shard.
            bound = ttl + 20 * period + 30
            waiting_since = time.monotonic()
            took = harness.wait_for(
                f"after the last change the {len(live)} live members hold the shards evenly",
                members,
                lambda: all(m.owner for m in live) and harness.even(live),
                bound,
            )
            settled_after = waiting_since - last_change + took
            waited_ttl = max(0.0, last_kill + ttl - last_change) if last_kill else 0.0
            periods = max(0.0, settled_after - waited_ttl) / period
            print(
                f"  settled {settled_after:.2f} s after the last change "
                f"({periods:.1f} periods beyond a killed member's ttl; the target is 5)"
            )
        finally:
            harness.stop_all(members)
            harness.drop_audit(db, audit)
        rows = db.execute(
            f'SELECT key, fence, owner, replaced FROM "{audit}" ORDER BY id'
        ).fetchall()
    double = [r for r in rows if r[3] == "live"]
    by_shard: dict[str, list[int]] = defaultdict(list)
    for key, fence, _, _ in rows:
        by_shard[key].append(fence)
    backwards = [
        k for k, f in by_shard.items() if any(b <= a for a, b in itertools.pairwise(f))
    ]
    checks = [
        (
            not double,
            f"no shard granted while its previous grant was live ({len(double)} of {len(rows)} grants)",
        ),
        (
            not backwards,
            f"fences strictly increase per shard ({len(backwards)} shards out of order)",
        ),
    ]
    for ok, what in checks:
        print(f"{'✓' if ok else '✗'} {what}")
    if not all(ok for ok, _ in checks):
        print(f"replay: ACCORD_CHURN_SEED={seed}")
    return 0 if all(ok for ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
