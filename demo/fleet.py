"""`make demo-fleet`: a fleet of workers in Rust, Python and Node splits 64 shards live on one
store; a worker is added, one is killed with SIGKILL, and the shards move. The view is drawn from
the store itself (one `list` of the fleet's keys per refresh), never from what workers say; the
checks too: after each change every live worker holds its share (counts within one), no shard
ever showed a smaller fence than before, and a killed worker's shards came back.

    .venv/bin/python demo/fleet.py        # ACCORD_URL=postgres://… for PostgreSQL;
                                          # default: an SQLite file in a temp directory

Settings: DEMO_PLAIN=1 (no ANSI view), DEMO_SHARDS (64), DEMO_DEADLINE (120 s). Exit status 0
when every check holds, 1 otherwise.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import accord

ROOT = Path(__file__).resolve().parent.parent
SHARDS = int(os.environ.get("DEMO_SHARDS", "64"))
DEADLINE = float(os.environ.get("DEMO_DEADLINE", "120"))
TTL_MS, PERIOD_MS = 2000, 400
FLEET = "demo"
PREFIX = f"accord.fleet/{FLEET}/"
TTY = sys.stdout.isatty() and not os.environ.get("DEMO_PLAIN")
COLOURS = [31, 32, 33, 34, 35, 36, 91, 92, 93, 94]
COMMANDS = {
    "rust": [str(ROOT / "target/debug/examples/contend")],
    "python": [sys.executable, str(ROOT / "tests/polyglot/fleet_worker.py")],
    "node": ["node", str(ROOT / "tests/polyglot/fleet_worker.js")],
}


class Worker:
    def __init__(self, lang: str, url: str, namespace: str) -> None:
        args = [url, namespace, FLEET, str(SHARDS), str(TTL_MS), str(PERIOD_MS)]
        if lang == "rust":
            argv = [*COMMANDS[lang], url, namespace, "fleet", *args[2:]]
        else:
            argv = [*COMMANDS[lang], *args]
        self.lang = lang
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
        )
        self.owner = f"{lang}-{self.proc.pid}"


def holders(client: accord.Client) -> dict[str, tuple[str, int]]:
    """Shard → (holder, fence), from the store: one read."""
    page = client.list(PREFIX + "s/", state="held", limit=1000)
    return {
        item.key.removeprefix(PREFIX + "s/"): (item.owner or "?", item.fence)
        for item in page.items
    }


class View:
    def __init__(self) -> None:
        self.colour: dict[str, int] = {}
        self.fences: dict[str, int] = {}
        self.backwards: list[str] = []
        self.phase = ""
        self.log: list[str] = []

    def see(self, held: dict[str, tuple[str, int]]) -> None:
        for shard, (_, fence) in held.items():
            if fence < self.fences.get(shard, 0):
                self.backwards.append(
                    f"shard {shard}: fence {fence} after {self.fences[shard]}"
                )
            self.fences[shard] = max(fence, self.fences.get(shard, 0))

    def draw(self, held: dict[str, tuple[str, int]], workers: list[Worker]) -> None:
        if not TTY:
            return
        for w in workers:
            self.colour.setdefault(w.owner, COLOURS[len(self.colour) % len(COLOURS)])
        out = [
            "\x1b[H\x1b[2J",
            f"\x1b[1maccord fleet demo\x1b[0m: {SHARDS} shards — {self.phase}\n\n",
        ]
        for row in range(0, SHARDS, 16):
            cells = []
            for shard in range(row, min(row + 16, SHARDS)):
                owner = held.get(str(shard), ("", 0))[0]
                code = self.colour.get(owner)
                cells.append(f"\x1b[{code}m██\x1b[0m" if code else "\x1b[2m··\x1b[0m")
            out.append(" ".join(cells) + "\n")
        out.append("\n")
        counts: dict[str, int] = {}
        for owner, _ in held.values():
            counts[owner] = counts.get(owner, 0) + 1
        for w in workers:
            alive = w.proc.poll() is None
            code = self.colour[w.owner]
            status = "" if alive else " \x1b[2m(gone)\x1b[0m"
            out.append(
                f"\x1b[{code}m██\x1b[0m {w.owner:<18} {counts.get(w.owner, 0):>3} shards{status}\n"
            )
        out.append("\n" + "\n".join(self.log[-6:]) + "\n")
        sys.stdout.write("".join(out))
        sys.stdout.flush()

    def say(self, line: str) -> None:
        self.log.append(line)
        if not TTY:
            print(line, flush=True)


def settle(
    client: accord.Client,
    view: View,
    live: list[Worker],
    everyone: list[Worker],
    what: str,
) -> bool:
    view.phase = what
    started = time.monotonic()
    while time.monotonic() - started < DEADLINE:
        held = holders(client)
        view.see(held)
        view.draw(held, everyone)
        owners = {w.owner for w in live}
        counts = [sum(1 for o, _ in held.values() if o == owner) for owner in owners]
        if (
            len(held) == SHARDS
            and all(o in owners for o, _ in held.values())
            and max(counts) - min(counts) <= 1
        ):
            view.say(
                f"✓ {what}: {min(counts)}–{max(counts)} shards each, in {time.monotonic() - started:.1f} s"
            )
            return True
        time.sleep(0.1)
    view.say(f"✗ {what}: not within {DEADLINE:.0f} s")
    return False


def pause(
    client: accord.Client, view: View, everyone: list[Worker], seconds: float
) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        held = holders(client)
        view.see(held)
        view.draw(held, everyone)
        time.sleep(0.1)


def main() -> int:
    url = os.environ.get("ACCORD_URL")
    tmp = None
    if not url:
        tmp = tempfile.mkdtemp(prefix="accord-fleet-demo-")
        url = f"sqlite://{tmp}/demo.db"
    namespace = f"fleet-demo-{os.getpid()}"
    view = View()
    ok = True
    workers: list[Worker] = []
    try:
        with accord.Client.connect(
            url, namespace=namespace, owner="demo-view"
        ) as client:
            workers = [
                Worker(lang, url, namespace)
                for lang in ("rust", "python", "node", "rust")
            ]
            live = list(workers)
            ok &= settle(
                client,
                view,
                live,
                workers,
                "four workers (Rust, Python, Node, Rust) split the shards",
            )
            pause(client, view, workers, 1.5)
            newcomer = Worker("python", url, namespace)
            workers.append(newcomer)
            live.append(newcomer)
            ok &= settle(
                client,
                view,
                live,
                workers,
                f"a fifth worker ({newcomer.owner}) joins: shards are handed off",
            )
            pause(client, view, workers, 1.5)
            victim = next(w for w in live if w.lang == "rust")
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait()
            live.remove(victim)
            view.say(
                f"  {victim.owner} killed with SIGKILL: its shards come back at its ttl ({TTL_MS} ms)"
            )
            ok &= settle(
                client,
                view,
                live,
                workers,
                f"{victim.owner} was killed: its shards are retaken",
            )
            pause(client, view, workers, 1.5)
            for w in live:
                w.proc.send_signal(signal.SIGTERM)
            for w in live:
                try:
                    w.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    w.proc.kill()
                    ok = False
            left = holders(client)
            view.draw(left, workers)
            if left:
                view.say(f"✗ {len(left)} shards still held after every worker closed")
                ok = False
            else:
                view.say("✓ every worker closed and handed its shards back")
            if view.backwards:
                view.say(f"✗ fences went backwards: {view.backwards[:3]}")
                ok = False
            else:
                view.say("✓ every shard's fence only grew")
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.proc.kill()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    if TTY:
        print()
        for line in view.log:
            print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
