"""The report of `make bench`: reads every bench program's JSON (bench/README.md), computes
the percentiles and ratios the same way for all of them, prints the table, and writes
docs/benchmarks.md and the latency plot.

    python bench/report.py target/bench docs/benchmarks.md docs/benchmarks.png
    python bench/report.py target/bench-smoke out.md - --expect 1,2,3,4,5   (no plot; fail
        unless the targets of those scenarios were measured: the smoke test of `make test`)
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Result:
    id: str
    label: str
    ops: int
    seconds: float
    latencies_us: list[float]
    metrics: dict[str, float] = field(default_factory=dict)
    _sorted: list[float] | None = None

    def pct(self, p: float) -> float:
        if self._sorted is None:
            self._sorted = sorted(self.latencies_us)
        if not self._sorted:
            return math.nan
        # Nearest rank on (n - 1): the same rule as the bench programs' own summaries.
        return self._sorted[round((len(self._sorted) - 1) * p)]

    @property
    def p50(self) -> float:
        return self.pct(0.5)

    @property
    def p99(self) -> float:
        return self.pct(0.99)

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else math.nan

    @property
    def wall(self) -> float:
        """Seconds per run, for records that add up several runs (`rounds`)."""
        return self.seconds / max(1.0, float(self.metrics.get("rounds", 1)))


@dataclass
class Target:
    name: str
    met: bool | None  # None: not measured in this run
    detail: str


def load(folder: Path) -> tuple[dict[str, Result], dict[str, dict[str, str]]]:
    results: dict[str, Result] = {}
    versions: dict[str, dict[str, str]] = {}
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        if "results" not in data:
            continue  # statements.json: input of the bench programs, not a result
        versions[data.get("source", path.stem)] = {
            k: str(v) for k, v in data.get("versions", {}).items()
        }
        for r in data["results"]:
            results[r["id"]] = Result(
                id=r["id"],
                label=r["label"],
                ops=int(r["ops"]),
                seconds=float(r["seconds"]),
                latencies_us=[float(x) for x in r.get("latencies_us", [])],
                metrics=dict(r.get("metrics", {})),
            )
    return results, versions


def us(value: float) -> str:
    if math.isnan(value):
        return "-"
    if value >= 10_000:
        return f"{value / 1000:,.1f} ms"
    return f"{value:,.0f} µs"


def num(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.0f}"


def ratio(a: float, b: float) -> str:
    if math.isnan(a) or math.isnan(b) or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def verdict(met: bool | None) -> str:
    return {True: "met", False: "NOT met", None: "not measured"}[met]


class Report:
    def __init__(self, results: dict[str, Result]) -> None:
        self.results = results
        self.sections: list[tuple[str, str, list[str], list[list[str]]]] = []
        self.targets: list[Target] = []

    def get(self, *ids: str) -> list[Result]:
        return [self.results[i] for i in ids if i in self.results]

    def table(
        self, title: str, note: str, header: list[str], rows: list[list[str]]
    ) -> None:
        if rows:
            self.sections.append((title, note, header, rows))

    def target(self, name: str, met: bool | None, detail: str) -> None:
        self.targets.append(Target(name, met, detail))

    def latency_rows(
        self, rows: list[Result], baseline: Result | None
    ) -> list[list[str]]:
        return [
            [
                f"`{r.id}`",
                r.label,
                us(r.p50),
                us(r.p99),
                num(r.ops_per_s),
                ratio(r.p50, baseline.p50) if baseline else "-",
            ]
            for r in rows
        ]

    def build(self) -> None:
        self.uncontended()
        self.concurrent()
        self.handoff()
        self.notify()
        self.keepalive()
        self.pool()
        self.fleet()
        self.line()
        self.streams()
        self.million()
        self.stats_cost()
        self.bindings()
        self.peers()
        self.etcd()
        self.fenced()

    def modes(self, *ids: str) -> list[tuple[str, str]]:
        """The fsync modes (id suffix, column text) in which any of `ids` was measured."""
        return [
            (suffix, text)
            for suffix, text in (("", "off (test settings)"), ("-fsync", "on"))
            if any(i + suffix in self.results for i in ids)
        ]

    def uncontended(self) -> None:
        ids = ("rust/accord", "rust/raw-sql", "rust/advisory")
        rows: list[list[str]] = []
        for suffix, fsync in self.modes(*ids):
            base = self.results.get("rust/raw-sql" + suffix)
            for r in self.get(*(i + suffix for i in ids)):
                rows.append(
                    [
                        f"`{r.id}`",
                        r.label,
                        fsync,
                        us(r.p50),
                        us(r.p99),
                        num(r.ops_per_s),
                        ratio(r.p50, base.p50) if base else "-",
                    ]
                )
            accord = self.results.get("rust/accord" + suffix)
            which = "on" if suffix else "off"
            name = f"(1) within 1.1x of raw SQL, fsync {which}"
            if accord and base:
                r = accord.p50 / base.p50
                mean = base.ops_per_s / accord.ops_per_s
                self.target(name, r <= 1.1, f"p50 {r:.2f}x, mean {mean:.2f}x")
            else:
                self.target(name, None, "")
        self.table(
            "1. Uncontended try_acquire + release, one client, one key",
            "Ratio: p50 against raw SQL (accord's own two statements sent raw on one "
            "tokio-postgres connection: the floor), in the same fsync mode.",
            ["id", "contender", "fsync", "p50", "p99", "pairs/s", "p50 vs raw SQL"],
            rows,
        )
        tls = self.get("rust/accord-tls", "rust/raw-sql-tls")
        self.table(
            "1b. The same over TLS",
            "Not judged by a target (the rows above are); how much the encryption adds, with the "
            "same TLS stack (rustls) on both sides and the server's certificate checked. Ratio: "
            "p50 against raw SQL over TLS.",
            ["id", "contender", "p50", "p99", "pairs/s", "p50 vs raw SQL over TLS"],
            self.latency_rows(tls, self.results.get("rust/raw-sql-tls")),
        )

    def concurrent(self) -> None:
        ids = ("rust/accord-64", "rust/raw-sql-64", "rust/raw-sql-64-pipelined")
        rows: list[list[str]] = []
        for suffix, fsync in self.modes(*ids):
            base = self.results.get("rust/raw-sql-64" + suffix)
            for r in self.get(*(i + suffix for i in ids)):
                rows.append(
                    [
                        f"`{r.id}`",
                        r.label,
                        fsync,
                        us(r.p50),
                        us(r.p99),
                        num(r.ops_per_s),
                        ratio(r.ops_per_s, base.ops_per_s) if base else "-",
                    ]
                )
        self.table(
            "2. Throughput, 64 tasks in one process, distinct keys",
            "Ratio: pairs/s against the same statements on a deadpool-postgres pool of as many "
            "connections as the accord client uses, in the same fsync mode. The pipelined row "
            "shares those connections among all tasks (tokio-postgres pipelining): one "
            "statement per call, which is what accord sent before its client grouped tries "
            "into rounds. accord sends the tries (and the releases) that its tasks start "
            "together as one statement per round, so on a durable server one WAL flush "
            "carries many grants.",
            ["id", "contender", "fsync", "p50", "p99", "pairs/s", "pairs/s vs pool"],
            rows,
        )
        accord = self.results.get("rust/accord-64")
        base = self.results.get("rust/raw-sql-64")
        if accord and base:
            r = accord.ops_per_s / base.ops_per_s
            self.target(
                "(2) at least raw SQL's throughput", r >= 1.0, f"{r:.2f}x the pool"
            )
        else:
            self.target("(2) at least raw SQL's throughput", None, "")
        name = (
            "(2) durable server: at least 5x the pool, and 2x one statement per call "
            "(the pipelined row)"
        )
        accord = self.results.get("rust/accord-64-fsync")
        base = self.results.get("rust/raw-sql-64-fsync")
        piped = self.results.get("rust/raw-sql-64-pipelined-fsync")
        if accord and base and piped:
            r = accord.ops_per_s / base.ops_per_s
            q = accord.ops_per_s / piped.ops_per_s
            self.target(
                name,
                r >= 5 and q >= 2,
                f"{r:.2f}x the pool, {q:.2f}x the pipelined statements",
            )
        else:
            self.target(name, None, "no run with fsync on")

    def handoff(self) -> None:
        ids = ("rust/handoff-accord", "rust/handoff-poll-10ms")
        rows: list[list[str]] = []
        for suffix, fsync in self.modes(*ids):
            base = self.results.get("rust/handoff-poll-10ms" + suffix)
            for r in self.get(*(i + suffix for i in ids)):
                rows.append(
                    [
                        f"`{r.id}`",
                        r.label,
                        fsync,
                        us(r.p50),
                        us(r.p99),
                        str(r.ops),
                        ratio(r.p50, base.p50) if base else "-",
                    ]
                )
            accord = self.results.get("rust/handoff-accord" + suffix)
            self.target(
                f"(3) hand-off p50 under 2 ms, fsync {'on' if suffix else 'off'}",
                accord.p50 < 2000 if accord else None,
                f"p50 {us(accord.p50)}, p99 {us(accord.p99)}" if accord else "",
            )
        if not rows:
            self.target("(3) hand-off p50 under 2 ms", None, "")
        self.table(
            "3. Hand-off: holder releases → waiter holds",
            "From the instant the holder starts its release to the instant the waiter's acquire "
            "returns. Ratio: p50 against a waiter polling every 10 ms, in the same fsync mode.",
            ["id", "contender", "fsync", "p50", "p99", "hand-offs", "p50 vs polling"],
            rows,
        )

    def notify(self) -> None:
        rows: list[list[str]] = []
        first = None
        for suffix, fsync in self.modes("rust/notify"):
            r = self.results["rust/notify" + suffix]
            first = first or r
            m = r.metrics
            rate = float(m.get("sustained_msgs_per_s", math.nan))
            rows += [
                ["one at a time", fsync, us(r.p50), us(r.p99), num(r.ops_per_s)],
                [
                    f"sustained, {m.get('sustained_messages', 0):,.0f} messages",
                    fsync,
                    us(float(m.get("sustained_p50_us", math.nan))),
                    us(float(m.get("sustained_p99_us", math.nan))),
                    num(rate),
                ],
            ]
            self.target(
                "(4) notify p50 under 1 ms, over 20,000 msgs/s, "
                f"fsync {'on' if suffix else 'off'}",
                r.p50 < 1000 and rate > 20_000,
                f"p50 {us(r.p50)}, {num(rate)} msgs/s sustained",
            )
        if first is None:
            self.target("(4) notify p50 under 1 ms, over 20,000 msgs/s", None, "")
            return
        self.table(
            "4. Notify → listener receive",
            "One message at a time (sent, then awaited), and a sustained stream from "
            f"{first.metrics.get('sustained_publishers', '?'):.0f} publishing tasks on one "
            "client to one listening client.",
            ["measure", "fsync", "p50", "p99", "msgs/s"],
            rows,
        )

    def keepalive(self) -> None:
        rows: list[list[str]] = []
        first = None
        for suffix, fsync in self.modes("rust/keepalive"):
            r = self.results["rust/keepalive" + suffix]
            m = {k: float(v) for k, v in r.metrics.items()}
            first = first or m
            rows.append(
                [
                    num(m["leases"]),
                    fsync,
                    num(m["statements"]),
                    f"{m['statements_per_s']:.2f}",
                    f"{m['keepalive_ticks']:.0f} ({m['expected_ticks']:.1f})",
                    f"{m['statements_per_tick']:.2f}",
                    num(m["rows_renewed"]),
                    f"{m['client_cpu_percent_of_core']:.2f}% of a core",
                ]
            )
            # One statement per 10,000 leases and renewal period (older results: one).
            per_period = m.get("statements_per_period", 1.0)
            one_per_tick = (
                m["statements_per_tick"] <= 1.0 + 1e-6
                and m["keepalive_ticks"]
                <= (math.ceil(m["expected_ticks"]) + 1) * per_period
            )
            server = m.get("server_ms_per_statement")
            self.target(
                "(5) one statement per 10,000 leases and tick, under 5% of a core, "
                f"fsync {'on' if suffix else 'off'}",
                one_per_tick and m["client_cpu_percent_of_core"] < 5,
                f"{m['leases']:,.0f} leases: {m['statements_per_tick']:.2f} statements "
                f"per renewal statement sent, {m['keepalive_ticks']:.0f} renewal statements "
                f"in {m['expected_ticks']:.1f} periods, "
                f"{m['client_cpu_percent_of_core']:.2f}% CPU"
                + (f", {server:.0f} ms server time each" if server is not None else ""),
            )
        if first is None:
            self.target(
                "(5) one statement per 10,000 leases and tick, under 5% of a core",
                None,
                "",
            )
            return
        self.table(
            f"5. Keepalive: {first['leases']:,.0f} leases held by one client",
            f"ttl {first['ttl_s']:.0f} s (renewed every ttl/3), measured for "
            f"{first['window_s']:.0f} s. "
            "Statements: every statement the database ran in that window "
            "(pg_stat_statements); ticks: renewal statements the keepalive sent, against the "
            "renewal periods in the window (more ticks than periods: the batch was split); "
            "CPU: the whole client process (getrusage).",
            [
                "leases",
                "fsync",
                "statements",
                "statements/s",
                "ticks (periods)",
                "statements/tick",
                "rows renewed",
                "client CPU",
            ],
            rows,
        )

    def pool(self) -> None:
        modes = [("", "off (test settings)"), ("-fsync", "on")]
        rows = []
        measured: dict[str, tuple[Result, Result]] = {}
        batches: dict[str, tuple[Result, Result | None]] = {}
        for suffix, fsync in modes:
            floor = self.results.get(f"rust/pool-raw-sql{suffix}")
            accord = self.results.get(f"rust/pool-accord{suffix}")
            if floor and accord:
                measured[suffix] = (accord, floor)
            batch_floor = self.results.get(f"rust/pool-batch-raw-sql{suffix}")
            batch = self.results.get(f"rust/pool-batch-accord{suffix}")
            if batch:
                batches[suffix] = (batch, batch_floor)
            for ids, base in (
                (
                    [
                        f"rust/pool-accord{suffix}",
                        f"rust/pool-try-acquire{suffix}",
                        f"rust/pool-raw-sql{suffix}",
                    ],
                    floor,
                ),
                (
                    [
                        f"rust/pool-batch-accord{suffix}",
                        f"rust/pool-batch-raw-sql{suffix}",
                    ],
                    batch_floor,
                ),
            ):
                for r in self.get(*ids):
                    keys = float(r.metrics.get("keys", r.ops))
                    stmts = float(r.metrics.get("statements", math.nan))
                    rows.append(
                        [
                            f"`{r.id}`",
                            r.label,
                            fsync,
                            f"{r.metrics.get('work_ms', 0):.0f} ms",
                            f"{r.wall * 1000:,.0f} ms",
                            num(r.ops_per_s),
                            num(stmts),
                            f"{stmts / keys:.2f}" if keys else "-",
                            ratio(r.wall, base.wall) if base else "-",
                        ]
                    )
        first = next(iter(self.get("rust/pool-accord", "rust/pool-accord-fsync")), None)
        m = first.metrics if first else {}
        source = (
            "pg_stat_statements: every statement the database ran during the drain"
            if m.get("statements_source", 0)
            else "the clients' own count of their calls (pg_stat_statements not loaded)"
        )
        self.table(
            "8. Work pool: drain a pool with workers",
            f"{m.get('keys', 0):,.0f} keys, {m.get('workers', 0):.0f} workers (tasks of one "
            f"process, a client or connection each), {m.get('work_ms', 0):.0f} ms of work per key, "
            f"claims of {m.get('batch', 0):.0f}. Wall time from the first claim to the last done, "
            f"the mean of {m.get('rounds', 1):.0f} drains run in turn with the floor's (the old "
            "way: one); "
            f"keys/s: keys claimed and marked done per second; statements: {source}. Ratio: wall "
            "time against hand-written SQL (FOR UPDATE SKIP LOCKED claim, an UPDATE per done: "
            "the floor). The `batch` rows measure throughput: five times the keys, no work, and "
            "each claimed batch marked done at once (accord: the batch's dones started together, "
            "which the client's group commit sends as one statement; the floor: one UPDATE for "
            "the batch). fsync on: the same cluster with fsync and synchronous_commit turned on "
            "for the run (full_page_writes stays off).",
            [
                "id",
                "contender",
                "fsync",
                "work",
                "wall time",
                "keys/s",
                "statements",
                "statements/key",
                "wall vs raw SQL",
            ],
            rows,
        )
        restarts = self.get("rust/pool-restart", "rust/pool-restart-fsync")
        self.table(
            "8b. Work pool: a restarted worker",
            f"A new client's first claim on the drained pool of {m.get('keys', 0):,.0f} done keys "
            "(the old way, try_acquire of every name, costs a statement per done key).",
            ["id", "fsync", "statements", "time"],
            [
                [
                    f"`{r.id}`",
                    "on" if r.metrics.get("fsync") else "off (test settings)",
                    num(r.metrics.get("statements", math.nan)),
                    us(r.p50),
                ]
                for r in restarts
            ],
        )
        judged = measured.get("-fsync") or measured.get("")
        if judged:
            accord, floor = judged
            wall = accord.wall / floor.wall
            which = "fsync on" if "-fsync" in measured else "fsync off"
            self.target(
                "(8) work pool within 1.2x of hand-written SQL",
                wall <= 1.2,
                f"wall time {wall:.2f}x ({which})"
                + "".join(
                    f"; {a.wall / f.wall:.2f}x with fsync {'on' if k else 'off'}"
                    for k, (a, f) in measured.items()
                    if (k == "-fsync") != (which == "fsync on")
                ),
            )
        else:
            self.target("(8) work pool within 1.2x of hand-written SQL", None, "")
        for suffix, want, which in (("", 20000, "off"), ("-fsync", 5000, "on")):
            got = batches.get(suffix)
            floor_note = (
                f" (hand-written SQL: {num(got[1].ops_per_s)})"
                if got and got[1]
                else ""
            )
            self.target(
                f"(8) work pool at least {want:,} keys claimed+done/s with fsync {which}, "
                "claims of 50",
                got[0].ops_per_s >= want if got else None,
                f"{num(got[0].ops_per_s)} keys/s{floor_note}"
                if got
                else f"no run with fsync {which}",
            )
        self.target(
            "(8) a restarted worker learns every key is done in one round trip",
            all(r.metrics.get("statements", 2) <= 1 for r in restarts)
            if restarts
            else None,
            ", ".join(
                f"{num(r.metrics.get('statements', math.nan))} statement ({r.id})"
                for r in restarts
            )
            or "not measured",
        )

    def fleet(self) -> None:
        changes = [r for r in self.results.values() if r.id.startswith("fleet/")]
        if not changes:
            self.target(
                "(9) a fleet converges within 5 periods of a join or leave", None, ""
            )
            self.target(
                "(9) at most one read and one keepalive per member and period", None, ""
            )
            return
        rows = []
        order = {"join": 0, "leave": 1, "kill": 2, "stable": 3}
        for r in sorted(
            changes,
            key=lambda r: (
                r.metrics.get("shards", 0),
                r.metrics.get("members", 0),
                order.get(str(r.metrics.get("change", "stable")), 3),
            ),
        ):
            m = r.metrics
            if "statements_per_member_period" in m:
                continue
            rows.append(
                [
                    f"`{r.id}`",
                    str(m.get("change")),
                    f"{m.get('shards', 0):,.0f}",
                    f"{m.get('members', 0):.0f}",
                    f"{r.seconds * 1000:,.0f} ms",
                    f"{m.get('periods', math.nan):.1f}",
                    num(float(m.get("moves", math.nan))),
                ]
            )
        stable = [r for r in changes if "statements_per_member_period" in r.metrics]
        first = changes[0].metrics
        self.table(
            "9. Fleets: convergence after a change",
            f"Members are processes (ttl {first.get('ttl_ms', 0):,.0f} ms, period "
            f"{first.get('period_ms', 0):,.0f} ms). Time from the change (a member started, "
            "SIGTERM to one, SIGKILL to one) until every live member holds its share (every "
            "shard held, counts within 1); moves: shards assigned after the change. A killed "
            "member's shards wait for its ttl; a join waits one period before its first "
            "decision (members started together see each other first).",
            ["id", "change", "shards", "members", "time", "periods", "moves"],
            rows,
        )
        self.table(
            "9b. Fleets: statements per member and period, membership stable",
            "Every statement the database ran in 10 stable periods (pg_stat_statements), over "
            "members × periods: one read of the fleet and the client's one keepalive tick.",
            ["id", "shards", "members", "statements / member / period"],
            [
                [
                    f"`{r.id}`",
                    f"{r.metrics.get('shards', 0):,.0f}",
                    f"{r.metrics.get('members', 0):.0f}",
                    f"{r.metrics['statements_per_member_period']:.2f}",
                ]
                for r in stable
            ],
        )
        graceful = [r for r in changes if r.metrics.get("change") in ("join", "leave")]
        worst = max(graceful, key=lambda r: r.metrics.get("periods", 0), default=None)
        self.target(
            "(9) a fleet converges within 5 periods of a join or leave",
            worst.metrics.get("periods", 99) <= 5 if worst else None,
            f"slowest {worst.metrics.get('periods', 0):.1f} periods (`{worst.id}`)"
            if worst
            else "",
        )
        most = max(
            stable,
            key=lambda r: r.metrics["statements_per_member_period"],
            default=None,
        )
        self.target(
            "(9) at most one read and one keepalive per member and period",
            most.metrics["statements_per_member_period"] <= 2.05 if most else None,
            f"at most {most.metrics['statements_per_member_period']:.2f} (`{most.id}`)"
            if most
            else "",
        )

    def line(self) -> None:
        ids = [
            "rust/line-handoff-1",
            "rust/line-handoff-32",
            "rust/line-handoff-32-poll-10ms",
            "rust/election-resign",
            "rust/election-kill",
        ]
        rows = []
        for fsync in ("", "-fsync"):
            base = self.results.get(f"rust/line-handoff-32-poll-10ms{fsync}")
            for r in self.get(*(i + fsync for i in ids)):
                wakeups = r.metrics.get("wakeups_per_release")
                rows.append(
                    [
                        f"`{r.id}`",
                        r.label,
                        "on" if r.metrics.get("fsync") else "off",
                        us(r.p50),
                        us(r.p99),
                        str(r.ops),
                        f"{wakeups:.2f}" if wakeups is not None else "-",
                        ratio(r.p50, base.p50)
                        if base and "line-handoff-32" in r.id
                        else "-",
                    ]
                )
        self.table(
            "10. Waiting in line and elections",
            "Hand-off: from the holder starting its release to the next waiter holding the key; "
            "with 32 in line each granted waiter releases at once, so every hand-off goes "
            "through a full line. Wake-ups per release: how many waiting acquires a release "
            "woke (each client counts its own). Failover: from `resign()` starting, or from "
            "SIGKILL to the leader's process (1 s ttl), to the next campaigner leading. Ratio: "
            "p50 against 32 waiters retrying every 10 ms.",
            [
                "id",
                "contender",
                "fsync",
                "p50",
                "p99",
                "samples",
                "wake-ups / release",
                "p50 vs polling",
            ],
            rows,
        )
        lines = self.get("rust/line-handoff-32", "rust/line-handoff-32-fsync")
        most = max(
            (r.metrics.get("wakeups_per_release", math.nan) for r in lines),
            default=None,
        )
        self.target(
            "(10) a release wakes one waiter (32 in line)",
            most <= 1.0 if most is not None else None,
            f"at most {most:.2f} wake-ups per release" if most is not None else "",
        )
        for fsync in ("", "-fsync"):
            line = self.results.get(f"rust/line-handoff-32{fsync}")
            poll = self.results.get(f"rust/line-handoff-32-poll-10ms{fsync}")
            self.target(
                f"(10) hand-off through a line of 32 faster than polling every 10 ms"
                f" (fsync {'on' if fsync else 'off'})",
                line.p50 < poll.p50 if line and poll else None,
                f"p50 {us(line.p50)} vs {us(poll.p50)}" if line and poll else "",
            )
        resign = self.results.get("rust/election-resign-fsync") or self.results.get(
            "rust/election-resign"
        )
        self.target(
            "(10) failover after a resignation within 100 ms",
            resign.p50 < 100_000 if resign else None,
            f"p50 {us(resign.p50)}, p99 {us(resign.p99)} (`{resign.id}`)"
            if resign
            else "",
        )
        kill = self.results.get("rust/election-kill-fsync") or self.results.get(
            "rust/election-kill"
        )
        ttl_us = kill.metrics.get("ttl_ms", 0) * 1000 if kill else 0
        self.target(
            "(10) failover after SIGKILL within the ttl",
            max(kill.latencies_us) <= ttl_us * 1.2 if kill else None,
            f"at most {us(max(kill.latencies_us))} for a {ttl_us / 1000:,.0f} ms ttl"
            if kill
            else "",
        )

    def streams(self) -> None:
        ids = [
            "rust/stream-publish",
            "rust/stream-publish-batched",
            "rust/stream-e2e",
            "rust/notify-e2e",
            "rust/stream-recovery",
        ]
        rows = []
        for fsync in ("", "-fsync"):
            notify = self.results.get(f"rust/notify-e2e{fsync}")
            for r in self.get(*(i + fsync for i in ids)):
                rows.append(
                    [
                        f"`{r.id}`",
                        r.label,
                        "on" if r.metrics.get("fsync") else "off",
                        us(r.p50),
                        us(r.p99),
                        num(r.ops_per_s) if "recovery" not in r.id else "-",
                        ratio(r.p50, notify.p50)
                        if notify and r.id.startswith("rust/stream-e2e")
                        else "-",
                    ]
                )
        self.table(
            "11. Durable streams",
            "Publish: the wait for a seq, one at a time, and with 1,000 publishes started at "
            "once from one client (its group commit shares statements; events/s is the "
            "throughput). End to end: from the start of a publish to another client's "
            "subscriber holding the event, one at a time, beside NOTIFY alone (which stores "
            "nothing and loses what a reconnect misses). Recovery: the subscriber's connections "
            "are terminated while a publisher publishes every 2 ms; the time until it holds the "
            "first event published after the cut (every event arrived once and in order, or the "
            "bench fails). Ratio: end-to-end p50 against NOTIFY alone.",
            [
                "id",
                "contender",
                "fsync",
                "p50",
                "p99",
                "events/s",
                "p50 vs NOTIFY",
            ],
            rows,
        )
        for fsync in ("", "-fsync"):
            single = self.results.get(f"rust/stream-publish{fsync}")
            batched = self.results.get(f"rust/stream-publish-batched{fsync}")
            self.target(
                "(11) publishes started together share statements: 10x the events/s of "
                f"one at a time (fsync {'on' if fsync else 'off'})",
                batched.ops_per_s >= 10 * single.ops_per_s
                if single and batched
                else None,
                f"{num(batched.ops_per_s)} vs {num(single.ops_per_s)} events/s"
                if single and batched
                else "",
            )
        recover = self.results.get("rust/stream-recovery-fsync") or self.results.get(
            "rust/stream-recovery"
        )
        self.target(
            "(11) a subscriber whose connections were terminated misses nothing",
            bool(recover.metrics.get("events_delivered_once_in_order"))
            if recover
            else None,
            f"{recover.metrics.get('events_delivered_once_in_order', 0):,.0f} events once, in "
            f"order; back {us(recover.p50)} after the cut (p50)"
            if recover
            else "",
        )

    def million(self) -> None:
        ids = [
            "rust/million-page",
            "rust/million-page-deep",
            "rust/million-prefix",
            "rust/million-state-done",
            "rust/million-state-held",
            "rust/million-state-free",
            "rust/million-counts",
            "rust/million-claim",
            "rust/million-claim-small",
        ]
        found = self.get(*ids)
        small = self.results.get("rust/million-claim-small")
        keys = found[0].metrics.get("keys", 0) if found else 0
        self.table(
            "12. A million keys",
            f"One namespace of {keys:,.0f} keys, one work pool half way through its work: "
            "the first 60% done, the next 200 held, the rest free. Each call 50 times on one "
            "client. Lists are pages of 100 in key order; a prefix is a range of the primary "
            "key. A state filter reads the key order until its page is full: held and free "
            "keys lie past the 600,000 done ones here. Ratio: claim against the same claim "
            "on a pool of 1,000 keys.",
            ["id", "call", "p50", "p99", "calls/s", "p50 vs small pool"],
            self.latency_rows(found, None),
        )
        if small:
            for row in self.sections[-1][3]:
                if row[0] == "`rust/million-claim`":
                    big = self.results["rust/million-claim"]
                    row[-1] = ratio(big.p50, small.p50)
        for rid, what, bound in [
            ("rust/million-page", "first page", 5000),
            ("rust/million-page-deep", "a page half way", 5000),
            ("rust/million-prefix", "a prefix", 5000),
            ("rust/million-state-done", "state done", 5000),
            ("rust/million-state-held", "state held", 5000),
            ("rust/million-state-free", "state free", 5000),
            ("rust/million-counts", "counts", 20000),
        ]:
            r = self.results.get(rid)
            self.target(
                f"(12) {what} at {keys:,.0f} keys: p50 under {bound / 1000:.0f} ms",
                r.p50 < bound if r else None,
                f"{us(r.p50)}" if r else "",
            )
        big = self.results.get("rust/million-claim")
        self.target(
            f"(12) claim on a pool of {keys:,.0f} keys within 1.2x of a pool of 1,000",
            big.p50 <= 1.2 * small.p50 if big and small else None,
            f"{us(big.p50)} vs {us(small.p50)}" if big and small else "",
        )

    def stats_cost(self) -> None:
        rows = []
        for on_id, off_id, what in [
            ("rust/stats-on", "rust/stats-off", "one caller"),
            ("rust/stats-on-64", "rust/stats-off-64", "64 tasks"),
        ]:
            on, off = self.results.get(on_id), self.results.get(off_id)
            overhead = math.nan
            if on and off:
                a = on.metrics.get("round_us_per_pair", [])
                b = off.metrics.get("round_us_per_pair", [])
                ratios = sorted(x / y for x, y in zip(a, b) if y > 0)
                if ratios:
                    overhead = (statistics.median(ratios) - 1.0) * 100.0
                rows.append(
                    [
                        what,
                        us(on.p50),
                        us(off.p50),
                        us(statistics.fmean(on.latencies_us or [math.nan])),
                        us(statistics.fmean(off.latencies_us or [math.nan])),
                        "-" if math.isnan(overhead) else f"{overhead:+.2f}%",
                    ]
                )
            self.target(
                f"(13) stats overhead, {what}: at most 2%",
                overhead <= 2.0 if not math.isnan(overhead) else None,
                ""
                if math.isnan(overhead)
                else f"{overhead:+.2f}% (median of the blocks' ratios)",
            )
        self.table(
            "13. The cost of stats",
            "The same try_acquire + release loops on two clients, stats recorded (the default) "
            "and not (`ClientOptions::record_stats(false)`), each caller alternating between "
            "them pair by pair. Overhead: the median over 40 blocks of (mean time per pair "
            "with / without) - 1; a negative figure is noise.",
            ["loop", "p50 on", "p50 off", "mean on", "mean off", "overhead"],
            rows,
        )

    def bindings(self) -> None:
        base = self.results.get("rust/accord")
        rows = self.get(
            "rust/accord",
            "c/accord",
            "go/accord",
            "python/accord",
            "python/accord-async",
            "node/accord",
        )
        self.table(
            "6. Binding overhead: the workload of 1 through each language",
            "Ratio: p50 against the Rust core (each language's program runs after the Rust one, "
            "against the same database).",
            ["id", "contender", "p50", "p99", "pairs/s", "p50 vs Rust"],
            self.latency_rows(rows, base),
        )
        for lang in ("python/accord", "node/accord"):
            r = self.results.get(lang)
            name = f"(6) {lang.split('/')[0].title()} within 1.5x of Rust"
            if r and base:
                self.target(
                    name, r.p50 / base.p50 <= 1.5, f"p50 {r.p50 / base.p50:.2f}x"
                )
            else:
                self.target(name, None, "")

    def peers(self) -> None:
        floors = {"python": "python/psycopg2-accord-sql", "node": "node/pg-accord-sql"}
        for lang, peers in (
            ("python", ("tooz", "pals")),
            ("node", ("advisory-lock", "pg")),
        ):
            accord = self.results.get(f"{lang}/accord")
            rows = self.get(
                f"{lang}/accord", *(f"{lang}/{p}" for p in peers), floors[lang]
            )
            self.table(
                f"7. Peers in {lang.title()}: the workload of 1",
                f"Ratio: p50 against accord's {lang.title()} package (above 1: accord is ahead). "
                f"The last row sends accord's own two statements by hand (`{floors[lang]}`): "
                "what the package would cost with no client of its own around them.",
                ["id", "contender", "p50", "p99", "pairs/s", "p50 vs accord"],
                self.latency_rows(rows, accord),
            )
            for peer in peers:
                r = self.results.get(f"{lang}/{peer}")
                name = f"(7) accord {lang.title()} ahead of {peer}"
                if r and accord:
                    self.target(
                        name,
                        accord.p50 < r.p50,
                        f"{peer} p50 {us(r.p50)} vs accord {us(accord.p50)} "
                        f"({r.p50 / accord.p50:.2f}x)",
                    )
                else:
                    self.target(name, None, "")

    def etcd(self) -> None:
        """Scenario 14: accord on etcd beside etcd's own Go lock (the floor on etcd) and beside
        accord on a durable PostgreSQL, the same workloads on each."""
        workloads = [
            ("try_acquire + release", "accord", "mutex", "p50"),
            ("64 tasks, keys of their own", "accord-64", "mutex-64", "ops"),
            (
                "hand-off, release → waiter holds",
                "handoff-accord",
                "handoff-mutex",
                "p50",
            ),
        ]
        rows: list[list[str]] = []
        for workload, ours, floor_id, measure in workloads:
            floor = self.results.get(f"go/etcd-{floor_id}")
            for r in self.get(
                f"rust/etcd-{ours}", f"go/etcd-{floor_id}", f"rust/etcd-{ours}-pg"
            ):
                if floor is None:
                    against = "-"
                elif measure == "p50":
                    against = ratio(r.p50, floor.p50) + " p50"
                else:
                    against = ratio(r.ops_per_s, floor.ops_per_s) + " ops/s"
                calls = r.metrics.get("calls_per_pair")
                rows.append(
                    [
                        workload,
                        f"`{r.id}`",
                        r.label,
                        us(r.p50),
                        us(r.p99),
                        num(r.ops_per_s),
                        against,
                        "-" if calls is None else f"{float(calls):.2f}",
                    ]
                )
        self.table(
            ETCD_TITLE,
            "The same workloads on a 3-member etcd cluster on loopback "
            "(scripts/with-etcd.sh, data on the same disk as PostgreSQL's, so that both "
            "fsync for real) through accord's Rust core, through etcd's own Go recipe "
            "`concurrency.Mutex` (go.etcd.io/etcd/client/v3: the floor of a lock on etcd; its "
            "TryLock puts a key on the session's lease and reads the key's owners in one "
            "transaction, Unlock deletes it), and through accord's Rust core on PostgreSQL with "
            "fsync and synchronous_commit on (`-pg`). Ratio: against `concurrency.Mutex` (p50: "
            "below 1 is faster; ops/s: above 1 is more). Client calls: what the accord client "
            "sent its store per pair (etcd: gRPC calls; PostgreSQL: statements, which accord "
            "groups across tasks). `concurrency.Mutex`'s Lock waits on a watch opened at the "
            "revision it read, which etcd serves as an unsynced watcher, caught up every 100 ms "
            "(mvcc's syncWatchersLoop): a release 15-25 ms after the Lock call, as here, reaches "
            "the waiter at that catch-up.",
            [
                "workload",
                "id",
                "contender",
                "p50",
                "p99",
                "ops/s",
                "vs concurrency.Mutex",
                "client calls/pair",
            ],
            rows,
        )
        accord, mutex = (
            self.results.get("rust/etcd-accord"),
            self.results.get("go/etcd-mutex"),
        )
        name = "(14) etcd: a pair within 1.2x of concurrency.Mutex (p50)"
        if accord and mutex:
            q = accord.p50 / mutex.p50
            self.target(
                name, q <= 1.2, f"{q:.2f}x: {us(accord.p50)} vs {us(mutex.p50)}"
            )
        else:
            self.target(name, None, "")
        accord, mutex = (
            self.results.get("rust/etcd-accord-64"),
            self.results.get("go/etcd-mutex-64"),
        )
        name = "(14) etcd: 64 callers at least 2x concurrency.Mutex's pairs/s"
        if accord and mutex:
            q = accord.ops_per_s / mutex.ops_per_s
            self.target(
                name,
                q >= 2,
                f"{q:.2f}x: {num(accord.ops_per_s)} vs {num(mutex.ops_per_s)} pairs/s",
            )
        else:
            self.target(name, None, "")
        keep = [r for r in self.get("rust/etcd-keepalive", "rust/etcd-keepalive-pg")]
        krows = []
        for r in keep:
            m = {k: float(v) for k, v in r.metrics.items()}
            messages = m.get("keepalive_messages_per_period", math.nan)
            txns = m.get("txns_per_period", math.nan)
            krows.append(
                [
                    f"`{r.id}`",
                    num(m["leases"]),
                    f"{m['keepalive_ticks']:.0f} ({m['periods']:.1f})",
                    "-" if math.isnan(messages) else f"{messages:.2f}",
                    "-" if math.isnan(txns) else f"{txns:.2f}",
                    f"{m['calls_per_period']:.2f}",
                    f"{m['client_cpu_percent_of_core']:.2f}% of a core",
                ]
            )
        self.table(
            f"{ETCD_TITLE}: keepalive",
            "One client holds the leases (ttl 6 s, renewed every ttl/3) for the window of "
            "scenario 5. Keep-alive messages and transactions: what the members received "
            "(their own /metrics: `grpc_server_msg_received_total` of LeaseKeepAlive, "
            "`grpc_server_handled_total` of Txn), per renewal period; calls: every call the "
            "client made (etcd: gRPC calls and keep-alive messages; PostgreSQL: statements) "
            "per period; CPU: the whole client process (getrusage).",
            [
                "id",
                "leases",
                "ticks (periods)",
                "keep-alive messages/period",
                "txns/period",
                "client calls/period",
                "client CPU",
            ],
            krows,
        )
        r = self.results.get("rust/etcd-keepalive")
        name = "(14) etcd keepalive: one keep-alive message per ttl class per tick"
        if r:
            m = {k: float(v) for k, v in r.metrics.items()}
            per = m["keepalive_messages_per_period"] / m["ttl_classes"]
            # A tick that falls on the window's edge counts in the next period: allow one.
            self.target(
                name,
                per <= (m["periods"] + 1) / m["periods"],
                f"{m['leases']:,.0f} leases in {m['ttl_classes']:.0f} class: "
                f"{per:.2f} keep-alive messages per class and period, "
                f"{m['client_cpu_percent_of_core']:.2f}% CPU",
            )
        else:
            self.target(name, None, "")

    def fenced(self) -> None:
        """Scenario 15: a fenced write against the same UPDATE without the check, the check's
        parts apart, and done_in against a write then done, with their round trips."""
        ids = [
            "rust/fenced-plain",
            "rust/fenced-plain-tx",
            "rust/fenced-plain-tx-pipelined",
            "rust/fenced-helper",
            "rust/fenced-pipelined",
            "rust/fenced-trigger",
            "rust/fenced-lock-only",
            "rust/fenced-check-alone",
        ]
        # Each way to write with the check, and the same write without it.
        unchecked = {
            "rust/fenced-helper": "rust/fenced-plain-tx",
            "rust/fenced-pipelined": "rust/fenced-plain-tx-pipelined",
            "rust/fenced-trigger": "rust/fenced-plain",
        }
        rows: list[list[str]] = []
        for suffix, fsync in self.modes(*ids):
            plain = self.results.get("rust/fenced-plain" + suffix)
            for r in self.get(*(i + suffix for i in ids)):
                twin_id = unchecked.get(r.id.removesuffix(suffix))
                twin = self.results.get(twin_id + suffix) if twin_id else None
                rows.append(
                    [
                        f"`{r.id}`",
                        r.label,
                        fsync,
                        us(r.p50),
                        us(r.p99),
                        num(r.ops_per_s),
                        f"{float(r.metrics.get('app_round_trips', math.nan)):.0f}",
                        ratio(r.p50, plain.p50) if plain else "-",
                        ratio(r.p50, twin.p50) if twin else "-",
                    ]
                )
        self.table(
            FENCED_TITLE,
            "One lease held by accord's Rust core; the application's UPDATE of one row on a "
            "tokio-postgres connection of its own, with and without `check_fence` in its "
            "transaction. `-lock-only` and `-check-alone` are parts, not ways to write: the "
            "lease row locked `FOR SHARE` by a plain SELECT in the pipeline instead of the "
            "function, and the function in a transaction of its own (its row lock gives the "
            "transaction an id, so that commit is flushed too). `-trigger`: the same UPDATE "
            "on a table whose `fenced_write` trigger checks the fence the row carries (the "
            "check inside the one statement). Round trips: on the application's connection "
            "(a pipelined group is one). Ratios: p50 against the UPDATE alone (autocommit), "
            "and against the same write without the check (the same transaction, pipelined "
            "or not; for the trigger, the UPDATE alone), in the same fsync mode.",
            [
                "id",
                "contender",
                "fsync",
                "p50",
                "p99",
                "writes/s",
                "round trips",
                "p50 vs UPDATE",
                "p50 vs no check",
            ],
            rows,
        )
        # The target is on a durable server (issue 34); fsync off is told beside it. Judged
        # on each way to write against the same write without the check: the trigger (one
        # statement, autocommit, against the UPDATE alone) and the pipelined transaction
        # (against BEGIN, UPDATE, COMMIT pipelined); the pipeline against the UPDATE alone is
        # told beside them.
        parts = []
        for suffix, which in (("-fsync", "on"), ("", "off")):
            got = {i: self.results.get(i + suffix) for i in ids}
            if not all(got.values()):
                continue
            plain, plain_piped = (
                got["rust/fenced-plain"],
                got["rust/fenced-plain-tx-pipelined"],
            )
            trigger, piped = got["rust/fenced-trigger"], got["rust/fenced-pipelined"]
            plain_tx, helper = got["rust/fenced-plain-tx"], got["rust/fenced-helper"]
            assert plain and plain_piped and trigger and piped and plain_tx and helper
            quotients = (trigger.p50 / plain.p50, piped.p50 / plain_piped.p50)
            parts.append(
                (
                    which,
                    quotients,
                    (
                        f"fsync {which}: the trigger p50 {quotients[0]:.2f}x of the UPDATE "
                        f"alone ({us(trigger.p50)} vs {us(plain.p50)}); pipelined "
                        f"{quotients[1]:.2f}x of BEGIN, UPDATE, COMMIT pipelined "
                        f"({us(piped.p50)} vs {us(plain_piped.p50)}), "
                        f"{piped.p50 / plain.p50:.2f}x of the UPDATE alone; one round trip "
                        f"each {helper.p50 / plain_tx.p50:.2f}x of BEGIN, UPDATE, COMMIT"
                    ),
                )
            )
        name = (
            "(15) a fenced write (check, UPDATE, commit) within 1.3x of the same write "
            "without the check, fsync on (p50; the trigger and the pipelined transaction)"
        )
        durable = [q for which, q, _ in parts if which == "on"]
        self.target(
            name,
            max(durable[0]) <= 1.3 if durable else None,
            "; ".join(text for _, _, text in parts),
        )
        done_ids = ["rust/done-after-write", "rust/done-in", "rust/done-in-pipelined"]
        drows: list[list[str]] = []
        for suffix, fsync in self.modes(*done_ids):
            for r in self.get(*(i + suffix for i in done_ids)):
                app = float(r.metrics.get("app_round_trips", math.nan))
                own = float(r.metrics.get("accord_statements", math.nan))
                drows.append(
                    [
                        f"`{r.id}`",
                        r.label,
                        fsync,
                        us(r.p50),
                        us(r.p99),
                        f"{app:.0f}",
                        f"{own:.2f}",
                        f"{app + own:.2f}",
                    ]
                )
        self.table(
            f"{FENCED_TITLE}: the result and done",
            "A result written to the application's table and its key marked done: the write "
            "then `Lease::done` (two transactions, two commits: a crash between them leaves "
            "the result without the done), against the write and `done_in` in one transaction "
            "(one commit: both or neither). Round trips on the application's connection, and "
            "statements on accord's own during the op (`done_in` sends none there: the "
            "client's keepalive looks at the lease after it, outside the op). Each op takes a "
            "key of its own, acquired before its clock starts.",
            [
                "id",
                "contender",
                "fsync",
                "p50",
                "p99",
                "app round trips",
                "accord statements",
                "round trips in all",
            ],
            drows,
        )


#: The etcd sections' title (`--only etcd` finds them by it).
ETCD_TITLE = "14. accord on etcd"
#: The fenced writes' sections' title (`--only fenced` finds them by it).
FENCED_TITLE = "15. Fenced writes"
#: What each `--only` rebuilds: its sections' title, its targets' tag, its make target.
ONLY = {
    "etcd": (ETCD_TITLE, "(14)", "make bench-etcd"),
    "fenced": (FENCED_TITLE, "(15)", "make bench-fenced"),
}


def splice(page: str, report: Report, run_time: datetime.datetime, only: str) -> str:
    """`page` (a benchmarks page written before) with the sections and targets of `only`
    replaced by `report`'s: what `--only` writes, when only those rows were measured."""
    title, tag, make = ONLY[only]
    number = int(title.split(".")[0])
    lines = page.rstrip("\n").split("\n")
    targets = [f"- **{verdict(t.met)}**: {t.name} ({t.detail})" for t in report.targets]
    kept = [
        line for line in lines if not (line.startswith("- **") and f": {tag}" in line)
    ]
    at = kept.index("## Reading them") - 1 if "## Reading them" in kept else len(kept)
    kept[at:at] = targets
    out: list[str] = []
    skipping = False
    for line in kept:
        if line.startswith("## "):
            skipping = line.startswith(f"## {title}")
        if not skipping:
            out.append(line)
    sections: list[str] = []
    when = run_time.strftime("%Y-%m-%d %H:%M UTC")
    for i, (title, note, header, rows) in enumerate(report.sections):
        if i == 0:
            note = f"Run alone ({when}, `{make}`), not with the sections above. {note}"
        sections += [f"## {title}", "", note, "", markdown_table(header, rows), ""]
    # Before the first section numbered after this one (14 before 15, whichever ran last),
    # else before the plots.
    later = [
        i
        for i, line in enumerate(out)
        if re.match(r"## (\d+)\w*\. ", line)
        and int(re.match(r"## (\d+)", line)[1]) > number
    ]
    at = (
        later[0]
        if later
        else out.index("## Latency distributions")
        if "## Latency distributions" in out
        else len(out) + 1
    )
    if at > len(out):
        out.append("")
    out[at:at] = sections
    return "\n".join(out).rstrip("\n") + "\n"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def text_table(header: list[str], rows: list[list[str]]) -> str:
    cells = [header] + [[c.replace("`", "") for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells
    )


def command_version(*argv: str) -> str:
    try:
        out = subprocess.run(
            argv, check=False, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (
        (out.stdout or out.stderr).strip().splitlines()[0]
        if out.returncode == 0
        else "?"
    )


def machine() -> list[str]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    return [
        f"CPU: {cpu}, {os.cpu_count()} cores; memory {memory}",
        f"OS: {platform.system()} {platform.release()} ({platform.machine()})",
        f"rustc: {command_version('rustc', '--version')}",
    ]


def plot(results: dict[str, Result], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        (
            "1. uncontended (Rust)",
            [
                "rust/accord",
                "rust/raw-sql",
                "rust/advisory",
                "rust/accord-tls",
                "rust/raw-sql-tls",
            ],
        ),
        (
            "2. 64 tasks (per pair)",
            ["rust/accord-64", "rust/raw-sql-64", "rust/raw-sql-64-pipelined"],
        ),
        ("3. hand-off", ["rust/handoff-accord", "rust/handoff-poll-10ms"]),
        ("4. notify → listen (one at a time)", ["rust/notify"]),
        (
            "6. bindings",
            [
                "rust/accord",
                "c/accord",
                "go/accord",
                "python/accord",
                "python/accord-async",
                "node/accord",
            ],
        ),
        (
            "7. peers",
            [
                "python/accord",
                "python/tooz",
                "python/pals",
                "python/psycopg2-accord-sql",
                "node/accord",
                "node/advisory-lock",
                "node/pg",
                "node/pg-accord-sql",
            ],
        ),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    for ax, (title, ids) in zip(axes.flat, panels):
        for rid in ids:
            r = results.get(rid)
            if not r or not r.latencies_us:
                continue
            xs = sorted(r.latencies_us)
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            ax.plot(xs, ys, label=f"{rid} (p50 {us(r.p50)})", linewidth=1.4)
        ax.set_xscale("log")
        ax.set_title(title)
        ax.set_xlabel("latency (µs, log scale)")
        ax.set_ylabel("fraction of operations ≤ x")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle("accord benchmarks: latency distributions (CDF)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "results", type=Path, help="the folder of the bench programs' JSON"
    )
    parser.add_argument("markdown", type=Path, help="the page to write")
    parser.add_argument("png", help="the plot to write, or - for none")
    parser.add_argument(
        "--only",
        choices=sorted(ONLY),
        help="rebuild only these rows in the page (the others were not measured this time)",
    )
    parser.add_argument(
        "--expect",
        default="",
        help="scenarios whose targets must have been measured, e.g. 1,2",
    )
    args = parser.parse_args()
    results, versions = load(args.results)
    if not results:
        print(f"no results in {args.results}", file=sys.stderr)
        return 1
    report = Report(results)
    if args.only == "etcd":
        report.etcd()
    elif args.only == "fenced":
        report.fenced()
    else:
        report.build()

    printed = []
    for title, _note, header, rows in report.sections:
        printed += ["", title, text_table(header, rows)]
    printed += ["", "Targets"]
    printed += [f"  {verdict(t.met):<13} {t.name}: {t.detail}" for t in report.targets]
    print("\n".join(printed))

    png = None if args.png == "-" else Path(args.png)
    # When the programs wrote their results, not when this page was written from them.
    newest = max(p.stat().st_mtime for p in args.results.glob("*.json"))
    run_time = datetime.datetime.fromtimestamp(newest, datetime.UTC)
    if args.only:
        args.markdown.write_text(
            splice(args.markdown.read_text(), report, run_time, args.only)
        )
        png = None
    else:
        args.markdown.write_text(markdown(report, results, versions, png, run_time))
    if png:
        plot(results, png)
    print(f"\nwrote {args.markdown}" + (f" and {png}" if png else ""))

    expected = {f"({n.strip()})" for n in args.expect.split(",") if n.strip()}
    missing = [
        t.name
        for t in report.targets
        if t.met is None and t.name.split()[0] in expected
    ]
    if missing:
        print(f"not measured: {'; '.join(missing)}", file=sys.stderr)
        return 1
    return 0


READING = [
    (
        "- The floor of scenario 1 is accord's own two statements sent raw: the ratio is what "
        "accord's client adds around them. Session advisory locks (`rust/advisory`, `node/pg`) are "
        "cheaper on the server because they write nothing: no row, no WAL, no commit. They are "
        "also not leases: no fence, no ttl, and the lock vanishes silently with its connection "
        "(a pooler, a restart, a network blip), which is the failure accord exists to prevent. "
        "Against hand-written code with the same guarantees (`*-accord-sql`: accord's statements "
        "through psycopg2 or node-postgres), accord's packages are ahead."
    ),
    (
        "- Each statement costs a round trip to the server process and back; on this machine a "
        "trivial one (`SELECT pg_try_advisory_lock`) takes about 90 µs, most of it two process "
        "wake-ups, so absolute latencies say more about the machine than about any library."
    ),
    (
        "- Scenario 2's pool hands a connection to one statement at a time, as deadpool and every "
        "pool do; accord pipelines the statements of many callers on each connection, which is "
        "why it beats the pool and matches the pipelined floor."
    ),
    (
        "- Binding rows (scenario 6) run after the Rust program, not interleaved with it: ratios "
        "within a few percent of 1 are noise."
    ),
]


def markdown(
    report: Report,
    results: dict[str, Result],
    versions: dict[str, dict[str, str]],
    png: Path | None,
    run_time: datetime.datetime,
) -> str:
    pairs = results["rust/accord"].ops if "rust/accord" in results else "?"
    today = run_time.strftime("%Y-%m-%d %H:%M UTC")
    md = [
        "# Benchmarks",
        "",
        (
            "Written by `make bench` (bench/README.md explains how; bench/report.py wrote this "
            "page). Every figure below comes from one run: one machine, one throwaway "
            "PostgreSQL (scripts/with-postgres.sh: fsync off, loopback TCP, no TLS for any "
            "contender), contenders run one after another and, within a program, interleaved. "
            "Read the ratios, not the absolute figures: they move with the machine."
        ),
        "",
        f"- Run: {today}; {pairs} measured pairs per contender in scenarios 1, 6 and 7",
        *[f"- {line}" for line in machine()],
    ]
    for source, vs in sorted(versions.items()):
        if vs:
            md.append(
                f"- {source}: " + ", ".join(f"{k} {v}" for k, v in sorted(vs.items()))
            )
    md += ["", "## Targets", ""]
    md += [f"- **{verdict(t.met)}**: {t.name} ({t.detail})" for t in report.targets]
    md += ["", "## Reading them", "", *READING]
    for title, note, header, rows in report.sections:
        md += ["", f"## {title}", "", note, "", markdown_table(header, rows)]
    if png:
        md += ["", "## Latency distributions", "", f"![latency CDFs]({png.name})"]
    return "\n".join(md) + "\n"


if __name__ == "__main__":
    sys.exit(main())
