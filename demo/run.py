"""The orchestrator of `make demo`: ten workers (two per language: Rust, Python, Node, C, Go)
share one accord store and process DEMO_TASKS tasks (default 200); one worker is killed while it
holds a task; a live view runs meanwhile, and a summary computed from the store proves the point.

The checks judge from the store, never from a report a killed worker may not have printed: the
kill can land anywhere (between `done` and its report line too), and the summary holds whatever
it interrupted. Workers' report lines are extra evidence where they exist.

    .venv/bin/python demo/run.py          # ACCORD_URL=postgres://… for PostgreSQL;
                                          # default: an SQLite file in a temp directory

Exit status 0 when every check of the summary holds, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Optional

import accord

ROOT = Path(__file__).resolve().parent.parent
TASKS = int(os.environ.get("DEMO_TASKS", "200"))
DEADLINE = float(os.environ.get("DEMO_DEADLINE", "300"))  # seconds before giving up
LANGS = ["rust", "python", "node", "c", "go"]
COMMANDS = {
    "rust": [str(ROOT / "target/debug/examples/demo_worker")],
    "python": [sys.executable, str(ROOT / "demo/worker.py")],
    "node": ["node", str(ROOT / "demo/worker.js")],
    "c": [str(ROOT / "target/demo/worker_c")],
    "go": [str(ROOT / "target/demo/worker_go")],
}
TTY = sys.stdout.isatty() and not os.environ.get("DEMO_PLAIN")
BOLD, DIM, GREEN, RED, YELLOW, RESET = (
    ("\x1b[1m", "\x1b[2m", "\x1b[32m", "\x1b[31m", "\x1b[33m", "\x1b[0m") if TTY else ("",) * 6
)


class Worker:
    def __init__(self, name: str, lang: str, proc: subprocess.Popen[str]) -> None:
        self.name, self.lang, self.proc = name, lang, proc
        self.holding: Optional[tuple[str, int]] = None
        self.done = 0
        self.lost = 0
        self.state = "running"


def read_events(worker: Worker, events: queue.Queue[tuple[str, Any]]) -> None:
    assert worker.proc.stdout is not None
    for line in worker.proc.stdout:
        try:
            events.put(("event", json.loads(line)))
        except json.JSONDecodeError:
            events.put(("noise", (worker.name, line.rstrip())))
    events.put(("eof", worker.name))


def listen(url: str, namespace: str, events: queue.Queue[tuple[str, Any]], stop: threading.Event, ready: threading.Event) -> None:
    try:
        _listen(url, namespace, events, stop, ready)
    except accord.AccordError as e:
        events.put(("notification", f"(listener stopped: {e})"))
        ready.set()


def _listen(url: str, namespace: str, events: queue.Queue[tuple[str, Any]], stop: threading.Event, ready: threading.Event) -> None:
    with accord.Client.connect(url, namespace=namespace, owner="orchestrator-listener") as client:
        with client.listen("demo") as subscription:
            ready.set()
            while not stop.is_set():
                try:
                    event = subscription.recv(timeout=0.2)
                except accord.Timeout:
                    continue
                if isinstance(event, accord.Message):
                    events.put(("notification", event.payload))
                elif event is not None:
                    events.put(("notification", "(listener reconnected: notifications may have been missed)"))


def list_all(client: accord.Client, state: str) -> list[accord.LeaseInfo]:
    items: list[accord.LeaseInfo] = []
    cursor = None
    while True:
        page = client.list("task/", state=state, limit=1000, cursor=cursor)  # type: ignore[arg-type]
        items += list(page)
        if (cursor := page.next_cursor) is None:
            return items


def shown(url: str) -> str:
    """The URL without a password: no user part (postgres://u:p@…, etcd://u:p@…) and no
    etcd `user=`/`password=` parameter values."""
    url = re.sub(r"://[^/?#]*@", "://", url)
    return re.sub(r"([?&](?:user|password)=)[^&#]*", r"\1…", url)


def bar(fraction: float, width: int) -> str:
    full = int(fraction * width)
    return "█" * full + "░" * (width - full)


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="accord-demo-"))
    url = os.environ.get("ACCORD_URL") or f"sqlite:///{tmp}/accord-demo.db"
    namespace = f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    shown_url = shown(url)
    for lang, command in COMMANDS.items():
        exe = command[0] if lang != "python" else command[1]
        if not (shutil.which(exe) or Path(exe).exists()):
            print(f"demo: {lang} worker missing ({exe}); run `make demo`, which builds it", file=sys.stderr)
            return 2

    client = accord.Client.connect(url, namespace=namespace, owner="orchestrator")  # migrates once
    events: queue.Queue[tuple[str, Any]] = queue.Queue()
    stop, ready = threading.Event(), threading.Event()
    listener = threading.Thread(target=listen, args=(url, namespace, events, stop, ready), daemon=True)
    listener.start()
    ready.wait(30)

    start = time.monotonic()
    workers: dict[str, Worker] = {}
    for n in (1, 2):
        for lang in LANGS:
            name = f"{lang}-{n}"
            log = open(tmp / f"{name}.log", "w")
            proc = subprocess.Popen(
                COMMANDS[lang] + [url, namespace, name, str(TASKS)],
                stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT,
            )
            workers[name] = Worker(name, lang, proc)
            threading.Thread(target=read_events, args=(workers[name], events), daemon=True).start()

    notifications: list[str] = []
    done_events: Counter[str] = Counter()
    done_reports: dict[str, list[tuple[str, int]]] = defaultdict(list)  # key -> [(worker, fence)]
    acquired: dict[str, list[tuple[int, str]]] = defaultdict(list)  # key -> [(fence, worker)]
    lost_events: list[dict[str, Any]] = []
    # What each killed worker held: the task it had just reported acquiring when the kill was
    # sent, and whatever the store shows it holding after its death. Either may have been marked
    # done by it before the kill landed; the summary accepts that, or a retake with a larger fence.
    victim_keys: list[tuple[str, str, int]] = []  # (worker, key, fence)
    victims: list[tuple[str, str, int]] = []  # those the store shows held after the death
    killed: set[str] = set()
    open_streams = len(workers)
    drawn = 0
    last_plain = 0.0
    timed_out = False

    def draw(final: bool = False) -> None:
        nonlocal drawn, last_plain
        total = sum(done_events.values())
        elapsed = time.monotonic() - start
        if not TTY:
            if final or time.monotonic() - last_plain >= 2:
                last_plain = time.monotonic()
                per = " ".join(f"{lang}={sum(w.done for w in workers.values() if w.lang == lang)}" for lang in LANGS)
                held = sum(1 for w in workers.values() if w.holding)
                print(f"[{elapsed:5.1f}s] {total}/{TASKS} done, {held} held  ({per})", flush=True)
            return
        lines = [
            f"{BOLD}accord demo{RESET}: {TASKS} tasks, {len(workers)} workers on {shown_url}  {DIM}namespace {namespace}{RESET}",
            f"{bar(total / TASKS, 40)} {total:3}/{TASKS}  {100 * total // TASKS:3}%  {elapsed:5.1f} s",
            "  " + "   ".join(f"{lang} {sum(w.done for w in workers.values() if w.lang == lang):3}" for lang in LANGS),
            f"{DIM}  worker      done  holding now{RESET}",
        ]
        for w in workers.values():
            if w.state == "killed":
                what = f"{RED}killed (SIGKILL){RESET}"
            elif w.state != "running":
                what = f"{DIM}{w.state}{RESET}"
            elif w.holding:
                what = f"{w.holding[0]}  fence {w.holding[1]}"
            else:
                what = f"{DIM}-{RESET}"
            lines.append(f"  {w.name:<10} {w.done:4}  {what}")
        for worker, key, fence in victims:
            lines.append(f"{YELLOW}killed {worker} holding {key} (fence {fence}): free again after its ttl (2 s){RESET}")
        lines.append(f"{DIM}notifications on \"demo\":{RESET}")
        lines += [f"  {message}" for message in notifications[-5:]] or [f"  {DIM}(none yet){RESET}"]
        out = (f"\x1b[{drawn}F\x1b[J" if drawn else "") + "\n".join(lines) + "\n"
        sys.stdout.write(out)
        sys.stdout.flush()
        drawn = len(lines)

    def plain(message: str) -> None:
        if not TTY:
            print(message, flush=True)

    def should_kill(w: Worker) -> bool:
        """Kill a worker as it reports acquiring a task, once 30 % are done: it holds the task
        then (the line is printed after the grant, before the work). A second or third worker
        only if the store showed the first holding nothing after its death (it had marked the
        task done already): the retake is what the demo shows, not what its checks need."""
        return (
            w.state == "running"
            and not victims
            and len(killed) < 3
            and sum(done_events.values()) >= TASKS * 3 // 10
        )

    def kill(victim: Worker, key: str, fence: int) -> None:
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        killed.add(victim.name)
        victim.state = "killed"
        victim.holding = None
        victim_keys.append((victim.name, key, fence))
        # After its death, what it still holds nobody else gets until its ttl expires.
        for info in list_all(client, "held"):
            if info.owner == victim.name:
                victims.append((victim.name, info.key, info.fence))
                if info.key != key:
                    victim_keys.append((victim.name, info.key, info.fence))
                plain(f"killed {victim.name} (SIGKILL) holding {info.key} (fence {info.fence})")
        if not victims:
            plain(f"killed {victim.name} (SIGKILL) after it marked {key} done; killing another")

    while open_streams:
        deadline = time.monotonic() + 0.1
        while True:
            try:
                kind, item = events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if kind == "event":
                w = workers[item["worker"]]
                ev = item["ev"]
                if ev == "acquired":
                    w.holding = (item["key"], item["fence"])
                    acquired[item["key"]].append((item["fence"], w.name))
                    if should_kill(w):
                        kill(w, item["key"], item["fence"])
                elif ev == "done":
                    w.holding = None
                    w.done += 1
                    done_events[item["key"]] += 1
                    done_reports[item["key"]].append((w.name, item["fence"]))
                elif ev == "lost":
                    w.holding = None
                    w.lost += 1
                    lost_events.append(item)
                elif ev == "exit":
                    w.state = "exited"
            elif kind == "notification":
                notifications.append(item)
                plain(f"notification: {item}")
            elif kind == "eof":
                open_streams -= 1
                w = workers[item]
                w.proc.wait()
                if w.state == "running":
                    w.state = "killed" if w.name in killed else f"failed (exit {w.proc.returncode})"
                w.holding = None
            elif kind == "noise":
                plain(f"{item[0]}: {item[1]}")

        draw()
        if time.monotonic() - start > DEADLINE:
            timed_out = True
            for w in workers.values():
                if w.proc.poll() is None:
                    w.proc.kill()
            break
    elapsed = time.monotonic() - start
    time.sleep(0.3)  # let the last notification arrive
    while True:
        try:
            kind, item = events.get_nowait()
        except queue.Empty:
            break
        if kind == "notification":
            notifications.append(item)
    stop.set()
    listener.join(5)
    draw(final=True)

    # The summary, from the store.
    done = list_all(client, "done")
    by_key = {info.key: info for info in done}
    expected = {f"task/{i:03}" for i in range(TASKS)}
    checks: list[tuple[bool, str]] = []
    checks.append((not timed_out, f"finished within {DEADLINE:.0f} s" + (" (TIMED OUT)" if timed_out else f" ({elapsed:.1f} s)")))
    checks.append((set(by_key) == expected and len(done) == TASKS, f"{len(by_key)} of {TASKS} tasks done in the store"))
    # Exactly once, from the store: one done record per task, naming the worker and the fence
    # under which it was marked. Report lines are checked where they exist (none twice, none
    # contradicting the store); a task without one must have been marked by a killed worker,
    # which may have died between its `done` and the report line.
    twice = sorted(k for k, reports in done_reports.items() if len(reports) > 1)
    contradicted = sorted(
        k for k, reports in done_reports.items()
        if k not in by_key or reports[0] != (by_key[k].metadata.get("worker"), by_key[k].fence)
    )
    unreported = sorted(k for k in by_key if k not in done_reports)
    unexplained = [k for k in unreported if by_key[k].metadata.get("worker") not in killed]
    checks.append((
        not twice and not contradicted and not unexplained,
        f"each task completed exactly once ({len(done_reports)} confirmed by their worker's report"
        + (f", {len(unreported)} by a killed worker that could not report" if unreported else "")
        + (f"; twice: {twice[:5]}" if twice else "")
        + (f"; reports contradicting the store: {contradicted[:5]}" if contradicted else "")
        + (f"; done without a report: {unexplained[:5]}" if unexplained else "")
        + ")",
    ))
    results_ok = all(
        info.metadata.get("fence") == info.fence and info.metadata.get("worker") in workers
        for info in done
    )
    checks.append((results_ok, "every result carries the fence under which its task was marked done"))
    stale = [
        k for k, info in by_key.items()
        if acquired.get(k) and info.fence != max(f for f, _ in acquired[k])
    ]
    checks.append((not stale, f"no result written with a stale fence: every result has its task's newest fence"
                   f" ({len(lost_events)} late write(s) refused with LeaseLost)" + (f"; stale: {stale[:5]}" if stale else "")))
    # A killed worker's task: retaken after its ttl with a larger fence, or (when the kill landed
    # after its `done`) marked done by the killed worker itself under its own fence. Never both,
    # never by another worker under the old fence.
    for worker, key, fence in victim_keys:
        info = by_key.get(key)
        if info is None:
            checks.append((False, f"{worker} was killed holding {key} (fence {fence}); not done"))
        elif info.owner != worker and info.fence > fence:
            by = f"{info.metadata.get('worker')} with fence {info.fence}"
            checks.append((True, f"{worker} was killed holding {key} (fence {fence}); retaken after"
                           f" its ttl, completed by {by}"))
        else:
            ok = info.owner == worker == info.metadata.get("worker") and info.fence == fence
            checks.append((ok, f"{worker} was killed after acquiring {key} (fence {fence}); "
                           f"completed by {info.metadata.get('worker')} with fence {info.fence}"
                           + (" before the kill landed" if ok else "")))
    if not victim_keys:
        checks.append((False, "a worker was killed while holding a task"))
    survivors = [w for w in workers.values() if w.name not in killed]
    bad = [f"{w.name}: {w.state}" for w in survivors if w.state != "exited" or w.proc.returncode != 0]
    checks.append((not bad, "the other workers exited cleanly" + (f" (not: {bad}; logs in {tmp})" if bad else "")))

    per_lang = Counter(str(info.metadata.get("lang")) for info in done)
    print()
    print(f"{BOLD}Summary{RESET} (from the store, {url.split('://')[0]}, namespace {namespace})")
    print("  tasks per language: " + ", ".join(f"{lang} {per_lang.get(lang, 0)}" for lang in LANGS))
    print("  tasks per worker:   " + ", ".join(f"{name} {sum(1 for i in done if i.metadata.get('worker') == name)}" for name in workers))
    print(f"  batch notifications received: {len(notifications)}")
    for ok, text in checks:
        print(f"  {GREEN + '✓' if ok else RED + '✗'}{RESET} {text}")
    passed = all(ok for ok, _ in checks)
    print(f"{GREEN}All checks hold.{RESET}" if passed else f"{RED}Some checks failed.{RESET}")
    client.close()
    if passed and "ACCORD_URL" not in os.environ:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
