"""accord's Python bench program (scenarios 6 and 7 of bench/README.md): the uncontended
workload (try-acquire one key without blocking, which must succeed, then release it) through

- ``python/accord``        accord.Client (sync), schema accord_bench, pool_size=1
- ``python/accord-async``  accord.AsyncClient, same, timed inside the event loop
- ``python/tooz``          tooz's PostgreSQL driver (pg advisory locks over psycopg2)
- ``python/pals``          PALs (pg advisory locks over SQLAlchemy + psycopg2)

Settings come from ACCORD_BENCH_URL, ACCORD_BENCH_OUT, ACCORD_BENCH_PAIRS and
ACCORD_BENCH_WARMUP; the JSON of the contract goes to ACCORD_BENCH_OUT and a short summary to
stdout. Run through ``make bench-python`` (mk/bench-python.mk), which makes the venv.

What each contender sends per pair (checked by the ``statements_per_pair`` and
``connections_per_pair`` metrics, counted with pg_stat_statements and pg_stat_database while the
pairs are measured, when the server has pg_stat_statements preloaded):

- accord (both clients): two statements on the one pooled connection, which stays open:
  try_acquire's ``INSERT … ON CONFLICT DO UPDATE … RETURNING`` on its leases table (the fence
  from a sequence) and release's ``UPDATE … RETURNING`` with a ``pg_notify``; no transaction
  statements, no connection per lock.
- tooz: a **new connection per acquire** (``PostgresLock.acquire`` connects when it has none,
  ``release`` closes it): connect + authenticate (+ TLS when the server offers it, libpq's
  default ``sslmode=prefer``), then, psycopg2 not being in autocommit, ``BEGIN``,
  ``SELECT pg_try_advisory_lock(a, b)``, ``SELECT pg_advisory_unlock(a, b)``, and the close
  (which ends the open transaction). That is tooz's only way: the driver has no option to keep
  the connection. Its lock id is the first two bytes of md5(name) as two ints, so only 65,536
  distinct locks exist. tooz 9 deprecates this driver (a DeprecationWarning, silenced here).
- pals: one pooled connection (SQLAlchemy's QueuePool; only one is ever checked out here),
  checked out by ``acquire`` and returned by ``release``: ``SELECT pg_try_advisory_lock(n)``,
  ``COMMIT``; ``BEGIN``, ``SELECT pg_advisory_unlock(n)``, ``COMMIT``; then pals' check-in hook
  runs ``BEGIN``, ``SELECT pg_advisory_unlock_all()`` and leaves that transaction open until
  the next pair's ``COMMIT`` (psycopg2 sends each BEGIN as its own round trip).

Both peers are used the way their docs show, their fastest normal way: one coordinator/locker
and one lock object made once and reused, ``acquire(blocking=False)`` then ``release()``.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import platform
import random
import re
import sys
import time
import urllib.parse
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

import accord
import pals
import psycopg2
import psycopg2.extensions
import sqlalchemy
from tooz import coordination

SCHEMA = "accord_bench"
APP_NAME = "accord-bench"


def env_int(name: str, default: int, minimum: int) -> int:
    raw = os.environ.get(name, "").strip()
    value = int(raw) if raw else default
    if value < minimum:
        sys.exit(f"bench.py: {name} must be at least {minimum}, not {value}")
    return value


def key_of(contender_id: str) -> str:
    return f"bench-{contender_id}"


def held(contender_id: str) -> RuntimeError:
    return RuntimeError(f"{contender_id}: try-acquire of an uncontended key failed")


class PeerLock(Protocol):
    def acquire(self, blocking: bool = ...) -> bool: ...

    def release(self) -> Any: ...


def lock_pairs(contender_id: str, lock: PeerLock, pairs: int) -> tuple[list[int], float]:
    """A peer's pairs: acquire without blocking (which must succeed), release."""
    clock = time.perf_counter_ns
    samples = []
    started = time.perf_counter()
    for _ in range(pairs):
        t = clock()
        if not lock.acquire(blocking=False):
            raise held(contender_id)
        lock.release()
        samples.append(clock() - t)
    return samples, time.perf_counter() - started


# URLs. The bench URL is libpq's (postgres:// or postgresql://, maybe with ?sslmode=… and the
# like). SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3, so pals gets the psycopg2
# dialect by name; SQLAlchemy hands the query parameters to psycopg2.connect as keywords. tooz
# picks its driver by scheme (only "postgresql") and passes nothing but host, port, database,
# user and password to psycopg2.connect, so the libpq parameters of the query go to it through
# libpq's environment variables instead.

LIBPQ_ENV = {
    "sslmode": "PGSSLMODE",
    "sslrootcert": "PGSSLROOTCERT",
    "sslcert": "PGSSLCERT",
    "sslkey": "PGSSLKEY",
    "sslcrl": "PGSSLCRL",
    "connect_timeout": "PGCONNECT_TIMEOUT",
    "application_name": "PGAPPNAME",
    "options": "PGOPTIONS",
    "target_session_attrs": "PGTARGETSESSIONATTRS",
    "gssencmode": "PGGSSENCMODE",
}


def with_scheme(url: str, scheme: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        sys.exit(f"bench.py: ACCORD_BENCH_URL must be a postgres:// URL, not {parts.scheme}://…")
    return urllib.parse.urlunsplit(parts._replace(scheme=scheme))


def tooz_url(url: str) -> tuple[str, dict[str, str]]:
    """tooz's URL (without the query) and the libpq environment carrying the query."""
    parts = urllib.parse.urlsplit(with_scheme(url, "postgresql"))
    env = {}
    for name, value in urllib.parse.parse_qsl(parts.query):
        if name in LIBPQ_ENV:
            env[LIBPQ_ENV[name]] = value
        else:
            sys.exit(f"bench.py: tooz cannot pass the URL parameter {name!r} to libpq")
    return urllib.parse.urlunsplit(parts._replace(query="")), env


# The contenders: run(n) does n pairs and returns one latency per pair (ns) and the wall time.


class Contender(Protocol):
    id: str
    label: str

    def run(self, pairs: int) -> tuple[list[int], float]: ...

    def close(self) -> None: ...


class AccordSync:
    id = "python/accord"
    label = "accord, Python (sync Client)"

    def __init__(self, url: str) -> None:
        self.client = accord.Client.connect(url, schema=SCHEMA, pool_size=1)
        self.key = key_of(self.id)

    def run(self, pairs: int) -> tuple[list[int], float]:
        client, key, clock = self.client, self.key, time.perf_counter_ns
        samples = []
        started = time.perf_counter()
        for _ in range(pairs):
            t = clock()
            lease = client.try_acquire(key)
            if lease is None:
                raise held(self.id)
            lease.release()
            samples.append(clock() - t)
        return samples, time.perf_counter() - started

    def close(self) -> None:
        self.client.close()


class AccordAsync:
    """One event loop (asyncio.Runner: asyncio.run's machinery, kept open across the halves,
    since the client belongs to the loop it was opened in); each run is one coroutine on it,
    timed inside the loop."""

    id = "python/accord-async"
    label = "accord, Python (AsyncClient)"

    def __init__(self, url: str) -> None:
        self.runner = asyncio.Runner()
        self.client = self.runner.run(self._connect(url))
        self.key = key_of(self.id)

    @staticmethod
    async def _connect(url: str) -> accord.AsyncClient:
        return await accord.AsyncClient.connect(url, schema=SCHEMA, pool_size=1)

    async def _pairs(self, pairs: int) -> tuple[list[int], float]:
        client, key, clock = self.client, self.key, time.perf_counter_ns
        samples = []
        started = time.perf_counter()
        for _ in range(pairs):
            t = clock()
            lease = await client.try_acquire(key)
            if lease is None:
                raise held(self.id)
            await lease.release()
            samples.append(clock() - t)
        return samples, time.perf_counter() - started

    def run(self, pairs: int) -> tuple[list[int], float]:
        return self.runner.run(self._pairs(pairs))

    async def _close(self) -> None:
        await self.client.close()

    def close(self) -> None:
        try:
            self.runner.run(self._close())
        finally:
            self.runner.close()


class Tooz:
    id = "python/tooz"
    label = "tooz (PostgreSQL driver, psycopg2)"

    def __init__(self, url: str) -> None:
        backend_url, env = tooz_url(url)
        os.environ.update(env)
        with warnings.catch_warnings():
            # "PostgreSQL driver is deprecated and will be removed in a future release"
            warnings.simplefilter("ignore", DeprecationWarning)
            self.coordinator = coordination.get_coordinator(backend_url, APP_NAME.encode())
        self.coordinator.start()
        self.lock = self.coordinator.get_lock(key_of(self.id).encode())

    def run(self, pairs: int) -> tuple[list[int], float]:
        return lock_pairs(self.id, self.lock, pairs)

    def close(self) -> None:
        self.coordinator.stop()


class Pals:
    id = "python/pals"
    label = "PALs (SQLAlchemy, psycopg2)"

    def __init__(self, url: str) -> None:
        self.locker = pals.Locker(APP_NAME, with_scheme(url, "postgresql+psycopg2"))
        self.lock = self.locker.lock(key_of(self.id))

    def run(self, pairs: int) -> tuple[list[int], float]:
        return lock_pairs(self.id, self.lock, pairs)

    def close(self) -> None:
        self.locker.engine.dispose()


class Psycopg2AccordSql:
    """accord's own two statements (statements.json, written by the Rust bench) sent by hand
    through psycopg2 in autocommit: the floor of what accord's package could cost, as
    rust/raw-sql is the Rust core's. psycopg2 interpolates parameters client-side (no
    server-side prepare), as hand-written psycopg2 code does."""

    id = "python/psycopg2-accord-sql"
    label = "psycopg2 by hand, accord's own two statements"

    def __init__(self, url: str, statements: dict[str, str]) -> None:
        self.conn = psycopg2.connect(url, application_name=f"{APP_NAME}/psycopg2-accord-sql")
        self.conn.autocommit = True
        self.cur = self.conn.cursor()
        self.ns, self.channel = statements["namespace"], statements["wakeup_channel"]
        # $n → %(pn)s: the statements use some parameters twice.
        self.acquire = re.sub(r"\$(\d+)", r"%(p\1)s", statements["acquire"])
        self.release = re.sub(r"\$(\d+)", r"%(p\1)s", statements["release"])
        self.key = key_of(self.id)
        self.attempt = random.randrange(1, 2**40) * 1_000_000

    def run(self, pairs: int) -> tuple[list[int], float]:
        cur, key, clock = self.cur, self.key, time.perf_counter_ns
        samples = []
        started = time.perf_counter()
        for _ in range(pairs):
            t = clock()
            self.attempt += 1
            cur.execute(
                self.acquire,
                {
                    "p1": self.ns,
                    "p2": key,
                    "p3": "psycopg2",
                    "p4": self.attempt,
                    "p5": 30000,
                    "p6": None,
                },
            )
            row = cur.fetchone()
            if row is None or row[0] is not True:
                raise held(self.id)
            cur.execute(
                self.release,
                {"p1": self.ns, "p2": key, "p3": "psycopg2", "p4": row[1], "p5": self.channel},
            )
            released = cur.fetchone()
            if released is None or released[0] != 1:
                raise RuntimeError(f"{self.id}: release of {key} found no lease")
            samples.append(clock() - t)
        return samples, time.perf_counter() - started

    def close(self) -> None:
        self.conn.close()


# What the server saw: statements (pg_stat_statements, when preloaded) and sessions
# (pg_stat_database), read on a connection of its own between runs, never during one.


class Observer:
    def __init__(self, url: str) -> None:
        self.conn = psycopg2.connect(with_scheme(url, "postgresql"))
        self.conn.autocommit = True  # no BEGIN of ours in the counts
        self.statements = True
        try:
            self._scalar("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            self._statements()
        except psycopg2.Error as e:
            reason = str(e).strip()
            print(f"bench.py: no statement counts (pg_stat_statements: {reason})", file=sys.stderr)
            self.statements = False

    def _scalar(self, sql: str) -> Any:
        with self.conn.cursor() as cur:
            cur.execute(sql)
            row = cur.fetchone() if cur.description else None
            return row[0] if row else None

    def _statements(self) -> int:
        # Our own queries name pg_stat_*; nobody else's do.
        return int(
            self._scalar(
                "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements"
                " WHERE query NOT LIKE '%pg\\_stat%'"
            )
        )

    def snapshot(self) -> tuple[Optional[int], int]:
        self._scalar("SELECT pg_stat_clear_snapshot()")
        sessions = int(
            self._scalar("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        )
        return (self._statements() if self.statements else None), sessions

    def server_version(self) -> str:
        return str(self._scalar("SHOW server_version"))

    def close(self) -> None:
        self.conn.close()


@dataclass
class Tally:
    samples: list[int] = field(default_factory=list)
    seconds: float = 0.0
    statements: int = 0
    sessions: int = 0


def measure(contender: Contender, pairs: int, observer: Observer, tally: Tally) -> None:
    statements0, sessions0 = observer.snapshot()
    samples, seconds = contender.run(pairs)
    # Sessions are counted when a backend exits: give tooz's last one a moment.
    time.sleep(0.2)
    statements1, sessions1 = observer.snapshot()
    tally.samples += samples
    tally.seconds += seconds
    if statements0 is not None and statements1 is not None:
        tally.statements += statements1 - statements0
    tally.sessions += sessions1 - sessions0


def percentile(ordered: list[float], p: float) -> float:
    return ordered[round((len(ordered) - 1) * p)]


def version(distribution: str) -> str:
    return importlib.metadata.version(distribution)


def libpq_version() -> str:
    """The libpq psycopg2 is linked with (psycopg2-binary ships its own): 170011 → "17.11"."""
    number = int(psycopg2.extensions.libpq_version())
    return f"{number // 10000}.{number % 10000}"


def main() -> None:
    url = os.environ.get("ACCORD_BENCH_URL", "")
    out = os.environ.get("ACCORD_BENCH_OUT", "")
    if not url or not out:
        sys.exit("bench.py: set ACCORD_BENCH_URL and ACCORD_BENCH_OUT (see bench/README.md)")
    pairs = env_int("ACCORD_BENCH_PAIRS", 5000, 2)
    warmup = env_int("ACCORD_BENCH_WARMUP", 500, 0)
    halves = (pairs // 2, pairs - pairs // 2)

    observer = Observer(url)
    contenders: list[Contender] = []
    try:
        for make in (AccordSync, AccordAsync, Tooz, Pals):
            contenders.append(make(url))
        statements_file = os.environ.get("ACCORD_BENCH_STATEMENTS", "")
        if statements_file and os.path.exists(statements_file):
            with open(statements_file) as f:
                contenders.append(Psycopg2AccordSql(url, json.load(f)))
        else:
            print(
                "python bench: no ACCORD_BENCH_STATEMENTS file (the Rust bench writes it): "
                "python/psycopg2-accord-sql left out",
                file=sys.stderr,
            )
        for contender in contenders:
            contender.run(warmup)
        tallies = {c.id: Tally() for c in contenders}
        for half in halves:
            for contender in contenders:
                measure(contender, half, observer, tallies[contender.id])
        versions = {
            "python": platform.python_version(),
            "accord": accord.__version__,
            "tooz": version("tooz"),
            "pals": version("pals"),
            "psycopg2": version("psycopg2-binary"),
            "sqlalchemy": sqlalchemy.__version__,
            "libpq": libpq_version(),
            "postgresql": observer.server_version(),
        }
    finally:
        for contender in reversed(contenders):
            contender.close()
        observer.close()

    results = []
    print(f"python bench: {pairs} pairs per contender after {warmup} warm-up pairs")
    for contender in contenders:
        tally = tallies[contender.id]
        latencies = [ns / 1000 for ns in tally.samples]
        metrics: dict[str, float] = {"connections_per_pair": round(tally.sessions / pairs, 3)}
        if observer.statements:
            metrics["statements_per_pair"] = round(tally.statements / pairs, 3)
        results.append(
            {
                "id": contender.id,
                "label": contender.label,
                "ops": len(latencies),
                "seconds": round(tally.seconds, 6),
                "latencies_us": [round(x, 2) for x in latencies],
                "metrics": metrics,
            }
        )
        ordered = sorted(latencies)
        per_pair = ", ".join(f"{v:g} {k.removesuffix('_per_pair')}" for k, v in metrics.items())
        print(
            f"  {contender.id:<20} p50 {percentile(ordered, 0.5):>8.1f} µs"
            f"   p99 {percentile(ordered, 0.99):>8.1f} µs"
            f"   {len(latencies) / tally.seconds:>7.0f} pairs/s   per pair: {per_pair}",
            flush=True,
        )

    with open(out, "w", encoding="utf-8") as f:
        json.dump({"source": "python", "versions": versions, "results": results}, f)
        f.write("\n")
    print(f"python bench: wrote {out}")


if __name__ == "__main__":
    main()
