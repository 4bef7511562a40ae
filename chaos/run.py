"""The chaos run (`make chaos`, `make test-chaos`): workers in every language hold leases and make
fenced writes on a durable PostgreSQL primary with a synchronous standby while a seeded nemesis
kills, stops, cuts, restarts and fails over; then a checker judges from the server's own record.

    ACCORD_PAIR_FSYNC=on scripts/failover-pair.sh run .venv/bin/python chaos/run.py \\
        --seed 1 --duration 300 --report docs/reliability.md

Runs under scripts/failover-pair.sh (which exports ACCORD_TEST_FAILOVER_URL, _DIR and _CTL).
Workers (each loops acquire → a little work → fenced write through a plain SQL connection of its
own, accord's check_fence and the UPDATE in one transaction → a little work → release, and
prints JSON lines):

    rust    target/debug/examples/chaos_worker      (cargo build -p accord-coord --example chaos_worker)
    python  chaos/workers/worker.py                 (the package installed in the venv)
    node    chaos/workers/worker.js                 (the addon built in node/)
    c       target/chaos/worker_c                   (libaccord + libpq)
    go      target/chaos/worker_go                  (bindings/go + libpq)
    run     chaos/workers/run_worker.sh             (`accord run KEY -- psql …$ACCORD_FENCE`)

A worker whose program is missing is left out (and the report says so). The checker reads two
audit tables that triggers fill inside the transactions that change the rows, so it trusts no
worker: `chaos_lease_audit` (every INSERT or UPDATE of accord.leases in the run's namespace:
key, owner, fence, expires_at, done, the server's clock and a sequence value taken while the row
is locked, so per key in row-lock order) and `chaos_write_audit` (every accepted fenced write,
and whether its transaction held the key's lease row from a check: pgrowlocks).
The recipes (chaos/workers/source.py, subscriber.py/.js, member.py/.js): a source notifies
numbered messages (each committed with its number into `chaos_notify_audit`) and publishes to
a durable stream; subscribers in Python and Node (one through the proxy) listen and read the
stream as named consumers; fleet members in Python and Node share a fleet's shards. Listener
gaps are judged against the notify audit (each must be announced by `Reconnected`), readers
against the stream's own table (every event, in order, at least once per consumer), shards by
the lease audit like every key.

Exit status 1 on any violation, or (with --require-all) when a fault kind was never injected or
no lease was granted.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
NAMESPACE = "chaos"
KEYS = [f"k{i}" for i in range(4)]
POOL = "pool/"
POOL_SIZE = 400
#: The listeners' channel, the stream the readers consume, the fleet the members share.
CHANNEL = "chaos_listen"
STREAM = "chaos"
FLEET = "chaosfleet"
SHARDS = 6
#: How long, after the nemesis, every listener and reader has to receive what was sent before
#: it ended (a hung listening connection is found by a probe every 10 s, reconnects back off up
#: to 5 s): past it, the one that did not is a violation, it failed silently.
CATCH_UP = 60
KINDS = [
    "kill9",
    "kill9_member",
    "kill9_reader",
    "sigstop",
    "terminate",
    "restart_fast",
    "restart_immediate",
    "failover",
    "proxy_freeze",
    "proxy_cut",
]


def log(message: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", flush=True)


# --------------------------------------------------------------------------------------------
# The pair (scripts/failover-pair.sh)


class Pair:
    def __init__(self) -> None:
        self.dir = Path(os.environ["ACCORD_TEST_FAILOVER_DIR"])
        self.ctl = os.environ["ACCORD_TEST_FAILOVER_CTL"]
        self.password = (self.dir / "password").read_text().strip()
        self.ports = {n: int((self.dir / f"{n}.port").read_text()) for n in "ab"}

    def url(self, ports: list[int], **params: str) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in ports)
        query = "&".join(
            [f"{k}={quote(v)}" for k, v in {"target_session_attrs": "read-write", **params}.items()]
        )
        return f"postgres://postgres:{quote(self.password)}@{hosts}/postgres?{query}"

    def ctl_run(self, *args: str) -> None:
        subprocess.run([self.ctl, *args], check=True, stdout=subprocess.DEVNULL)

    def primary(self) -> str:
        out = subprocess.run([self.ctl, "primary"], capture_output=True, text=True, check=True)
        return out.stdout.strip()

    def connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(
            self.url(list(self.ports.values()), application_name="chaos", connect_timeout="5"),
            autocommit=True,
        )

    def wait_primary(self, deadline: float = 60) -> psycopg.Connection[Any]:
        end = time.monotonic() + deadline
        while True:
            try:
                return self.connect()
            except psycopg.OperationalError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.2)


# --------------------------------------------------------------------------------------------
# The TCP proxy between one worker and the server: freezes (stops moving bytes, connections
# open) or cuts (closes) that worker's connections.


class Proxy:
    def __init__(self, targets: list[int]) -> None:
        self.targets = targets
        self.ports: list[int] = []
        self.loop = asyncio.new_event_loop()
        self.flowing = asyncio.Event()
        self.writers: set[asyncio.StreamWriter] = set()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.flowing.set()

        async def start() -> None:
            for target in self.targets:
                serve = functools.partial(self._serve, target=target)
                server = await asyncio.start_server(serve, "127.0.0.1", 0)
                self.ports.append(server.sockets[0].getsockname()[1])

        self.loop.run_until_complete(start())
        ready.set()
        self.loop.run_forever()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: int
    ) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            writer.close()
            return
        self.writers |= {writer, up_writer}

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    await self.flowing.wait()
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.close()
                self.writers.discard(dst)

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    def freeze(self, frozen: bool) -> None:
        self.loop.call_soon_threadsafe(self.flowing.clear if frozen else self.flowing.set)

    def cut(self) -> int:
        done = threading.Event()
        count = [0]

        def close_all() -> None:
            count[0] = len(self.writers)
            for w in list(self.writers):
                w.transport.abort()
            self.writers.clear()
            done.set()

        self.loop.call_soon_threadsafe(close_all)
        done.wait(5)
        return count[0] // 2


# --------------------------------------------------------------------------------------------
# Workers


@dataclass
class Worker:
    slot: str
    lang: str
    command: list[str]
    env: dict[str, str]
    incarnation: int = 0
    process: subprocess.Popen[str] | None = None
    holding: tuple[str, int] | None = None
    #: True between a grant and the worker's write with it: a fault then makes a stale writer.
    before_write: bool = False
    stopped: bool = False
    #: lease (fenced writes), member (of the fleet), subscriber (listens and reads the stream)
    #: or source (notifies and publishes).
    role: str = "lease"
    #: A member's shards by its own reports: shard → fence.
    shards: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.slot}.{self.incarnation}"


@dataclass
class Run:
    events: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    faults: list[dict[str, Any]] = field(default_factory=list)
    #: (worker name, "msg" | "entry") → the highest n or seq it reported (for the catch-up).
    top: dict[tuple[str, str], int] = field(default_factory=dict)

    def reader(self, worker: Worker, process: subprocess.Popen[str], name: str) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            event["w"] = name
            event["lang"] = worker.lang
            event["role"] = worker.role
            with self.lock:
                self.events.append(event)
                if event["ev"] in ("msg", "entry"):
                    got = event["n" if event["ev"] == "msg" else "seq"]
                    top = (name, event["ev"])
                    self.top[top] = max(self.top.get(top, 0), got)
                if process is worker.process:
                    if event["ev"] == "assigned":
                        worker.shards[event["shard"]] = event["fence"]
                    elif event["ev"] == "revoked":
                        worker.shards.pop(event["shard"], None)
                    elif event["ev"] == "granted":
                        worker.holding = (event["key"], event["fence"])
                        worker.before_write = True
                    elif event["ev"] in ("write", "write_error"):
                        worker.before_write = False
                    elif (
                        event["ev"] in ("released", "lost")
                        and worker.holding
                        and event.get("fence") in (None, worker.holding[1])
                    ):
                        worker.holding = None


def start(worker: Worker, run: Run, logs: Path) -> None:
    worker.incarnation += 1
    env = {**os.environ, **worker.env, "CHAOS_NAME": worker.name}
    stderr = open(logs / f"{worker.name}.err", "w")  # noqa: SIM115 (the child keeps it)
    process = subprocess.Popen(
        worker.command, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True
    )
    stderr.close()
    worker.process, worker.holding, worker.stopped = process, None, False
    worker.before_write = False
    worker.shards = {}
    threading.Thread(target=run.reader, args=(worker, process, worker.name), daemon=True).start()


def target_pid(worker: Worker) -> int | None:
    """The process that holds the lease: the worker, or for `accord run` its accord child."""
    assert worker.process is not None
    pid = worker.process.pid
    if worker.lang != "run":
        return pid
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        try:
            if Path(f"/proc/{child}/comm").read_text().strip() == "accord":
                return int(child)
        except OSError:
            continue
    return None


def build_workers(pair: Pair, proxy: Proxy, ttl_ms: int) -> tuple[list[Worker], list[str]]:
    direct = list(pair.ports.values())
    url = pair.url(direct)
    writer_url = pair.url(direct, application_name="chaos-writer", connect_timeout="3")
    proxied = pair.url(proxy.ports)
    common = {
        "CHAOS_URL": url,
        "CHAOS_WRITER_URL": writer_url,
        "CHAOS_NAMESPACE": NAMESPACE,
        "CHAOS_KEYS": ",".join(KEYS),
        "CHAOS_TTL_MS": str(ttl_ms),
        "CHAOS_WRITER_HOSTS": ",".join(f"127.0.0.1:{p}" for p in direct),
        "CHAOS_PGUSER": "postgres",
        "CHAOS_PGPASSWORD": pair.password,
        "CHAOS_PGDATABASE": "postgres",
        "CHAOS_CHANNEL": CHANNEL,
        "CHAOS_STREAM": STREAM,
        "CHAOS_FLEET": FLEET,
        "CHAOS_SHARDS": str(SHARDS),
    }
    py = sys.executable
    bindir = subprocess.run(
        ["pg_config", "--bindir"], capture_output=True, text=True, check=False
    ).stdout.strip()
    psql = str(Path(bindir) / "psql") if bindir else (shutil.which("psql") or "psql")
    programs = {
        "rust": [str(REPO / "target/debug/examples/chaos_worker")],
        "python": [py, str(HERE / "workers/worker.py")],
        "node": ["node", str(HERE / "workers/worker.js")],
        "c": [str(REPO / "target/chaos/worker_c")],
        "go": [str(REPO / "target/chaos/worker_go")],
        "run": ["bash", str(HERE / "workers/run_worker.sh")],
    }
    available = {
        "rust": Path(programs["rust"][0]).exists(),
        "python": True,
        "node": any((REPO / "node").glob("accord.*.node")) and shutil.which("node") is not None,
        "c": Path(programs["c"][0]).exists(),
        "go": Path(programs["go"][0]).exists(),
        "run": (REPO / "target/debug/accord").exists(),
    }
    plan = [
        ("rust", 2),
        ("python", 2),
        ("node", 2),
        ("c", 1),
        ("go", 1),
        ("run", 1),
    ]
    workers = []
    for lang, count in plan:
        if not available[lang]:
            continue
        for i in range(count):
            env = dict(common)
            if lang == "python" and i == 1:
                env["CHAOS_POOL"] = POOL
            if lang == "run":
                env |= {"CHAOS_ACCORD": str(REPO / "target/debug/accord"), "CHAOS_PSQL": psql}
            workers.append(Worker(f"{lang}{i}", lang, programs[lang], env))
    # The proxied worker: Python, its coordinator and writer connections through the proxy.
    proxied_env = dict(common) | {
        "CHAOS_URL": proxied,
        "CHAOS_WRITER_URL": pair.url(
            proxy.ports, application_name="chaos-writer", connect_timeout="3"
        ),
    }
    workers.append(Worker("proxied", "python", programs["python"], proxied_env))
    # The recipes: a source that notifies and publishes, subscribers that listen and read the
    # stream (one of them through the proxy), fleet members.
    workers.append(Worker("source", "python", [py, str(HERE / "workers/source.py")], common))
    workers[-1].role = "source"
    subscribers = [("sub_py", "python", common), ("sub_node", "node", common)]
    subscribers.append(("sub_proxied", "node", proxied_env))
    for slot, lang, env in subscribers:
        if available[lang]:
            program = [py, str(HERE / "workers/subscriber.py")]
            if lang == "node":
                program = ["node", str(HERE / "workers/subscriber.js")]
            # The consumer's name is the slot's: a restarted reader resumes after its last ack.
            workers.append(Worker(slot, lang, program, env | {"CHAOS_CONSUMER": slot}))
            workers[-1].role = "subscriber"
    for slot, lang in [("fleet_py0", "python"), ("fleet_py1", "python"), ("fleet_node0", "node")]:
        if available[lang]:
            program = [py, str(HERE / "workers/member.py")]
            if lang == "node":
                program = ["node", str(HERE / "workers/member.js")]
            workers.append(Worker(slot, lang, program, dict(common)))
            workers[-1].role = "member"
    missing = [lang for lang, ok in available.items() if not ok]
    return workers, missing


# --------------------------------------------------------------------------------------------
# Schema and audit


SETUP = f"""
DROP TRIGGER IF EXISTS chaos_lease_audit ON accord.leases;
DROP TABLE IF EXISTS chaos_resource, chaos_lease_audit, chaos_write_audit, chaos_notify_audit;
DROP FUNCTION IF EXISTS chaos_lease_audit(), chaos_write_audit();
DROP SEQUENCE IF EXISTS chaos_audit_seq;
DELETE FROM accord.leases WHERE namespace = '{NAMESPACE}';
DELETE FROM accord.tickets WHERE namespace = '{NAMESPACE}';
DELETE FROM accord.stream_events WHERE namespace = '{NAMESPACE}';
DELETE FROM accord.stream_acks WHERE namespace = '{NAMESPACE}';
DELETE FROM accord.streams WHERE namespace = '{NAMESPACE}';
CREATE TABLE chaos_notify_audit (n bigint PRIMARY KEY, at timestamptz NOT NULL);
CREATE TABLE chaos_resource (key text PRIMARY KEY, fence bigint NOT NULL, writer text);
CREATE SEQUENCE chaos_audit_seq;
CREATE TABLE chaos_lease_audit (
  seq bigint NOT NULL, at timestamptz NOT NULL, op text NOT NULL, key text NOT NULL,
  owner text, fence bigint NOT NULL, expires_at timestamptz, done boolean NOT NULL,
  granted_at timestamptz, attempt bigint);
CREATE FUNCTION chaos_lease_audit() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO chaos_lease_audit
    VALUES (nextval('chaos_audit_seq'), clock_timestamp(), TG_OP, NEW.key, NEW.owner, NEW.fence,
            NEW.expires_at, NEW.done, NEW.granted_at, NEW.attempt);
  RETURN NULL;
END $f$;
CREATE TRIGGER chaos_lease_audit AFTER INSERT OR UPDATE ON accord.leases FOR EACH ROW
  WHEN (NEW.namespace = '{NAMESPACE}') EXECUTE FUNCTION chaos_lease_audit();
CREATE EXTENSION IF NOT EXISTS pgrowlocks;
CREATE TABLE chaos_write_audit (
  seq bigint NOT NULL, at timestamptz NOT NULL, key text NOT NULL, fence bigint NOT NULL,
  old_fence bigint NOT NULL, writer text, held boolean NOT NULL);
-- `held`: the writing transaction holds the key's lease row, as a successful check_fence
-- leaves it (FOR SHARE until the transaction ends); read from the row's lockers (pgrowlocks),
-- not from anything a worker says.
CREATE FUNCTION chaos_write_audit() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO chaos_write_audit
    VALUES (nextval('chaos_audit_seq'), clock_timestamp(), NEW.key, NEW.fence, OLD.fence,
            NEW.writer,
            EXISTS (SELECT 1 FROM accord.leases l, pgrowlocks('accord.leases') r
                     WHERE l.namespace = '{NAMESPACE}' AND l.key = NEW.key
                       AND r.locked_row = l.ctid AND pg_current_xact_id()::xid = ANY (r.xids)));
  RETURN NULL;
END $f$;
CREATE TRIGGER chaos_write_audit AFTER UPDATE ON chaos_resource FOR EACH ROW
  EXECUTE FUNCTION chaos_write_audit();
"""


def setup(pair: Pair) -> None:
    url = pair.url(list(pair.ports.values()))
    # The client migrates the schema (before the trigger goes on its table), then offers the
    # work pool. Objects of an earlier run on the same server are dropped first.
    import accord

    with accord.Client.connect(url, namespace=NAMESPACE) as client:
        with pair.connect() as db:
            db.execute(SETUP)
            for key in KEYS + [f"accord.fleet/{FLEET}/s/{i}" for i in range(SHARDS)]:
                db.execute("INSERT INTO chaos_resource VALUES (%s, 0, NULL)", (key,))
        client.offer(POOL, [f"{POOL}{i:04}" for i in range(POOL_SIZE)])


# --------------------------------------------------------------------------------------------
# The nemesis


class Nemesis:
    def __init__(
        self, pair: Pair, proxy: Proxy, workers: list[Worker], run: Run, logs: Path, args: Any
    ) -> None:
        self.pair, self.proxy, self.workers, self.run, self.logs = pair, proxy, workers, run, logs
        self.rng = random.Random(args.seed)
        self.ttl = args.ttl_ms / 1000
        self.args = args
        #: The fault kinds, each a method of this name (a run on another store has its own).
        self.kinds = KINDS

    def record(self, kind: str, **detail: Any) -> None:
        detail |= {"kind": kind, "t": time.time()}
        self.run.faults.append(detail)
        log(f"{kind} {json.dumps({k: v for k, v in detail.items() if k not in ('kind', 't')})}")

    def pick_holder(self) -> Worker | None:
        """A worker that was granted a lease and has not written with it yet (waiting up to
        1 s for one), else one that holds a lease, else any (by their own reports): seeded
        choice among them."""
        end = time.monotonic() + 1
        while True:
            with self.run.lock:
                fresh = [w for w in self.workers if w.before_write and w.slot != "proxied"]
                holding = [w for w in self.workers if w.holding and w.slot != "proxied"]
            if fresh or time.monotonic() > end:
                break
            time.sleep(0.005)
        others = [w for w in self.workers if w.slot != "proxied" and w.role == "lease"]
        candidates = fresh or holding or others
        ordered = sorted(candidates, key=lambda w: w.slot)
        return self.rng.choice(ordered) if ordered else None

    def inject(self, kind: str) -> None:
        began = time.time()
        getattr(self, kind)()
        if self.run.faults and self.run.faults[-1]["kind"] == kind:
            self.run.faults[-1]["began"] = began
        # A worker that exited by itself (not one of our kills) is counted and restarted.
        for worker in self.workers:
            if worker.process and worker.process.poll() is not None:
                self.run.faults.append(
                    {"kind": "worker_exit", "worker": worker.name, "t": time.time()}
                )
                log(f"{worker.name} exited with {worker.process.returncode}; restarted")
                start(worker, self.run, self.logs)

    def kill9(self) -> None:
        for _ in range(20):
            worker = self.pick_holder()
            if worker is None:
                return
            pid = target_pid(worker)
            if pid is not None:
                break
            time.sleep(0.05)
        else:
            return
        with self.run.lock:
            held = worker.holding
            name = worker.name
        os.kill(pid, signal.SIGKILL)
        self.record("kill9", worker=name, held=held)
        if worker.lang != "run":  # the run worker's loop starts the next `accord run` itself
            assert worker.process is not None
            worker.process.wait()
            time.sleep(0.3)
            start(worker, self.run, self.logs)

    def kill9_member(self) -> None:
        """SIGKILL of a fleet member (seeded choice), restarted under a new owner: the fault
        records the shards it held, by its own reports, to time their retaking."""
        self._kill_role("kill9_member", "member")

    def kill9_reader(self) -> None:
        """SIGKILL of a subscriber (seeded choice; it reads the stream as a named consumer),
        restarted: it resumes after its last ack, so what it got and had not acked comes again."""
        self._kill_role("kill9_reader", "subscriber")

    def _kill_role(self, kind: str, role: str) -> None:
        choices = sorted((w for w in self.workers if w.role == role), key=lambda w: w.slot)
        if not choices:
            return
        worker = self.rng.choice(choices)
        assert worker.process is not None
        with self.run.lock:
            shards = dict(worker.shards)
            name = worker.name
        worker.process.kill()
        self.record(kind, worker=name, shards=shards)
        worker.process.wait()
        time.sleep(0.3)
        start(worker, self.run, self.logs)

    def sigstop(self) -> None:
        for _ in range(20):
            worker = self.pick_holder()
            if worker is None:
                return
            pid = target_pid(worker)
            if pid is not None:
                break
            time.sleep(0.05)
        else:
            return
        with self.run.lock:
            held = worker.holding
            name = worker.name
        os.kill(pid, signal.SIGSTOP)
        worker.stopped = True
        stopped = time.time()
        time.sleep(self.ttl * 1.5 + self.rng.uniform(0.2, 1.0))
        resumed = time.time()
        os.kill(pid, signal.SIGCONT)
        worker.stopped = False
        self.record("sigstop", worker=name, held=held, stopped=stopped, resumed=resumed)

    def terminate(self) -> None:
        with self.pair.wait_primary() as db:
            row = db.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'accord' AND pid <> pg_backend_pid()"
            ).fetchone()
        self.record("terminate", backends=row[0] if row else 0)

    def _restart(self, kind: str, mode: str) -> None:
        node = self.pair.primary()
        began = time.time()
        self.pair.ctl_run("stop", node, mode)
        time.sleep(self.rng.uniform(0.2, 1.0))
        self.pair.ctl_run("start", node)
        self.record(kind, node=node, down=round(time.time() - began, 2))

    def restart_fast(self) -> None:
        self._restart("restart_fast", "fast")

    def restart_immediate(self) -> None:
        self._restart("restart_immediate", "immediate")

    def failover(self) -> None:
        old = self.pair.primary()
        new = "b" if old == "a" else "a"
        began = time.time()
        self.pair.ctl_run("stop", old, self.rng.choice(["fast", "immediate"]))
        self.pair.ctl_run("promote", new)
        promoted = time.time() - began
        # The old primary comes back as a synchronous standby of the new one (pg_basebackup).
        self.pair.ctl_run("standby", old)
        self.record(
            "failover",
            old=old,
            new=new,
            promoted_in=round(promoted, 2),
            rebuilt_in=round(time.time() - began, 2),
        )

    def proxy_freeze(self) -> None:
        self.proxy.freeze(True)
        hold = self.ttl * 1.5 + self.rng.uniform(0.2, 1.0)
        time.sleep(hold)
        self.proxy.freeze(False)
        self.record("proxy_freeze", seconds=round(hold, 2))

    def proxy_cut(self) -> None:
        self.record("proxy_cut", connections=self.proxy.cut())

    def loop(self, until: float) -> None:
        """Every kind once in a seeded order (the first round always whole), then again in
        another order, until the time is up."""
        self.rounds(until)
        # An injection that failed in its round (say, a standby rebuild on a very loaded
        # machine) is tried once more, so that every kind is injected whenever it can be.
        for kind in self.kinds:
            if not any(f["kind"] == kind for f in self.run.faults):
                time.sleep(self.rng.uniform(*self.args.gap))
                try:
                    self.inject(kind)
                except Exception as e:  # noqa: BLE001
                    log(f"{kind} failed again: {e}")
                    self.run.faults.append({"kind": f"{kind}_failed", "error": str(e)})

    def rounds(self, until: float) -> None:
        first = True
        while first or time.time() < until:
            kinds = list(self.kinds)
            self.rng.shuffle(kinds)
            for kind in kinds:
                time.sleep(self.rng.uniform(*self.args.gap))
                if time.time() >= until and not first:
                    return
                try:
                    self.inject(kind)
                except Exception as e:  # noqa: BLE001 (a failed injection is reported, not fatal)
                    log(f"{kind} failed: {e}")
                    self.run.faults.append({"kind": f"{kind}_failed", "error": str(e)})
            first = False


# --------------------------------------------------------------------------------------------
# The checker


def summary(values: list[float], unit: str = "ms") -> str:
    if not values:
        return "n/a (none measured)"
    if unit == "s":
        return f"p50 {statistics.median(values):.1f} s, max {max(values):.1f} s (n={len(values)})"
    return (
        f"p50 {statistics.median(values) * 1000:.0f} ms, max {max(values) * 1000:.0f} ms "
        f"(n={len(values)})"
    )


def check(db: psycopg.Connection[Any], run: Run, evidence: Path) -> dict[str, Any]:
    """Reads both audits and judges them (with the workers' reports for what they were told).
    Both audits, the workers' reports and the faults are kept in `evidence` (JSON), so that a
    violation can be traced after the servers are gone."""
    leases = db.execute(
        "SELECT seq, extract(epoch FROM at)::float8, op, key, owner, fence,"
        " extract(epoch FROM expires_at)::float8, done, extract(epoch FROM granted_at)::float8,"
        " attempt FROM chaos_lease_audit ORDER BY key, seq"
    ).fetchall()
    writes = db.execute(
        "SELECT seq, extract(epoch FROM at)::float8, key, fence, old_fence, writer, held"
        " FROM chaos_write_audit ORDER BY key, seq"
    ).fetchall()
    with run.lock:
        events = list(run.events)
        faults = list(run.faults)
    record = {
        "lease_audit": [list(row) for row in leases],
        "write_audit": [list(row) for row in writes],
        "events": events,
        "faults": faults,
    }
    evidence.write_text(json.dumps(record, default=str))
    return judge(leases, writes, events)


def judge(
    leases: list[tuple[Any, ...]], writes: list[tuple[Any, ...]], events: list[dict[str, Any]]
) -> dict[str, Any]:
    """`leases`: the lease audit's rows (seq, at, op, key, owner, fence, expires_at, done,
    granted_at, attempt; times as epoch seconds) ordered by key then seq; `writes`: the write
    audit's (seq, at, key, fence, old_fence, writer, held) in the same order.

    A write is late when its grant had ended on the server (released, done, superseded, or past
    its expiry) when the write was made, unless its transaction held the key's row from a
    successful check_fence: that check found the grant live and keeps it the key's grant until
    the commit (no later grant, release or renewal of the key before it), so such a write made
    after the expiry's time is counted apart (`held_after_expiry`), as allowed.

    A grant while the previous one was live is a double grant, unless both are grants of one
    acquire call (the same `attempt`): a client retries a grant whose answer it lost (a cut
    connection) with the same attempt, and the server grants it again under a new fence, so the
    first fence was never delivered. Those are counted as superseded, and a superseded fence
    that a worker reported or wrote with is a violation."""
    violations: list[str] = []
    grants: list[dict[str, Any]] = []  # in row-lock order per key
    prev: dict[str, tuple[Any, ...]] = {}
    top: dict[str, int] = {}
    double = backwards = regranted_done = 0
    double_keys: list[str] = []
    superseded: set[tuple[str, int]] = set()
    for row in leases:
        seq, at, _op, key, owner, fence, expires, _done, granted_at, attempt = row
        before = prev.get(key)
        is_grant = expires is not None and (before is None or before[5] != fence)
        if is_grant:
            when = granted_at if granted_at is not None else at
            grants.append({"key": key, "owner": owner, "fence": fence, "at": when, "seq": seq})
            if before is not None:
                if before[7]:
                    regranted_done += 1
                    violations.append(f"done key {key} granted again (fence {fence})")
                elif (
                    before[6] is not None
                    and before[6] > when
                    and attempt is not None
                    and (before[9] == attempt and before[4] == owner)
                ):
                    superseded.add((key, before[5]))
                elif before[6] is not None and before[6] > when:
                    double += 1
                    double_keys.append(key)
                    violations.append(
                        f"double grant of {key}: fence {fence} to {owner} at {when:.3f} while "
                        f"fence {before[5]} of {before[4]} was live until {before[6]:.3f}"
                    )
            if fence <= top.get(key, 0):
                backwards += 1
                violations.append(f"fence of {key} did not increase: {fence} after {top[key]}")
            top[key] = max(top.get(key, 0), fence)
        prev[key] = row
    granted = {(g["key"], g["fence"]): g for g in grants}
    # Both audits take their seq from one sequence: the grant's record as of each write.
    history: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
    for row in leases:
        history.setdefault((row[3], row[5]), []).append(row)
    late = held = held_after_expiry = 0
    for seq, at, key, fence, _old, _writer, checked in writes:
        held += bool(checked)
        record = [row for row in history.get((key, fence), []) if row[0] < seq]
        if record and (record[-1][6] is None or record[-1][6] < at):
            if checked and record[-1][6] is not None:
                held_after_expiry += 1
            else:  # not held (a held grant is not released before the write's commit)
                late += 1
                violations.append(f"write on {key} with fence {fence} after its lease ended")
    stale = unknown = 0
    accepted_top: dict[str, int] = {}
    for _seq, _at, key, fence, _old, writer, _checked in writes:
        if fence <= accepted_top.get(key, 0):
            stale += 1
            violations.append(f"stale write accepted on {key}: fence {fence}")
        accepted_top[key] = max(accepted_top.get(key, 0), fence)
        grant = granted.get((key, fence))
        if grant is None or grant["owner"] != writer:
            unknown += 1
            violations.append(f"write on {key} with fence {fence} by {writer}: no such grant")
    # What workers were told must be in the server's record (synchronous standby, fsync on).
    told = ("granted", "claimed", "assigned")
    told_grants = {(e["key"], e["fence"]) for e in events if e["ev"] in told}
    told_writes = {(e["key"], e["fence"]) for e in events if e["ev"] == "write" and e["accepted"]}
    audited_writes = {(w[2], w[3]) for w in writes}
    lost_grants = told_grants - granted.keys()
    used_superseded = (told_grants | {(w[2], w[3]) for w in writes}) & superseded
    for key, fence in sorted(used_superseded):
        violations.append(f"superseded grant of {key} fence {fence} was delivered or written with")
    lost_writes = told_writes - audited_writes
    for key, fence in sorted(lost_grants):
        violations.append(f"grant of {key} fence {fence} reported to a worker, not on record")
    for key, fence in sorted(lost_writes):
        violations.append(f"write to {key} fence {fence} acknowledged, not on record")
    refused = [e for e in events if e["ev"] == "write" and not e["accepted"]]
    by_lang: dict[str, dict[str, int]] = {}
    for e in events:
        if e.get("role", "lease") != "lease":
            continue
        counts = by_lang.setdefault(e["lang"], {"granted": 0, "accepted": 0, "refused": 0})
        if e["ev"] == "granted":
            counts["granted"] += 1
        elif e["ev"] == "write":
            counts["accepted" if e["accepted"] else "refused"] += 1
    return {
        "violations": violations,
        "grants": len(grants),
        "keys": sorted(top),
        "double": double,
        "double_keys": double_keys,
        "backwards": backwards,
        "regranted_done": regranted_done,
        "superseded": len(superseded),
        "used_superseded": len(used_superseded),
        "accepted": len(writes),
        "refused": len(refused),
        "stale": stale,
        "late": late,
        "held": held,
        "held_after_expiry": held_after_expiry,
        "unknown_writer": unknown,
        "lost_grants": len(lost_grants),
        "lost_writes": len(lost_writes),
        "pool_done": sum(1 for e in events if e["ev"] == "done"),
        "by_lang": by_lang,
        "grant_rows": grants,
        "lease_rows": leases,
        "events": events,
    }


def fault_at(faults: list[dict[str, Any]], at: float) -> str:
    """The kind of the last fault that began at or before `at` (none before the first)."""
    kind = "none"
    for fault in faults:
        if fault.get("began", fault["t"]) <= at:
            kind = fault["kind"]
    return kind


def judge_listeners(
    sent: dict[int, float], events: list[dict[str, Any]], faults: list[dict[str, Any]]
) -> dict[str, Any]:
    """`sent`: the notify audit (n → the server's clock at its commit). Each listener (one
    process incarnation) gets messages in commit order, so what it missed between two messages
    it got is known exactly: such a gap must be announced by a `reconnected` between the two
    (G8: the listening side never fails silently), else it is a violation; a message twice or
    going back is one too. A gap is laid to the last fault begun before its first missed message
    was sent."""
    violations: list[str] = []
    gaps: list[dict[str, Any]] = []
    per: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        if e.get("role") == "subscriber" and e["ev"] in ("msg", "reconnected"):
            per.setdefault(e["w"], []).append(e)
    by_listener: dict[str, dict[str, Any]] = {}
    phantom = 0
    for name, evs in per.items():
        stats = by_listener.setdefault(
            name, {"lang": evs[0]["lang"], "received": 0, "reconnected": 0, "gaps": 0}
        )
        last: int | None = None
        reconnected = False
        for e in evs:
            if e["ev"] == "reconnected":
                reconnected = True
                stats["reconnected"] += 1
                continue
            n = e["n"]
            stats["received"] += 1
            if n not in sent:
                phantom += 1
            if last is not None:
                if n <= last:
                    violations.append(f"listener {name} got message {n} after {last}")
                    continue
                missed = [m for m in range(last + 1, n) if m in sent]
                if missed:
                    stats["gaps"] += 1
                    gaps.append(
                        {
                            "w": name,
                            "len": len(missed),
                            "kind": fault_at(faults, sent[missed[0]]),
                            "covered": reconnected,
                        }
                    )
                    if not reconnected:
                        violations.append(
                            f"listener {name} missed {len(missed)} messages ({missed[0]}.."
                            f"{missed[-1]}) with no Reconnected before message {n}"
                        )
            last = n
            reconnected = False
    return {
        "violations": violations,
        "gaps": gaps,
        "silent": sum(1 for g in gaps if not g["covered"]),
        "by_listener": by_listener,
        "phantom": phantom,
        "sent": len(sent),
    }


def judge_stream(table: list[tuple[int, str]], events: list[dict[str, Any]]) -> dict[str, Any]:
    """`table`: the stream's stored events (seq, payload) in seq order. The contract
    (docs/semantics.md, Durable streams): seqs without holes, every acknowledged publish stored
    once with its payload; a subscription delivers every event once, in seq order, across
    reconnects; a named consumer restarted resumes after its last ack, so it may get again what
    it had not acked (at least once), never skip one."""
    violations: list[str] = []
    payload_of = dict(table)
    top = table[-1][0] if table else 0
    holes = top - len(payload_of)
    if holes:
        violations.append(f"the stream has {holes} holes in seqs 1..{top}")
    acked = [(e["i"], e["seq"], e["w"]) for e in events if e["ev"] == "published"]
    for i, seq, w in acked:
        if payload_of.get(seq) != f"{w}:{i}":
            violations.append(f"publish {w}:{i} acknowledged with seq {seq}, not on record")
    counts: dict[str, int] = {}
    for payload in payload_of.values():
        counts[payload] = counts.get(payload, 0) + 1
    twice = sum(1 for c in counts.values() if c > 1)
    if twice:
        violations.append(f"{twice} payloads stored more than once")
    failed = {
        f"{e['w']}:{e['i']}" for e in events if e["ev"] == "error" and e.get("op") == "publish"
    }
    stored_anyway = sum(1 for p in failed if p in counts)
    # Each reader's entries by incarnation (slot.N, N increasing), each in delivery order.
    incarnations: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for e in events:
        if e["ev"] == "entry":
            slot, _, inc = e["w"].rpartition(".")
            incarnations.setdefault(slot, {}).setdefault(int(inc), []).append(e)
    readers: dict[str, dict[str, Any]] = {}
    for slot, by_inc in sorted(incarnations.items()):
        got = 0  # the highest seq the consumer was delivered, any incarnation
        r = readers.setdefault(
            slot, {"lang": "", "delivered": 0, "duplicates": 0, "gaps": 0, "restarts": 0}
        )
        for inc in sorted(by_inc):
            prev: int | None = None
            for e in by_inc[inc]:
                r["lang"] = e["lang"]
                seq = e["seq"]
                r["delivered"] += 1
                if seq in payload_of and payload_of[seq] != e["p"]:
                    violations.append(f"reader {e['w']} got seq {seq} with another payload")
                if prev is None:
                    if seq > got + 1:
                        r["gaps"] += 1
                        violations.append(
                            f"reader {e['w']} started at seq {seq}; the consumer had got {got}"
                        )
                elif seq != prev + 1:
                    r["gaps"] += 1
                    violations.append(f"reader {e['w']} got seq {seq} after {prev}")
                if seq <= got:
                    r["duplicates"] += 1
                got = max(got, seq)
                prev = seq
            r["restarts"] = len(by_inc) - 1
        r["got"] = got
    return {
        "violations": violations,
        "stored": len(table),
        "last": top,
        "acked": len(acked),
        "failed": len(failed),
        "stored_anyway": stored_anyway,
        "readers": readers,
    }


def check_recipes(db: psycopg.Connection[Any], run: Run) -> dict[str, Any]:
    """Reads the notify audit and the stream's table and judges listeners and readers."""
    sent = {
        n: at
        for n, at in db.execute(
            "SELECT n, extract(epoch FROM at)::float8 FROM chaos_notify_audit"
        ).fetchall()
    }
    table = [
        (seq, bytes(payload).decode())
        for seq, payload in db.execute(
            "SELECT seq, payload FROM accord.stream_events WHERE namespace = %s AND stream = %s"
            " ORDER BY seq",
            (NAMESPACE, STREAM),
        ).fetchall()
    ]
    with run.lock:
        events = list(run.events)
        faults = list(run.faults)
    return {"listen": judge_listeners(sent, events, faults), "stream": judge_stream(table, events)}


def measure_fleet(result: dict[str, Any], run: Run) -> dict[str, Any]:
    """Rebalancing after the kill -9 of a member: from the kill to the last of the shards it
    held (by its reports) granted again to anyone, from the audit; and the fleet's figures."""
    prefix = f"accord.fleet/{FLEET}/"
    by_key: dict[str, list[dict[str, Any]]] = {}
    for g in result["grant_rows"]:
        by_key.setdefault(g["key"], []).append(g)
    rebalance: list[float] = []
    unretaken = 0
    for fault in run.faults:
        if fault["kind"] != "kill9_member" or not fault.get("shards"):
            continue
        times = []
        for shard, fence in fault["shards"].items():
            later = [g for g in by_key.get(f"{prefix}s/{shard}", []) if g["fence"] > fence]
            if not later:
                unretaken += 1
            elif later[0]["at"] >= fault.get("began", fault["t"]):
                times.append(later[0]["at"] - fault["t"])
        if times:
            rebalance.append(max(times))
    with run.lock:
        events = list(run.events)
    reasons: dict[str, int] = {}
    for e in events:
        if e["ev"] == "revoked":
            reasons[e["reason"]] = reasons.get(e["reason"], 0) + 1
    return {
        "shard_grants": sum(1 for g in result["grant_rows"] if g["key"].startswith(prefix + "s/")),
        "member_grants": sum(1 for g in result["grant_rows"] if g["key"].startswith(prefix + "m/")),
        "double": sum(1 for k in result["double_keys"] if k.startswith(prefix)),
        "rebalance": rebalance,
        "unretaken": unretaken,
        "reasons": reasons,
        "assigned": sum(1 for e in events if e["ev"] == "assigned"),
    }


def catch_up(pair: Pair, run: Run, workers: list[Worker]) -> dict[str, Any]:
    """After the nemesis, waits (up to CATCH_UP s) until every subscriber has got a message
    and a stream event sent after the last fault: one that does not failed silently."""
    with pair.wait_primary() as db:
        row = db.execute("SELECT coalesce(max(n), 0) FROM chaos_notify_audit").fetchone()
        last_n = row[0] if row else 0
        row = db.execute(
            "SELECT coalesce(max(seq), 0) FROM accord.stream_events"
            " WHERE namespace = %s AND stream = %s",
            (NAMESPACE, STREAM),
        ).fetchone()
        last_seq = row[0] if row else 0
    began = time.time()
    end = time.monotonic() + CATCH_UP
    while True:
        behind = []
        with run.lock:
            for w in workers:
                if w.role != "subscriber":
                    continue
                n, seq = run.top.get((w.name, "msg"), 0), run.top.get((w.name, "entry"), 0)
                if n < last_n:
                    behind.append(
                        f"listener {w.name} got message {n}, the source had sent {last_n}"
                    )
                if seq < last_seq:
                    behind.append(f"reader {w.name} got seq {seq}, the stream had {last_seq}")
        if not behind or time.monotonic() > end:
            break
        time.sleep(0.05)
    took = time.time() - began
    log(f"catch-up after the nemesis: {took:.1f} s, behind: {behind or 'none'}")
    return {"took": took, "behind": behind}


def selftest() -> None:
    """The checker must see what it is meant to catch: a made-up history with one double
    grant, one fence going backwards, one regrant of a done key and one stale write."""
    leases = [
        # k: granted to a until 10.0, released, granted to b (fine)
        (1, 1.0, "INSERT", "k", "a", 5, 10.0, False, 1.0, 100),
        (2, 2.0, "UPDATE", "k", None, 5, None, False, 1.0, None),
        (3, 3.0, "UPDATE", "k", "b", 7, 13.0, False, 3.0, 101),
        # ... then granted to c at 4.0 while b's grant runs until 13.0: a double grant
        (4, 4.0, "UPDATE", "k", "c", 9, 14.0, False, 4.0, 102),
        # ... expired, granted to d with a smaller fence: backwards
        (5, 20.0, "UPDATE", "k", "d", 8, 30.0, False, 20.0, 103),
        # j: done, then granted again
        (6, 1.0, "INSERT", "j", "a", 11, 10.0, False, 1.0, 104),
        (7, 2.0, "UPDATE", "j", "a", 11, None, True, 1.0, None),
        (8, 3.0, "UPDATE", "j", "b", 12, 13.0, False, 3.0, 105),
        # i: one acquire's retry granted again under a new fence (not a double grant)
        (12, 1.0, "INSERT", "i", "a", 13, 10.0, False, 1.0, 106),
        (13, 2.0, "UPDATE", "i", "a", 14, 11.0, False, 2.0, 106),
        (15, 12.1, "UPDATE", "i", "a", 15, 12.4, False, 12.1, 107),
    ]
    writes = [
        (9, 3.5, "k", 7, 0, "b", True),
        (10, 4.5, "k", 9, 7, "c", True),
        (11, 21.0, "k", 8, 9, "d", True),  # stale: 8 after 9
        # i: a's grant expired at 11.0; a write at 12.0 without the check is late, one whose
        # transaction held the row from its check is not
        (14, 12.0, "i", 14, 0, "a", False),
        (16, 12.5, "i", 15, 14, "a", True),
    ]
    events = [{"ev": "granted", "key": "k", "fence": 7, "lang": "x", "w": "b"}]
    r = judge(leases, writes, events)
    got = tuple(r[k] for k in ("double", "backwards", "regranted_done", "stale", "grants"))
    got += (r["superseded"], r["late"], r["held_after_expiry"])
    clean = judge(leases[:3] + leases[-3:-1], writes[:1], events)["violations"]
    if got != (1, 1, 1, 1, 9, 1, 1, 1) or clean:
        raise SystemExit(f"the checker's self-test failed: {got}, {r['violations']}, {clean}")
    selftest_recipes()


def selftest_recipes() -> None:
    """The listener and stream checkers on made-up histories: a silent gap, a covered one, a
    message going back; a hole in the stream, an acknowledged publish not stored, a reader
    skipping an event, and a restarted reader's duplicates (allowed)."""
    sent = {n: float(n) for n in range(1, 11)}
    faults = [{"kind": "terminate", "t": 5.5, "began": 5.5}]

    def msg(n: int | None) -> dict[str, Any]:
        ev = {"ev": "msg", "n": n} if n is not None else {"ev": "reconnected"}
        return ev | {"w": "l.1", "lang": "x", "role": "subscriber"}

    history = [msg(1), msg(2), msg(5), msg(None), msg(8), msg(7), msg(9)]
    r = judge_listeners(sent, history, faults)
    got = (len(r["gaps"]), r["silent"], len(r["violations"]), r["gaps"][1]["kind"])
    clean = judge_listeners(sent, [msg(1), msg(None), msg(4), msg(5)], faults)["violations"]
    if got != (2, 1, 2, "terminate") or clean:
        raise SystemExit(f"the listener checker's self-test failed: {got}, {clean}")
    table = [(1, "s.1:1"), (2, "s.1:2"), (3, "s.1:3"), (5, "s.1:5")]
    published = [{"ev": "published", "i": i, "seq": i, "w": "s.1"} for i in (1, 2, 4)]

    def entry(w: str, seq: int) -> dict[str, Any]:
        return {"ev": "entry", "seq": seq, "p": f"s.1:{seq}", "w": w, "lang": "x"}

    reads = [entry("r.1", 1), entry("r.1", 2), entry("r.1", 3)]
    reads += [entry("r.2", 2), entry("r.2", 3), entry("r.2", 5)]
    s = judge_stream(table, published + reads)
    seen = (len(s["violations"]), s["readers"]["r"]["duplicates"], s["readers"]["r"]["gaps"])
    clean = judge_stream(table[:3], published[:2] + reads[:5])["violations"]
    if seen != (3, 2, 1) or clean:
        raise SystemExit(
            f"the stream checker's self-test failed: {seen}, {s['violations']}, {clean}"
        )


def measure(result: dict[str, Any], run: Run) -> dict[str, list[Any]]:
    """Takeover after kill -9 and the lost signal of SIGSTOPped workers, from the audit."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for g in result["grant_rows"]:
        by_key.setdefault(g["key"], []).append(g)
    # The server's last record of each grant (its expiry, or its release: expires_at NULL).
    last: dict[tuple[str, int], tuple[Any, ...]] = {}
    for row in result["lease_rows"]:
        last[(row[3], row[5])] = row
    takeover: list[float] = []
    after_expiry: list[float] = []
    lost_after_resume: list[float] = []
    lost_langs: list[str] = []
    lost_after_expiry: list[float] = []
    events = result["events"]
    for fault in run.faults:
        held = fault.get("held")
        if fault["kind"] not in ("kill9", "sigstop") or not held:
            continue
        key, fence = held
        record = last.get((key, fence))
        if record is None or record[6] is None:
            continue  # released (or never recorded) before the fault: nothing was left held
        expiry = record[6]
        if fault["kind"] == "kill9":
            later = [g for g in by_key.get(key, []) if g["fence"] > fence]
            if later:
                takeover.append(later[0]["at"] - fault["t"])
                after_expiry.append(later[0]["at"] - expiry)
        else:
            lost = [
                e
                for e in events
                if e["w"] == fault["worker"] and e["ev"] == "lost" and e.get("fence") == fence
            ]
            if lost and expiry < fault["resumed"]:
                lost_after_resume.append(lost[0]["t"] - fault["resumed"])
                lost_langs.append(
                    f"{lost[0]['lang']} {(lost[0]['t'] - fault['resumed']) * 1000:.0f}"
                )
                lost_after_expiry.append(lost[0]["t"] - expiry)
    return {
        "takeover": takeover,
        "after_expiry": after_expiry,
        "lost_after_resume": lost_after_resume,
        "lost_after_expiry": lost_after_expiry,
        "lost_langs": lost_langs,
    }


# --------------------------------------------------------------------------------------------
# The report


def recipe_lines(recipes: dict[str, Any]) -> list[str]:
    """The report's sections on listeners, the stream and the fleet."""
    listen, stream, fleet = recipes["listen"], recipes["stream"], recipes["fleet"]
    caught = recipes["catch_up"]
    per_kind: dict[str, list[int]] = {}
    for gap in listen["gaps"]:
        per_kind.setdefault(gap["kind"], []).append(gap["len"])
    lines = [
        "",
        "## Listeners",
        "",
        (
            f"The source's notifications on record: {listen['sent']}. A listener's gap is a run "
            "of messages on record it did not get between two it got (a listener gets them in "
            "commit order, so the run is exact); G8 allows one only when the listener was told "
            "`Reconnected` between the two. Each gap is laid to the last fault begun before its "
            "first missed message was sent."
        ),
        "",
        "| fault kind | gaps | messages missed | longest gap |",
        "| --- | ---: | ---: | ---: |",
    ]
    for kind, lens in sorted(per_kind.items()):
        lines.append(f"| {kind} | {len(lens)} | {sum(lens)} | {max(lens)} |")
    if not per_kind:
        lines.append("| (none) | 0 | 0 | 0 |")
    lines += [
        "",
        "| listener (incarnation) | language | messages | `Reconnected` | gaps |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for name, st in sorted(listen["by_listener"].items()):
        lines.append(
            f"| {name} | {st['lang']} | {st['received']} | {st['reconnected']} | {st['gaps']} |"
        )
    lines += [
        "",
        (
            f"**Gaps without a `Reconnected` (silent): {listen['silent']}.** Messages got that "
            f"are not on the server's record: {listen['phantom']} (a commit PostgreSQL made "
            "visible on a primary that was then lost; a notification is sent at commit). After "
            f"the nemesis, every subscriber had got a message and a stream event sent after the "
            f"last fault within {caught['took']:.1f} s (a listener or reader still behind after "
            f"{CATCH_UP} s would have failed silently: "
            f"{len(caught['behind'])})."
        ),
        "",
        "## Stream",
        "",
        (
            f"The stream `{STREAM}` on record: {stream['stored']} events, seqs 1..{stream['last']}; "
            f"publishes acknowledged {stream['acked']}, failed on the connection "
            f"{stream['failed']} (of which stored anyway {stream['stored_anyway']}: a publish "
            "whose answer was lost is not repeated, so it is stored once or not at all). The "
            "contract (docs/semantics.md, Durable streams): seqs without holes, every "
            "acknowledged publish stored once; a subscription delivers every event once, in seq "
            "order, across reconnects; a consumer restarted resumes after its last ack, so it "
            "gets again what it had not acked (at least once) and never skips one."
        ),
        "",
        (
            "| reader (consumer) | language | delivered | duplicates (after a restart) "
            "| restarts | gaps or reorders |"
        ),
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for slot, r in sorted(stream["readers"].items()):
        lines.append(
            f"| {slot} | {r['lang']} | {r['delivered']} | {r['duplicates']} | {r['restarts']} "
            f"| {r['gaps']} |"
        )
    gaps = sum(r["gaps"] for r in stream["readers"].values())
    lines += [
        "",
        (
            f"**Gaps or reorders in a subscription, or skips by a restarted consumer: {gaps}; "
            f"stream violations in all (holes, acknowledged publishes not stored or stored "
            f"twice, wrong payloads, gaps): {len(stream['violations'])}.**"
        ),
        "",
        "## Fleet",
        "",
        (
            f"Shard grants on record {fleet['shard_grants']}, member grants "
            f"{fleet['member_grants']}, assignments reported {fleet['assigned']}; revocations "
            "reported by reason: "
            + (", ".join(f"{k} {v}" for k, v in sorted(fleet["reasons"].items())) or "none")
            + f". **Shards granted while another member's grant was live: {fleet['double']}** "
            "(the lease audit, on the server's clock, as for every key). Rebalancing after the "
            "kill -9 of a member (from the kill to the last of the shards it held granted again, "
            f"from the audit): {summary(fleet['rebalance'])}; shards never retaken: "
            f"{fleet['unretaken']}. A killed member renews nothing: its shards expire a ttl after "
            "its last renewal and the survivors take them at their next period."
        ),
    ]
    return lines


def report(
    args: Any,
    result: dict[str, Any],
    recipes: dict[str, Any],
    latencies: dict[str, list[Any]],
    run: Run,
    workers: list[Worker],
    missing: list[str],
    wall: float,
) -> str:
    counts = {kind: 0 for kind in KINDS}
    failed: dict[str, int] = {}
    for fault in run.faults:
        if fault["kind"] in counts:
            counts[fault["kind"]] += 1
        elif fault["kind"] != "worker_exit":
            failed[fault["kind"]] = failed.get(fault["kind"], 0) + 1
    langs = sorted({w.lang for w in workers})
    verdict = "PASS" if not result["violations"] else "FAIL"
    lines = [
        "# Reliability: the chaos run",
        "",
        (
            "Generated by `make chaos` (chaos/run.py); do not edit by hand. "
            f"Verdict: **{verdict}** ({len(result['violations'])} violations)."
        ),
        "",
        "## Setup",
        "",
        (
            "- PostgreSQL: a primary with a synchronous streaming standby "
            "(`scripts/failover-pair.sh`, `ACCORD_PAIR_FSYNC=on`: fsync, full_page_writes and "
            "synchronous_commit on). Clients get both nodes in one URL with "
            "`target_session_attrs=read-write`."
        ),
        (
            f"- Workers: {len(workers)} ({', '.join(f'`{w.slot}`' for w in workers)}) in "
            f"{', '.join(langs)}"
            + (f"; left out (not built): {', '.join(missing)}" if missing else "")
            + f". Each loops over {len(KEYS)} keys with a ttl of {args.ttl_ms} ms: acquire "
            "(waiting up to 3 s), 20-150 ms of work, a fenced write through a plain SQL "
            "connection of its own, one transaction: accord's `check_fence` through the "
            "language's helper (`lease.fenced(conn)` in Python and Node, `Lease::fenced` in "
            "Rust, `accord_lease_fence_check_sql` in C, `Lease.FenceCheckSQL` in Go, both run "
            "through libpq), then `UPDATE chaos_resource SET fence = $f, writer = $w WHERE key "
            "= $k AND fence < $f` (accepted iff the check passed and a row changed), 10-50 ms "
            "more, release. The workers write without consulting the lost signal first, on "
            "purpose: the server's check stands between a stale holder and the resource. "
            f"`python1` also claims from a work pool of {POOL_SIZE} keys and marks each done; "
            "`run0` is `accord run KEY -- bash -c '… psql -1 … $ACCORD_FENCE'` (`SELECT "
            "accord.check_fence(…)` and the UPDATE in psql's one transaction); `proxied` "
            "(Python) reaches the server through the run's TCP proxy."
        ),
        (
            "- Recipes: `source` (Python) sends a numbered notification on the channel "
            f"`{CHANNEL}` about every 50 ms, each in a transaction that also inserts its number "
            "into an audit table (so the server's record of what was sent is exactly what "
            f"committed), and publishes `source.N:i` to the durable stream `{STREAM}` as often. "
            "Subscribers `sub_py` (Python), `sub_node` (Node) and `sub_proxied` (Node, through "
            "the proxy) each listen on the channel and read the stream as a named consumer (their "
            "slot's name), acking every event after reporting it. Fleet members `fleet_py0`, "
            f"`fleet_py1` (Python) and `fleet_node0` (Node) share the fleet `{FLEET}` of "
            f"{SHARDS} shards (ttl {args.ttl_ms} ms) and make a fenced write (`SELECT "
            "accord.check_fence(…)` called directly: a shard's lease has no `fenced` helper) to a "
            "row of the "
            "resource table for every shard assigned (the shard's lease key)."
        ),
        (
            "- The checker trusts no worker: triggers write every INSERT/UPDATE of `accord.leases` "
            "(key, owner, fence, expires_at, done, granted_at, `clock_timestamp()` and a sequence "
            "value taken while the row is locked, so per key in row-lock order) and every accepted "
            "write of the resource into audit tables, in the same transactions."
        ),
        (
            f"- Seed {args.seed}, nemesis for {args.duration} s (a fault every "
            f"{args.gap[0]}-{args.gap[1]} s, each kind once per seeded round); wall time "
            f"{wall:.0f} s including startup."
        ),
        "",
        "## Faults injected",
        "",
        "| kind | what | injected |",
        "| --- | --- | ---: |",
    ]
    what = {
        "kill9": (
            "SIGKILL of a worker, one granted a lease and not yet written with it if any "
            "(restarted under a new owner)"
        ),
        "sigstop": (
            "SIGSTOP of a worker (chosen alike) for 1.5 ttl + 0.2-1 s, then SIGCONT: it wakes "
            "up a stale holder"
        ),
        "terminate": "pg_terminate_backend of every accord connection",
        "restart_fast": "pg_ctl stop -m fast of the primary, start again",
        "restart_immediate": "pg_ctl stop -m immediate (a crash) of the primary, start again",
        "failover": (
            "the primary stopped, the standby promoted, the old primary rebuilt as "
            "its synchronous standby"
        ),
        "proxy_freeze": "the proxy stops moving bytes for 1.5 ttl + 0.2-1 s (connections open)",
        "proxy_cut": "the proxy closes the proxied workers' connections (`proxied`, `sub_proxied`)",
        "kill9_member": "SIGKILL of a fleet member (restarted under a new owner)",
        "kill9_reader": (
            "SIGKILL of a subscriber (restarted; its consumer resumes after its last ack)"
        ),
    }
    for kind in KINDS:
        lines.append(f"| {kind} | {what[kind]} | {counts[kind]} |")
    if failed:
        lines += ["", f"Injections that failed: {failed}."]
    downs = [f["down"] for f in run.faults if f["kind"].startswith("restart_")]
    promotions = [f["promoted_in"] for f in run.faults if f["kind"] == "failover"]
    rebuilds = [f["rebuilt_in"] for f in run.faults if f["kind"] == "failover"]
    exits = sum(1 for f in run.faults if f["kind"] == "worker_exit")
    killed = sum(1 for f in run.faults if f["kind"] == "kill9" and f.get("held"))
    stopped = sum(1 for f in run.faults if f["kind"] == "sigstop" and f.get("held"))
    lines += [
        "",
        (
            f"Of the kills, {killed} hit a worker that had reported a grant and not yet its "
            f"release; of the stops, {stopped}. Restarts kept the primary down "
            f"{summary(downs, 's')}; failovers promoted the standby in {summary(promotions, 's')} "
            f"and had the old primary back as a synchronous standby after "
            f"{summary(rebuilds, 's')}. Workers that exited by themselves (and were "
            f"restarted): {exits}."
        ),
    ]
    r = result
    lines += [
        "",
        "## Results",
        "",
        "| check | value |",
        "| --- | ---: |",
        f"| grants (server record; the fleet's included) | {r['grants']} |",
        (
            f"| fenced writes accepted (server record; the fleet members' included) | "
            f"{r['accepted']} |"
        ),
        f"| fenced writes refused (stale writers caught; workers' reports) | {r['refused']} |",
        f"| work-pool keys done | {r['pool_done']} |",
        (
            f"| **double grants** (a grant while the previous one was live; any key, the fleet's "
            f"shards and memberships included) | **{r['double']}** |"
        ),
        f"| **stale writes accepted** | **{r['stale']}** |",
        f"| fences not increasing per key | {r['backwards']} |",
        f"| done keys granted again | {r['regranted_done']} |",
        (
            f"| grants superseded by a retry of the same acquire (never delivered) | "
            f"{r['superseded']} |"
        ),
        f"| superseded grants delivered or written with | {r['used_superseded']} |",
        f"| accepted writes with no matching grant to the writer | {r['unknown_writer']} |",
        (
            f"| accepted writes whose transaction held the key's grant from its check "
            f"(`check_fence`'s row lock, read from the row's lockers) | {r['held']} |"
        ),
        (
            f"| **accepted writes made after the writer's lease had ended on the server** "
            f"(expired, released or superseded, the write's transaction not holding the grant "
            f"from a check) | **{r['late']}** |"
        ),
        (
            f"| accepted writes made after the expiry time of a grant their transaction held "
            f"from its check (allowed: ordered before the key's next grant) | "
            f"{r['held_after_expiry']} |"
        ),
        f"| grants reported to a worker but not on record | {r['lost_grants']} |",
        f"| writes acknowledged to a worker but not on record | {r['lost_writes']} |",
        "",
        (
            "Per language (workers' own reports): "
            + "; ".join(
                f"{lang}: {c['granted']} grants, {c['accepted']} accepted, {c['refused']} refused"
                for lang, c in sorted(r["by_lang"].items())
            )
            + "."
        ),
        "",
        (
            "A double grant is judged on the server's clock: the grant's `granted_at` is earlier "
            "than the `expires_at` of the previous grant of the key, which was neither released nor "
            "done. A stale write is an accepted write whose fence is not larger than an earlier "
            "accepted one of the key. The refused count comes from the workers (a check refused "
            "with `AC001` or by the client that already knew its lease lost, or an UPDATE that "
            "matched no row: PostgreSQL records neither). A write after its lease ended is a "
            "violation: every worker checks in the write's transaction, and a successful "
            "`check_fence` holds the key's row (`FOR SHARE`) until the commit, so the grant it "
            "found live stays the key's grant until then (docs/semantics.md, Fenced writes: the "
            "key's next grant waits for the commit). The write audit reads whether the writing "
            "transaction holds that row from the row's lockers (`pgrowlocks`), so a write made "
            "without the check after its lease ended is still counted (before the checks, the "
            "run counted 18 such writes in 300 s)."
        ),
    ]
    lines += recipe_lines(recipes)
    lines += [
        "",
        "## Latencies",
        "",
        (
            f"- Takeover after kill -9 (the kill to the next grant of the key the killed worker "
            f"held, from the audit): {summary(latencies['takeover'])}. The same measured from the "
            f"server-side expiry of the killed worker's lease: {summary(latencies['after_expiry'])}."
        ),
        (
            f"- Lost signal of SIGSTOPped workers, from SIGCONT to the worker's `lost` report: "
            f"{summary(latencies['lost_after_resume'])} (each, language and ms: "
            f"{', '.join(latencies['lost_langs']) or 'none'}); from the server-side expiry of its lease "
            f"to that report: {summary(latencies['lost_after_expiry'])}. A stopped process cannot "
            "report anything, so the second figure is bounded below by how long the nemesis kept "
            "it stopped past its expiry; the first is how quickly a resumed worker learns it lost "
            "(the C worker reads `accord_lease_is_lost` after its write, and `accord run` reports "
            "through its exit status, so theirs include their loop's own delay)."
        ),
        "",
        "## Reproduce",
        "",
        "```sh",
        f"make chaos CHAOS_SEED={args.seed} CHAOS_DURATION={args.duration}",
        "```",
        "",
        (
            "The seed fixes the order, timing and targets of the faults; what the workers do "
            "between them, and so the counts, vary from run to run. `make test-chaos` is a short "
            "run (every fault kind at least once) that `make test` includes."
        ),
    ]
    if r["violations"]:
        lines += ["", "## Violations", ""] + [f"- {v}" for v in r["violations"][:50]]
    return "\n".join(lines) + "\n"


#: The etcd run's section of the report (chaos/etcd_run.py writes it): the report ends with it.
ETCD_SECTION = "\n## On etcd\n"


def write_report(path: Path, text: str) -> None:
    """Writes this run's report, keeping the etcd run's section of the one it replaces (each
    store's run writes only its own part)."""
    old = path.read_text() if path.exists() else ""
    at = old.find(ETCD_SECTION)
    path.write_text(text + (old[at:] if at >= 0 else ""))


# --------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--duration", type=int, default=300, help="seconds of nemesis")
    parser.add_argument("--ttl-ms", type=int, default=1500)
    parser.add_argument("--gap", type=float, nargs=2, default=(1.0, 3.0))
    parser.add_argument("--report", type=Path, help="write the markdown report here")
    parser.add_argument(
        "--require-all", action="store_true", help="fail unless every kind was injected"
    )
    args = parser.parse_args()
    selftest()
    began = time.time()
    pair = Pair()
    logs = Path(os.environ.get("CHAOS_LOGS", REPO / "target/chaos/logs"))
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    setup(pair)
    proxy = Proxy(list(pair.ports.values()))
    workers, missing = build_workers(pair, proxy, args.ttl_ms)
    log(f"workers: {', '.join(w.slot for w in workers)}; not built: {missing or 'none'}")
    run = Run()
    for worker in workers:
        start(worker, run, logs)
    # The nemesis starts once every worker has connected (or after 30 s).
    end = time.monotonic() + 30
    while time.monotonic() < end:
        with run.lock:
            started = {e["w"] for e in run.events if e["ev"] == "start"}
        if all(w.name in started for w in workers):
            break
        time.sleep(0.1)
    time.sleep(1)
    nemesis = Nemesis(pair, proxy, workers, run, logs, args)
    try:
        nemesis.loop(time.time() + args.duration)
        caught = catch_up(pair, run, workers)
        time.sleep(2)
    finally:
        proxy.freeze(False)
        for worker in workers:
            if worker.process and worker.process.poll() is None:
                if worker.lang == "run":
                    pid = target_pid(worker)
                    if pid:
                        os.kill(pid, signal.SIGCONT)
                os.kill(worker.process.pid, signal.SIGCONT)
                worker.process.kill()
        for worker in workers:
            if worker.process:
                worker.process.wait()
    time.sleep(0.5)  # the readers drain the pipes
    with pair.wait_primary() as db:
        result = check(db, run, logs / "evidence.json")
        recipes = check_recipes(db, run)
    result["violations"] += recipes["listen"]["violations"] + recipes["stream"]["violations"]
    result["violations"] += [f"failed silently: {b}" for b in caught["behind"]]
    recipes["fleet"] = measure_fleet(result, run)
    recipes["catch_up"] = caught
    latencies = measure(result, run)
    wall = time.time() - began
    text = report(args, result, recipes, latencies, run, workers, missing, wall)
    if args.report:
        write_report(args.report, text)
        log(f"report written to {args.report}")
    print(text)
    counts = {kind: sum(1 for f in run.faults if f["kind"] == kind) for kind in KINDS}
    problems = list(result["violations"])
    if args.require_all:
        problems += [f"{kind} never injected" for kind, n in counts.items() if n == 0]
        if result["grants"] == 0:
            problems.append("no grant at all")
    for problem in problems[:50]:
        print(f"✗ {problem}")
    print(
        f"chaos: {result['grants']} grants, {result['accepted']} writes accepted, "
        f"{result['refused']} refused, faults {counts}, violations {len(result['violations'])}, "
        f"{wall:.0f} s"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
