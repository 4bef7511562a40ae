"""The chaos run on etcd (`make chaos-etcd`, `make test-chaos-etcd`; docs/reliability.md, "On
etcd"): Rust workers hold leases on a 3-member etcd cluster and make fenced writes to a
PostgreSQL table while a seeded nemesis kills -9 the leader member and a follower, partitions a
member from the clients (its proxy freezes), cuts a member's client connections, and kills -9
and SIGSTOPs the workers; then the checker judges from the cluster's own history.

    scripts/with-postgres.sh scripts/with-etcd.sh .venv/bin/python chaos/etcd_run.py \\
        --seed 1 --duration 120 --report docs/reliability.md

Runs under scripts/with-etcd.sh (ACCORD_TEST_ETCD_URL, ACCORD_TEST_ETCD_MEMBERS: the members'
pid files and start scripts) and scripts/with-postgres.sh (ACCORD_TEST_DATABASE_URL: the
resource the workers write to, with its audit trigger, as in chaos/run.py). The workers are
target/debug/examples/chaos_worker built with the feature `etcd`; every other one also claims
from a work pool (claim, fenced write, done). The audit is a watch of the run's prefix from the
revision the run starts at, read after the run through the members' JSON gateway
(auto-compaction is 1 h, so the run's history is whole): every grant is a holder record's create (its fence: create_revision x 1024 +
its slot, its owner and attempt in its value) and ends with the record's delete, in revision
order; the rule judging double grants and stale writes is chaos/run.py's `judge`, fed revisions
for times. A pool key's done is the put of its row that turns `done` on: twice, under a fence
that was not its owner's grant, or a grant after it, is a violation (`judge_pool`).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

from run import (
    ETCD_SECTION,
    REPO,
    Nemesis,
    Proxy,
    Run,
    Worker,
    judge,
    log,
    start,
    summary,
)

NAMESPACE = "chaos"
PREFIX = "/chaos"
KEYS = [f"k{i}" for i in range(4)]
#: The work pool every other worker claims from (two keys every third round: claim, fenced
#: write, done): keys per second of nemesis, about what the workers finish, so that a run
#: drains most of its pool (a key offered again would be claimed again) and is never idle long.
POOL = "pool/"
POOL_PER_SECOND = 4


def pool_keys(duration: int) -> list[str]:
    return [f"{POOL}{i:05}" for i in range(POOL_PER_SECOND * duration)]


KINDS = [
    "kill9",
    "sigstop",
    "kill9_leader",
    "kill9_follower",
    "member_freeze",
    "member_cut",
]
#: The record that closes the audit's watch: a namespace's records start with its length, so
#: no namespace's records start like this.
END = "end-of-audit"
#: Far past any election or catch-up of a healthy loopback cluster: a bound that catches hangs.
SETTLE = 60

RESOURCE = """
DROP TABLE IF EXISTS chaos_resource, chaos_write_audit;
DROP FUNCTION IF EXISTS chaos_write_audit();
DROP SEQUENCE IF EXISTS chaos_audit_seq;
CREATE SEQUENCE chaos_audit_seq;
CREATE TABLE chaos_resource (key text PRIMARY KEY, fence bigint NOT NULL, writer text);
CREATE TABLE chaos_write_audit (
  seq bigint NOT NULL, at timestamptz NOT NULL, key text NOT NULL, fence bigint NOT NULL,
  old_fence bigint NOT NULL, writer text);
CREATE FUNCTION chaos_write_audit() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO chaos_write_audit
    VALUES (nextval('chaos_audit_seq'), clock_timestamp(), NEW.key, NEW.fence, OLD.fence,
            NEW.writer);
  RETURN NULL;
END $f$;
CREATE TRIGGER chaos_write_audit AFTER UPDATE ON chaos_resource FOR EACH ROW
  EXECUTE FUNCTION chaos_write_audit();
"""


def b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


def range_end(prefix: str) -> str:
    """etcd's range_end of every key starting with `prefix` (ASCII here)."""
    return b64(prefix[:-1] + chr(ord(prefix[-1]) + 1))


def holders() -> str:
    """Where the exclusive holders of the run's namespace live (core/src/backend/etcd/keys.rs)."""
    return f"{PREFIX}/l/h/{len(NAMESPACE)}:{NAMESPACE}/"


# --------------------------------------------------------------------------------------------
# The cluster (scripts/with-etcd.sh): members as processes, and their JSON gateway.


@dataclass
class Member:
    name: str
    client: str
    pid_file: Path
    start_script: str

    def pid(self) -> int:
        return int(self.pid_file.read_text().strip())

    def call(self, path: str, body: dict[str, Any], timeout: float = 3) -> dict[str, Any]:
        request = urllib.request.Request(
            f"http://{self.client}/v3/{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            result: dict[str, Any] = json.load(answer)
            return result


class Cluster:
    def __init__(self) -> None:
        self.url = os.environ["ACCORD_TEST_ETCD_URL"]
        lines = Path(os.environ["ACCORD_TEST_ETCD_MEMBERS"]).read_text().splitlines()
        self.members = []
        for line in filter(str.strip, lines):
            name, client, _peer, pid_file, _data, start_script = line.split("\t")
            self.members.append(Member(name, client, Path(pid_file), start_script))

    def leader(self) -> Member:
        """The member every running member names as leader (waiting for an agreement)."""
        end = time.monotonic() + SETTLE
        while True:
            named, ids = set(), {}
            for member in self.members:
                try:
                    status = member.call("maintenance/status", {}, timeout=1)
                except OSError:
                    continue
                ids[status["header"]["member_id"]] = member
                named.add(status.get("leader"))
            if len(named) == 1 and (leader := named.pop()) in ids and len(ids) == 3:
                return ids[leader]
            if time.monotonic() > end:
                raise RuntimeError(f"the members agree on no leader within {SETTLE} s")
            time.sleep(0.1)

    def kill_and_restart(self, member: Member, down: float) -> dict[str, float]:
        """kill -9 of the member, `down` s later its start script again; back when the
        members agree on a leader again (the restarted one included)."""
        began = time.time()
        pid = member.pid()
        os.kill(pid, signal.SIGKILL)
        while Path(f"/proc/{pid}").exists() and _state(pid) not in ("Z", "X"):
            time.sleep(0.01)
        time.sleep(down)
        subprocess.run([member.start_script], check=True)
        self.leader()
        return {"down": round(time.time() - began, 2)}

    def revision(self) -> int:
        answer = self.members_up()[0].call("kv/range", {"key": b64(PREFIX), "count_only": True})
        return int(answer["header"]["revision"])

    def members_up(self) -> list[Member]:
        up = []
        for member in self.members:
            try:
                member.call("maintenance/status", {}, timeout=1)
                up.append(member)
            except OSError:
                continue
        return up

    def history(self, key_prefix: str, start_revision: int = 1) -> list[dict[str, Any]]:
        """Every event on keys starting with `key_prefix` from `start_revision` on, in revision
        order: a watch, read until a last record put now (`END`, under the prefix and outside
        any namespace of the run) comes through it."""
        member = self.members_up()[0]
        end = key_prefix + END
        member.call("kv/put", {"key": b64(end), "value": b64("end")})
        request = urllib.request.Request(
            f"http://{member.client}/v3/watch",
            data=json.dumps(
                {
                    "create_request": {
                        "key": b64(key_prefix),
                        "range_end": range_end(key_prefix),
                        "start_revision": start_revision,
                    }
                }
            ).encode(),
        )
        events: list[dict[str, Any]] = []
        with urllib.request.urlopen(request, timeout=SETTLE) as stream:
            for line in stream:
                result = json.loads(line).get("result", {})
                if result.get("canceled"):
                    raise RuntimeError(f"the audit watch was cancelled: {result}")
                for event in result.get("events", []):
                    if base64.b64decode(event["kv"]["key"]).decode() == end:
                        return events
                    events.append(event)
        raise RuntimeError("the audit watch ended before its last record")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


# --------------------------------------------------------------------------------------------
# The nemesis: the client faults of chaos/run.py, and member faults.


class EtcdNemesis(Nemesis):
    def __init__(
        self,
        cluster: Cluster,
        proxies: list[Proxy],
        workers: list[Worker],
        run: Run,
        logs: Path,
        args: Any,
    ) -> None:
        # Not Nemesis.__init__: there is no PostgreSQL pair to fault here.
        self.cluster, self.proxies = cluster, proxies
        self.workers, self.run, self.logs = workers, run, logs
        self.rng = random.Random(args.seed)
        self.ttl = args.ttl_ms / 1000
        self.args = args
        self.kinds = KINDS

    def _kill_member(self, kind: str, leader: bool) -> None:
        current = self.cluster.leader()
        if leader:
            member = current
        else:
            member = self.rng.choice([m for m in self.cluster.members if m is not current])
        detail = self.cluster.kill_and_restart(member, self.rng.uniform(0.5, 2.0))
        self.record(kind, member=member.name, **detail)

    def kill9_leader(self) -> None:
        self._kill_member("kill9_leader", leader=True)

    def kill9_follower(self) -> None:
        self._kill_member("kill9_follower", leader=False)

    def member_freeze(self) -> None:
        """The clients' proxy of one member stops moving bytes (connections open): to the
        clients the member is partitioned away, and its peers still see it."""
        i = self.rng.randrange(len(self.proxies))
        hold = self.ttl * 1.5 + self.rng.uniform(0.2, 1.0)
        self.proxies[i].freeze(True)
        time.sleep(hold)
        self.proxies[i].freeze(False)
        self.record("member_freeze", member=self.cluster.members[i].name, seconds=round(hold, 2))

    def member_cut(self) -> None:
        i = self.rng.randrange(len(self.proxies))
        cut = self.proxies[i].cut()
        self.record("member_cut", member=self.cluster.members[i].name, connections=cut)


# --------------------------------------------------------------------------------------------
# The audit


def grant_rows(
    events: list[dict[str, Any]], base: str | None = None
) -> tuple[list[tuple[Any, ...]], int]:
    """The history of the holders under `base` (default: this run's, `holders()`; events on
    other keys are skipped) as chaos/run.py's lease audit rows, one per grant: (seq, at, op,
    key, owner, fence, expires_at, done, granted_at, attempt) with revisions for times: a grant
    is live from its record's create to its delete. A put over a live record (never made by a
    correct store: a grant compares the holder's version with 0) is a new grant over the old,
    which then counts as live for ever: the judge sees a double grant. Also the count of
    records still live at the end (tests/polyglot/pool.py audits its pool run with it too)."""
    base = base or holders()
    live: dict[str, list[Any]] = {}
    rows: list[list[Any]] = []
    for event in events:
        kv = event["kv"]
        record = base64.b64decode(kv["key"]).decode()
        if not record.startswith(base):
            continue
        key = record[len(base) :]
        revision = int(kv["mod_revision"])
        if event.get("type") == "DELETE":
            if key in live:
                live.pop(key)[6] = revision
            continue
        value = json.loads(base64.b64decode(kv["value"]))
        fence = int(kv["create_revision"]) * 1024 + int(value.get("s", 0))
        if key in live and live[key][5] == fence:
            continue  # the same grant's record written again
        if key in live:
            live.pop(key)[6] = float("inf")
        row = [revision, revision, "PUT", key, value.get("o"), fence, None, False, revision]
        row.append(value.get("a"))
        rows.append(row)
        live[key] = row
    for row in live.values():
        row[6] = float("inf")
    rows.sort(key=lambda r: (r[3], r[0]))
    return [tuple(r) for r in rows], len(live)


def key_rows() -> str:
    """Where the rows of the run's namespace live: a key's row outlives its grants and says
    whether it is done (core/src/backend/etcd/keys.rs, records.rs)."""
    return f"{PREFIX}/k/{len(NAMESPACE)}:{NAMESPACE}/"


def done_rows(
    events: list[dict[str, Any]], base: str | None = None
) -> dict[str, list[tuple[str, int, int]]]:
    """key → [(owner, fence, revision)] of each put of its row under `base` (default: this
    run's, `key_rows()`) that turned `done` on (a row's `d`, `o` and `f`), in revision order: more
    than one is a key done twice (tests/polyglot/pool.py audits its pool run with it too)."""
    base = base or key_rows()
    done: dict[str, bool] = {}
    turned: dict[str, list[tuple[str, int, int]]] = {}
    for event in events:
        kv = event["kv"]
        record = base64.b64decode(kv["key"]).decode()
        if not record.startswith(base):
            continue
        key = record[len(base) :]
        if event.get("type") == "DELETE":
            done.pop(key, None)
            continue
        row = json.loads(base64.b64decode(kv["value"]))
        if row.get("d") and not done.get(key):
            turned.setdefault(key, []).append(
                (row.get("o"), int(row.get("f", 0)), int(kv["mod_revision"]))
            )
        done[key] = bool(row.get("d"))
    return turned


def judge_pool(
    rows: list[tuple[Any, ...]], turned: dict[str, list[tuple[str, int, int]]]
) -> dict[str, Any]:
    """The pool's dones from etcd's rows against the grants: a key turned done twice, done
    under a fence that was not its owner's grant, or granted again after it was done."""
    violations: list[str] = []
    granted = {(row[3], row[5]): row[4] for row in rows}
    twice = foreign = regranted = 0
    for key, dones in sorted(turned.items()):
        if len(dones) > 1:
            twice += 1
            violations.append(f"pool key {key} done {len(dones)} times: {dones}")
        for owner, fence, _revision in dones:
            if granted.get((key, fence)) != owner:
                foreign += 1
                violations.append(
                    f"pool key {key} done by {owner} under fence {fence}: no such grant"
                )
        after = [row for row in rows if row[3] == key and row[0] > dones[0][2]]
        if after:
            regranted += 1
            violations.append(
                f"pool key {key} granted again after it was done (fence {after[0][5]})"
            )
    return {
        "violations": violations,
        "done": len(turned),
        "twice": twice,
        "foreign": foreign,
        "regranted": regranted,
    }


def selftest() -> None:
    """The audit must see what it exists to see (a checker that cannot fail is no check): a
    grant over a live record, a create while the previous grant's record lives, a stale write
    and a write with a fence no grant had, from a made-up history."""

    def put(key: str, revision: int, owner: str, created: int | None = None) -> dict[str, Any]:
        value = b64(json.dumps({"o": owner, "a": revision, "s": 0}))
        kv = {"key": b64(holders() + key), "value": value, "mod_revision": str(revision)}
        return {"kv": kv | {"create_revision": str(created or revision)}}

    def delete(key: str, revision: int) -> dict[str, Any]:
        return {
            "type": "DELETE",
            "kv": {"key": b64(holders() + key), "mod_revision": str(revision)},
        }

    clean = [put("a", 2, "w1"), delete("a", 3), put("a", 4, "w2"), delete("a", 5)]
    rows, live = grant_rows(clean)
    writes = [
        (float("inf"), 0, "a", 2 * 1024, 0, "w1", False),
        (float("inf"), 0, "a", 4 * 1024, 0, "w2", False),
    ]
    result = judge(rows, writes, [])
    assert result["violations"] == [] and result["grants"] == 2 and live == 0, result
    # The second grant overwrites the first's record (a put with no version compare).
    overwrite = [put("a", 2, "w1"), put("a", 3, "w2", created=3), delete("a", 4)]
    assert judge(grant_rows(overwrite)[0], [], [])["double"] == 1
    # Two records of one key at once cannot be in etcd; a grant whose holder record the audit
    # never saw deleted before the next is: the next is a double grant.
    unended = [put("a", 2, "w1"), put("a", 3, "w2")]
    assert judge(grant_rows(unended)[0], [], [])["double"] == 1
    stale = [*writes, (float("inf"), 0, "a", 2 * 1024, 0, "w1", False)]
    assert judge(rows, stale, [])["stale"] == 1
    unknown = [(float("inf"), 0, "a", 9 * 1024, 0, "w1", False)]
    assert judge(rows, unknown, [])["unknown_writer"] == 1
    told = [{"ev": "granted", "key": "a", "fence": 7 * 1024, "lang": "rust", "role": "lease"}]
    assert judge(rows, [], told)["lost_grants"] == 1

    def row(key: str, revision: int, owner: str, fence: int, done: bool) -> dict[str, Any]:
        value = b64(json.dumps({"o": owner, "f": fence, "d": done}))
        return {
            "kv": {"key": b64(rows_prefix + key), "value": value, "mod_revision": str(revision)}
        }

    # Pool keys: a done by the grant's owner passes; a second done, a done under a fence
    # nobody was granted, and a grant after the done do not.
    rows_prefix = key_rows()
    granted_once = grant_rows([put("a", 2, "w1"), delete("a", 3)])[0]
    done_once = [row("a", 3, "w1", 2 * 1024, True)]
    assert judge_pool(granted_once, done_rows(done_once))["violations"] == []
    done_twice = [*done_once, row("a", 6, "w1", 2 * 1024, False), row("a", 7, "w1", 2 * 1024, True)]
    assert judge_pool(granted_once, done_rows(done_twice))["twice"] == 1
    assert judge_pool([], done_rows(done_once))["foreign"] == 1
    assert judge_pool(grant_rows(clean)[0], done_rows(done_once))["regranted"] == 1


def check(
    cluster: Cluster, db: psycopg.Connection[Any], run: Run, evidence: Path, since: int
) -> Any:
    events = cluster.history(f"{PREFIX}/", since + 1)
    rows, live = grant_rows(events)
    pool = judge_pool(rows, done_rows(events))
    writes = db.execute(
        "SELECT seq, key, fence, old_fence, writer FROM chaos_write_audit ORDER BY key, seq"
    ).fetchall()
    # The judge's `late` compares a write's time with its grant's end: there is no common clock
    # between etcd's revisions and PostgreSQL's, so every write is given time 0 (not judged).
    # No write holds a lease row here (the leases are in etcd: nothing to check in SQL).
    audited = [
        (float("inf"), 0, key, fence, old, writer, False) for _s, key, fence, old, writer in writes
    ]
    with run.lock:
        reports = list(run.events)
        faults = list(run.faults)
    evidence.write_text(
        json.dumps(
            {
                "watch": events,
                "writes": [list(w) for w in writes],
                "events": reports,
                "faults": faults,
            },
            default=str,
        )
    )
    result = judge(rows, audited, reports)
    result["violations"] += pool["violations"]
    result["pool"] = pool
    result["live_at_end"] = live
    result["revisions"] = cluster.revision()
    return result


# --------------------------------------------------------------------------------------------


def offer(url: str, keys: list[str]) -> None:
    """The work pool, offered through the Python binding (its wheel reaches etcd)."""
    import accord

    with accord.Client.connect(url, namespace=NAMESPACE) as client:
        client.offer(POOL, keys)


def build_workers(
    cluster: Cluster, proxies: list[Proxy], db_url: str, ttl_ms: int, count: int
) -> list[Worker]:
    proxied = "etcd://" + ",".join(f"127.0.0.1:{p.ports[0]}" for p in proxies)
    common = {
        "CHAOS_WRITER_URL": db_url,
        "CHAOS_NAMESPACE": NAMESPACE,
        "CHAOS_KEYS": ",".join(KEYS),
        "CHAOS_TTL_MS": str(ttl_ms),
    }
    program = [str(REPO / "target/debug/examples/chaos_worker")]
    workers = []
    for i in range(count):
        # Most reach the members through their proxies (so that a member's partition and cut
        # reach them); the others directly.
        url = cluster.url if i % 3 == 2 else proxied
        env = common | {"CHAOS_URL": f"{url}?prefix={PREFIX}"}
        if i % 2 == 1:
            env["CHAOS_POOL"] = POOL
        workers.append(Worker(f"rust{i}", "rust", program, env))
    return workers


def report(args: Any, result: dict[str, Any], run: Run, workers: list[Worker], wall: float) -> str:
    counts = {kind: sum(1 for f in run.faults if f["kind"] == kind) for kind in KINDS}
    failed = sorted({f["kind"] for f in run.faults if f["kind"].endswith("_failed")})
    downs = [f["down"] for f in run.faults if f["kind"].startswith("kill9_") and "down" in f]
    version = os.environ.get("ACCORD_TEST_ETCD_VERSION", "?")
    verdict = "PASS" if not result["violations"] else "FAIL"
    direct = [w.slot for i, w in enumerate(workers) if i % 3 == 2]
    pooled = [w.slot for w in workers if "CHAOS_POOL" in w.env]
    what = {
        "kill9": "SIGKILL of a worker, one granted a lease and not yet written with it if any "
        "(restarted under a new owner)",
        "sigstop": "SIGSTOP of a worker (chosen alike) for 1.5 ttl + 0.2-1 s, then SIGCONT",
        "kill9_leader": "SIGKILL of the leader member, restarted 0.5-2 s later on its data",
        "kill9_follower": "SIGKILL of a follower member, restarted alike",
        "member_freeze": "the clients' proxy of one member stops moving bytes for 1.5 ttl + "
        "0.2-1 s (a partition from the clients; its peers still reach it)",
        "member_cut": "the clients' proxy of one member closes every connection",
    }
    r = result
    lines = [
        "",
        "## On etcd",
        "",
        (
            "Generated by `make chaos-etcd` (chaos/etcd_run.py; `make chaos` runs it after the "
            f"run above). Verdict: **{verdict}** ({len(r['violations'])} violations)."
        ),
        "",
        (
            f"- Cluster: 3 members of etcd {version} on loopback (`scripts/with-etcd.sh`). "
            f"Workers: {len(workers)} in Rust (`chaos_worker` with the feature `etcd`), the "
            f"loop of the run above on {len(KEYS)} keys, ttl {args.ttl_ms} ms, the fenced "
            "write to a PostgreSQL table (with its write audit); "
            f"{', '.join(f'`{s}`' for s in pooled)} also claim two keys of a work pool of "
            f"{len(pool_keys(args.duration))} every third round, make the fenced write with each and mark it "
            "done. Each member has a TCP proxy in front of it; "
            f"{', '.join(f'`{s}`' for s in direct)} reach the members directly, the others "
            "through the proxies only. Streams and fleets are not in the etcd run yet."
        ),
        (
            "- The audit: a watch of the run's prefix from the revision it starts at (after the run, "
            "through a member's JSON gateway; nothing is compacted within the hour), "
            "trusting no worker: each holder record's create is a grant (fence "
            "create_revision x 1024 + slot, owner and attempt from its value), its delete "
            "the grant's end, in etcd's revision order; a double grant is a grant while "
            "the key's previous one is live in that order. A pool key's done is the put of "
            "its row that turns `done` on: a second one, one under a fence that was not the "
            "owner's grant, or a grant after it is a violation. The writes are judged from "
            "the PostgreSQL audit as above."
        ),
        (
            f"- Seed {args.seed}, nemesis for {args.duration} s (a fault every "
            f"{args.gap[0]}-{args.gap[1]} s, each kind once per seeded round); wall time "
            f"{wall:.0f} s; {r['revisions']} revisions."
        ),
        "",
        "| kind | what | injected |",
        "| --- | --- | ---: |",
    ]
    lines += [f"| {kind} | {what[kind]} | {counts[kind]} |" for kind in KINDS]
    if failed:
        lines += ["", f"Injections that failed: {', '.join(failed)}."]
    lines += [
        "",
        f"A killed member was back, with the members agreeing on a leader, after {summary(downs, 's')}.",
        "",
        "| check | value |",
        "| --- | ---: |",
        f"| grants (the watch) | {r['grants']} |",
        f"| fenced writes accepted (server record) | {r['accepted']} |",
        f"| fenced writes refused (stale writers caught; workers' reports) | {r['refused']} |",
        f"| **double grants** | **{r['double']}** |",
        f"| **stale writes accepted** | **{r['stale']}** |",
        f"| fences not increasing per key | {r['backwards']} |",
        f"| accepted writes with no matching grant to the writer | {r['unknown_writer']} |",
        f"| grants reported to a worker but not in the watch | {r['lost_grants']} |",
        f"| writes acknowledged to a worker but not on record | {r['lost_writes']} |",
        f"| work-pool keys done (etcd's rows) | {r['pool']['done']} |",
        f"| **pool keys done twice** | **{r['pool']['twice']}** |",
        f"| pool keys done under a fence not granted to the owner | {r['pool']['foreign']} |",
        f"| pool keys granted again after done | {r['pool']['regranted']} |",
        "",
        (
            f"Reproduce: `make chaos-etcd CHAOS_SEED={args.seed} CHAOS_ETCD_DURATION="
            f"{args.duration}`; `make test-chaos-etcd` is a short run that `make test` includes."
        ),
    ]
    if r["violations"]:
        lines += ["", "### Violations on etcd", ""] + [f"- {v}" for v in r["violations"][:50]]
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str) -> None:
    """Replaces the report's etcd section (its end) with `section`."""
    text = path.read_text()
    at = text.find(ETCD_SECTION)
    path.write_text((text[:at] if at >= 0 else text).rstrip("\n") + "\n" + section)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--duration", type=int, default=120, help="seconds of nemesis")
    parser.add_argument("--ttl-ms", type=int, default=1500)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--gap", type=float, nargs=2, default=(1.0, 3.0))
    parser.add_argument("--report", type=Path, help="write the etcd section of this report")
    parser.add_argument(
        "--require-all", action="store_true", help="fail unless every kind was injected"
    )
    args = parser.parse_args()
    selftest()
    began = time.time()
    worker = REPO / "target/debug/examples/chaos_worker"
    if not worker.exists():
        print(
            f"{worker} is missing: cargo build -p accord-coord --features etcd --example chaos_worker"
        )
        return 1
    db_url = os.environ["ACCORD_TEST_DATABASE_URL"]
    cluster = Cluster()
    logs = Path(os.environ.get("CHAOS_LOGS", REPO / "target/chaos/logs-etcd"))
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    pool = pool_keys(args.duration)
    with psycopg.connect(db_url, autocommit=True) as db:
        db.execute(RESOURCE)
        with db.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO chaos_resource VALUES (%s, 0, NULL)", [(k,) for k in KEYS + pool]
            )
    # A run before this one on the same cluster: its records go. The audit reads the history
    # from the revision after that delete: this run's whole record, and nothing older, which a
    # compaction (a test's, or etcd's auto-compaction) may already have removed.
    up = cluster.members_up()[0]
    up.call("kv/deleterange", {"key": b64(PREFIX + "/"), "range_end": range_end(PREFIX + "/")})
    since = cluster.revision()
    offer(f"{cluster.url}?prefix={PREFIX}", pool)
    ports = [int(urlsplit(f"http://{m.client}").port or 0) for m in cluster.members]
    proxies = [Proxy([port]) for port in ports]
    workers = build_workers(cluster, proxies, db_url, args.ttl_ms, args.workers)
    run = Run()
    for w in workers:
        start(w, run, logs)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        with run.lock:
            started = {e["w"] for e in run.events if e["ev"] == "start"}
        if all(w.name in started for w in workers):
            break
        time.sleep(0.1)
    time.sleep(1)
    nemesis = EtcdNemesis(cluster, proxies, workers, run, logs, args)
    try:
        nemesis.loop(time.time() + args.duration)
        time.sleep(2)
    finally:
        for proxy in proxies:
            proxy.freeze(False)
        for w in workers:
            if w.process and w.process.poll() is None:
                os.kill(w.process.pid, signal.SIGCONT)
                w.process.kill()
        for w in workers:
            if w.process:
                w.process.wait()
    time.sleep(0.5)  # the readers drain the pipes
    with psycopg.connect(db_url, autocommit=True) as db:
        result = check(cluster, db, run, logs / "evidence.json", since)
    wall = time.time() - began
    section = report(args, result, run, workers, wall)
    if args.report:
        write_section(args.report, section)
        log(f"etcd section written to {args.report}")
    print(section)
    counts = {kind: sum(1 for f in run.faults if f["kind"] == kind) for kind in KINDS}
    problems = list(result["violations"])
    if args.require_all:
        problems += [f"{kind} never injected" for kind, n in counts.items() if n == 0]
        if result["grants"] == 0:
            problems.append("no grant at all")
        if result["accepted"] == 0:
            problems.append("no fenced write accepted")
        if result["pool"]["done"] == 0:
            problems.append("no pool key done")
    for problem in problems[:50]:
        print(f"✗ {problem}")
    print(
        f"chaos on etcd: {result['grants']} grants, {result['accepted']} writes accepted, "
        f"{result['refused']} refused, faults {counts}, violations {len(result['violations'])}, "
        f"{wall:.0f} s"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
