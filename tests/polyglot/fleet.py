"""The polyglot fleet run (M1/F1-F4 across languages): members in Rust, Python and Node split
the shards of one fleet on one PostgreSQL, then a member joins, one is killed with SIGKILL, one
is stopped with SIGSTOP past its ttl, and one closes; after each change the fleet must settle
to an even split. Judged from the server's own record: a trigger on the leases table records
every grant of a shard with the state of the grant it replaced, so "never held twice" and "moved
by a hand-off, not by an expiry" are read from the coordinator, not from what members report.

    ACCORD_TEST_DATABASE_URL=postgres://... .venv/bin/python tests/polyglot/fleet.py

Needs the Python package installed in the venv, the Node addon built (node/), and the Rust
member (`cargo build -p accord-coord --example contend`); `make test-polyglot` does all of it.
"""

from __future__ import annotations

import itertools
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SHARDS = 16
TTL_MS = 1500
PERIOD_MS = 250
FLEET = "orders"
#: Members at the start, by language; a fifth (Python) joins later.
START = ["rust", "python", "node", "rust"]
LANGUAGES = os.environ.get("ACCORD_FLEET_LANGUAGES", "rust,python,node").split(",")
#: Bounds a hang, never a speed: each step settles in a few periods.
SETTLE = 60.0


@dataclass
class Member:
    lang: str
    process: subprocess.Popen[str]
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    owner: str = ""
    held: dict[str, int] = field(default_factory=dict)
    revoked: list[tuple[str, str, int]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    closed: bool = False
    refused_writes: list[str] = field(default_factory=list)


def command(lang: str, url: str, namespace: str) -> list[str]:
    contend = os.environ.get(
        "ACCORD_CONTEND", str(REPO / "target/debug/examples/contend")
    )
    args = [url, namespace, FLEET, str(SHARDS), str(TTL_MS), str(PERIOD_MS)]
    return {
        "rust": [contend, url, namespace, "fleet", *args[2:]],
        "python": [sys.executable, str(HERE / "fleet_worker.py"), *args],
        "node": ["node", str(HERE / "fleet_worker.js"), *args],
    }[lang]


def start(lang: str, url: str, namespace: str) -> Member:
    process = subprocess.Popen(
        command(lang, url, namespace),
        env={"ACCORD_FLEET_WRITES": "1", **os.environ},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    member = Member(lang, process)

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            member.lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return member


def read(members: list[Member]) -> None:
    """Applies every line the members printed so far."""
    for m in members:
        while True:
            try:
                line = m.lines.get_nowait()
            except queue.Empty:
                break
            m.log.append(line)
            word, *rest = line.split()
            if word == "READY":
                m.owner = rest[0]
            elif word == "ASSIGNED":
                m.held[rest[0]] = int(rest[1])
            elif word == "REVOKED":
                shard, reason, fence = rest[0], rest[1], int(rest[2])
                m.revoked.append((shard, reason, fence))
                if m.held.get(shard) == fence:
                    del m.held[shard]
            elif word == "WROTE" and rest[2] != "1":
                m.refused_writes.append(line)
            elif word == "CLOSED":
                m.closed = True


def wait_for(what: str, members: list[Member], check, bound: float = SETTLE) -> float:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    while time.monotonic() - started < bound:
        read(members)
        if check():
            took = time.monotonic() - started
            print(f"✓ {what} ({took:.2f} s, {took * 1000 / PERIOD_MS:.1f} periods)")
            return took
        for m in members:
            if m.process.poll() not in (None, 0, -9) and not m.closed:
                raise SystemExit(
                    f"✗ a {m.lang} member exited {m.process.returncode}: {m.log[-5:]}"
                )
        time.sleep(0.02)
    layout = {f"{m.lang}:{m.owner}": sorted(m.held) for m in members}
    raise SystemExit(f"✗ {what}: not within {bound:.0f} s; {layout}")


def even(live: list[Member]) -> bool:
    counts = [len(m.held) for m in live]
    held = set(itertools.chain.from_iterable(m.held for m in live))
    return (
        len(held) == SHARDS and sum(counts) == SHARDS and max(counts) - min(counts) <= 1
    )


def prepare(
    db: psycopg.Connection[tuple[object, ...]], url: str, audit: str, tag: str
) -> None:
    """The schema, the fenced resource table, and the audit of every grant of a shard in
    namespace `tag`, with the state of the grant it replaced."""
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
        """DROP TABLE IF EXISTS fleet_resource;
           CREATE TABLE fleet_resource (shard text PRIMARY KEY, fence bigint NOT NULL,
                                        owner text NOT NULL)"""
    )
    # Every grant of a shard, with the grant it replaced: live (a double grant), released
    # (a hand-off or a close), or expired (a member that died).
    db.execute(
        f"""CREATE TABLE "{audit}" (id bigserial PRIMARY KEY, key text NOT NULL,
                                    fence bigint NOT NULL, owner text NOT NULL,
                                    replaced text NOT NULL);
            CREATE FUNCTION "{audit}"() RETURNS trigger LANGUAGE plpgsql AS $f$
            BEGIN
              IF NEW.expires_at IS NOT NULL AND NEW.key LIKE '%/s/%'
                 AND (TG_OP = 'INSERT' OR NEW.fence IS DISTINCT FROM OLD.fence) THEN
                INSERT INTO "{audit}" (key, fence, owner, replaced) VALUES (
                  NEW.key, NEW.fence, NEW.owner,
                  CASE WHEN TG_OP = 'INSERT' OR OLD.expires_at IS NULL THEN 'released'
                       WHEN OLD.done THEN 'done'
                       WHEN OLD.expires_at > clock_timestamp() THEN 'live'
                       ELSE 'expired' END);
              END IF;
              RETURN NULL;
            END $f$;
            CREATE TRIGGER "{audit}" AFTER INSERT OR UPDATE ON accord.leases FOR EACH ROW
              WHEN (NEW.namespace = '{tag}') EXECUTE FUNCTION "{audit}"();"""
    )


def drop_audit(db: psycopg.Connection[tuple[object, ...]], audit: str) -> None:
    db.execute(f'DROP TRIGGER IF EXISTS "{audit}" ON accord.leases')
    db.execute(f'DROP FUNCTION IF EXISTS "{audit}"()')


def stop_all(members: list[Member]) -> None:
    """Every member still running: resumed if stopped, closed, killed if it hangs."""
    for m in members:
        if m.process.poll() is None:
            m.process.send_signal(signal.SIGCONT)
            m.process.send_signal(signal.SIGTERM)
    for m in members:
        try:
            m.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            m.process.kill()


def main() -> int:
    url = os.environ["ACCORD_TEST_DATABASE_URL"]
    tag = f"fleet_{os.getpid()}_{int(time.time())}"
    audit = f"audit_{tag}"
    langs = [lang for lang in START if lang in LANGUAGES] or ["rust"] * 4
    while len(langs) < 4:
        langs.append(langs[0])
    joiner = "python" if "python" in LANGUAGES else langs[0]
    failures: list[str] = []
    members: list[Member] = []
    stopped: Member | None = None
    with psycopg.connect(url, autocommit=True) as db:
        prepare(db, url, audit, tag)
        try:
            members = [start(lang, url, tag) for lang in langs]
            live = list(members)
            wait_for(
                f"F1: {len(live)} members in {', '.join(sorted(set(langs)))} split "
                f"{SHARDS} shards evenly",
                members,
                lambda: all(m.owner for m in live) and even(live),
            )

            # F1: with no change for 10 periods, no shard moves. Only assignments and
            # revocations count: the fenced write that follows the last assignment (its WROTE
            # line) may still arrive in the quiet window.
            def moves_of(m: Member) -> list[str]:
                return [x for x in m.log if x.split()[0] in ("ASSIGNED", "REVOKED")]

            quiet = {id(m): len(moves_of(m)) for m in members}
            time.sleep(10 * PERIOD_MS / 1000)
            read(members)
            moved = [x for m in members for x in moves_of(m)[quiet[id(m)] :]]
            if moved:
                failures.append(f"F1: {len(moved)} moves while stable: {moved[:4]}")
            print(f"{'✗' if moved else '✓'} F1: no shard moved in 10 stable periods")

            # F2: a fifth member joins; shards move by hand-off.
            grants_before = db.execute(f'SELECT max(id) FROM "{audit}"').fetchone()[0]
            newcomer = start(joiner, url, tag)
            members.append(newcomer)
            live.append(newcomer)
            wait_for(
                f"F2: a {joiner} member joins; every member holds 3 or 4",
                members,
                lambda: bool(newcomer.owner) and even(live),
            )
            moved_in = db.execute(
                f'SELECT replaced, count(*) FROM "{audit}" WHERE id > %s GROUP BY replaced',
                (grants_before,),
            ).fetchall()
            by_how = dict(moved_in)
            ok = set(by_how) == {"released"} and by_how["released"] >= 3
            print(
                f"{'✓' if ok else '✗'} F2: moved shards were handed off, no ttl waited ({by_how})"
            )
            if not ok:
                failures.append(f"F2: shards moved by {by_how}")
            # Every shard that moved went to the newcomer: no donor took back what it handed
            # off, and no other member picked it up on the way.
            takers = {
                row[0]
                for row in db.execute(
                    f'SELECT DISTINCT owner FROM "{audit}" WHERE id > %s',
                    (grants_before,),
                ).fetchall()
            }
            ok = takers == {newcomer.owner}
            print(
                f"{'✓' if ok else '✗'} F2: every moved shard went to the newcomer ({sorted(takers)})"
            )
            if not ok:
                failures.append(f"F2: moved shards went to {sorted(takers)}")
            handoffs = [r for m in members for r in m.revoked if r[1] == "handoff"]
            if len(handoffs) < by_how.get("released", 0):
                failures.append(f"F2: {len(handoffs)} handoff revocations for {by_how}")

            # F3: one member killed with SIGKILL; its shards retaken, the rest even.
            victim = next(m for m in live if m.lang == "rust")
            victim.process.kill()
            victim.process.wait()
            live.remove(victim)
            victim.held.clear()
            wait_for(
                f"F3: a killed {victim.lang} member's shards retaken, the rest even",
                members,
                lambda: even(live),
            )

            # F3: one member stopped past its ttl sees every shard revoked as lost.
            stopped = next((m for m in live if m.lang != joiner), live[0])
            held_when_stopped = dict(stopped.held)
            stopped.process.send_signal(signal.SIGSTOP)
            live.remove(stopped)
            time.sleep((TTL_MS + 2 * PERIOD_MS) / 1000)
            stopped_held = dict(held_when_stopped)
            stopped.held.clear()
            wait_for(
                f"F3: the shards of a {stopped.lang} member stopped past its ttl retaken",
                [m for m in members if m is not stopped],
                lambda: even(live),
            )
            stopped.process.send_signal(signal.SIGCONT)
            wait_for(
                f"F3: the stopped {stopped.lang} member, resumed, sees each of its shards revoked as lost",
                [stopped],
                lambda: all(
                    (shard, "lost", fence) in stopped.revoked
                    for shard, fence in stopped_held.items()
                ),
            )
            stopped.process.send_signal(signal.SIGTERM)
            live_after_stop = list(live)

            # F4: a member closes; the others take its shards (released, not expired).
            closer = live_after_stop[0]
            grants_before = db.execute(f'SELECT max(id) FROM "{audit}"').fetchone()[0]
            closer.process.send_signal(signal.SIGTERM)
            live.remove(closer)
            wait_for(
                f"F4: a {closer.lang} member closes; the others take its shards",
                members,
                lambda: closer.closed and not closer.held and even(live),
            )
            moved_in = dict(
                db.execute(
                    f'SELECT replaced, count(*) FROM "{audit}" WHERE id > %s GROUP BY replaced',
                    (grants_before,),
                ).fetchall()
            )
            if set(moved_in) - {"released"}:
                failures.append(f"F4: shards of a closed member moved by {moved_in}")
            print(
                f"{'✓' if set(moved_in) <= {'released'} else '✗'} F4: taken as released ({moved_in})"
            )
        finally:
            stop_all(members)
            drop_audit(db, audit)
        rows = db.execute(
            f'SELECT key, fence, owner, replaced FROM "{audit}" ORDER BY id'
        ).fetchall()
    read(members)
    double = [r for r in rows if r[3] == "live"]
    by_shard: dict[str, list[int]] = defaultdict(list)
    for key, fence, _, _ in rows:
        by_shard[key].append(fence)
    backwards = [
        k for k, f in by_shard.items() if any(b <= a for a, b in itertools.pairwise(f))
    ]
    owners = {r[2].split("-")[0] for r in rows}
    # A member stopped between its assignment and its write may find its write refused once
    # resumed (a newer holder wrote meanwhile): that refusal is the fence doing its job.
    refused = [line for m in members if m is not stopped for line in m.refused_writes]
    checks = [
        (not failures, "; ".join(failures) or "every step as promised"),
        (
            not double,
            f"no shard granted while its previous grant was live ({len(double)} of {len(rows)} grants)",
        ),
        (
            not backwards,
            f"fences strictly increase per shard ({len(backwards)} shards out of order)",
        ),
        (
            not refused,
            f"every member's fenced write after an assignment was accepted ({len(refused)} refused)",
        ),
        (
            owners >= set(langs),
            f"grants went to members in {', '.join(sorted(owners))}",
        ),
    ]
    for ok, what in checks:
        print(f"{'✓' if ok else '✗'} {what}")
    return 0 if all(ok for ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
