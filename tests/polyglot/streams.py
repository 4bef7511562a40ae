"""The polyglot stream run (D1, D3, D5 across languages): publishers and subscribers in Rust,
Python and Node processes on one PostgreSQL.

- Concurrent publishers in three languages (each sending ten publishes at once, which its client
  groups into shared statements) append to one stream; subscribers in three languages, started
  before them, each receive every seq from 1 to the last exactly once and in order, with the
  payload that was published for it (compared by SHA-256: any UTF-8, a NUL, quotes, and a
  64 KiB event, from any language to any language). A publisher's later rounds get larger seqs.
- A named consumer killed with SIGKILL between receiving an event and acking it: a consumer of
  the same name in another language starts again at that event (it was never acked), and goes on
  from there.

    ACCORD_TEST_DATABASE_URL=postgres://... .venv/bin/python tests/polyglot/streams.py

Needs the Python package installed in the venv, the Node addon built (node/), and the Rust
worker (`cargo build -p accord --example contend`); `make test-polyglot` does all of it.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import accord

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
#: Bounds a hang, never a speed.
BOUND = 60.0
LANGS = ["rust", "python", "node"]
PER_PUBLISHER = int(os.environ.get("ACCORD_POLYGLOT_EVENTS", "60"))
EXTRA = ["", "nul\u0000byte", "é中🦀", "quote'\"\\$accord$"]
#: 65,536 bytes of UTF-8: the largest event.
BIG = "é" * 32_768

STARTED: list[subprocess.Popen[str]] = []


@dataclass
class Worker:
    lang: str
    process: subprocess.Popen[str]
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    log: list[str] = field(default_factory=list)

    def expect(self, word: str) -> list[str]:
        """The rest of the next line starting with `word` (earlier lines are kept in the log)."""
        deadline = time.monotonic() + BOUND
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise SystemExit(
                    f"✗ {self.lang} worker: no {word} within {BOUND:.0f} s; {self.log[-5:]}"
                ) from None
            self.log.append(line)
            head, *rest = line.split()
            if head == word:
                return rest

    def tell(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()


def start(lang: str, url: str, namespace: str, *args: str) -> Worker:
    contend = os.environ.get(
        "ACCORD_CONTEND", str(REPO / "target/debug/examples/contend")
    )
    command = {
        "rust": [contend, url, namespace, *args],
        "python": [
            sys.executable,
            str(HERE / "stream_worker.py"),
            url,
            namespace,
            *args,
        ],
        "node": ["node", str(HERE / "stream_worker.js"), url, namespace, *args],
    }[lang]
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    STARTED.append(process)
    worker = Worker(lang, process)

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            worker.lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return worker


def sha(payload: str) -> str:
    return hashlib.sha256(payload.encode()).hexdigest()


def publishers_and_subscribers(url: str, tag: str) -> None:
    stream = "events"
    total = PER_PUBLISHER * len(LANGS) + 1
    subscribers = [
        start(lang, url, tag, "subscribe", stream, "-", str(total)) for lang in LANGS
    ]
    publishers = [
        start(lang, url, tag, "publish", stream, str(PER_PUBLISHER), lang)
        for lang in LANGS
    ]
    expected: dict[int, str] = {}
    for p in publishers:
        seqs = []
        for _ in range(PER_PUBLISHER):
            i, seq = (int(x) for x in p.expect("PUBLISHED"))
            seqs.append((i, seq))
            if seq in expected:
                raise SystemExit(f"✗ D1: seq {seq} was given twice ({p.lang})")
            expected[seq] = sha(f"{p.lang}:{i}:{EXTRA[i % 4]}")
        p.expect("DONE")
        # Rounds of ten are sequential: each round's seqs come after the previous round's.
        by_round: dict[int, list[int]] = {}
        for i, seq in seqs:
            by_round.setdefault((i - 1) // 10, []).append(seq)
        rounds = [by_round[r] for r in sorted(by_round)]
        for a, b in itertools.pairwise(rounds):
            if max(a) >= min(b):
                raise SystemExit(
                    f"✗ D1: the {p.lang} publisher's rounds interleave: {a} {b}"
                )
    with accord.Client(url, namespace=tag) as client:
        seq = client.publish(stream, BIG)
    expected[seq] = sha(BIG)
    if sorted(expected) != list(range(1, total + 1)):
        raise SystemExit(f"✗ D1: the seqs published are not 1..{total}")
    for s in subscribers:
        for want in range(1, total + 1):
            got, digest = s.expect("EVENT")
            if int(got) != want:
                raise SystemExit(
                    f"✗ D1: the {s.lang} subscriber got seq {got}, expected {want}"
                )
            if digest != expected[want]:
                raise SystemExit(
                    f"✗ D5: the {s.lang} subscriber got another payload for {want}"
                )
        if s.process.wait(timeout=BOUND) != 0:
            raise SystemExit(f"✗ the {s.lang} subscriber failed")
    print(
        f"✓ D1/D5: {len(LANGS)} publishers ({', '.join(LANGS)}) published {total - 1} events "
        f"at once (+ one of 64 KiB); {len(LANGS)} subscribers each received 1..{total} in order, "
        "every payload as published"
    )


def killed_before_ack(url: str, tag: str) -> None:
    stream = "work"
    with accord.Client(url, namespace=tag) as client:
        client.publish_many(stream, [f"job {i}" for i in range(1, 6)])
    first = start("python", url, tag, "consume-slowly", stream, "k")
    if first.expect("RECEIVED") != ["1"]:
        raise SystemExit("✗ D3: the consumer did not start at seq 1")
    first.tell("ack")
    first.expect("ACKED")
    if first.expect("RECEIVED") != ["2"]:
        raise SystemExit("✗ D3: the consumer did not go on to seq 2")
    # Received 2, not acked: it waits for our line, so the kill lands there.
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(timeout=BOUND)
    again = start("node", url, tag, "consume-slowly", stream, "k")
    got = again.expect("RECEIVED")
    if got != ["2"]:
        raise SystemExit(f"✗ D3: the restarted consumer started at {got}, expected 2")
    again.tell("ack")
    again.expect("ACKED")
    if again.expect("RECEIVED") != ["3"]:
        raise SystemExit("✗ D3: the restarted consumer did not go on to seq 3")
    assert again.process.stdin is not None
    again.process.stdin.close()
    if again.process.wait(timeout=BOUND) != 0:
        raise SystemExit("✗ the node consumer failed")
    print(
        "✓ D3: a Python consumer killed between receiving seq 2 and acking it; "
        "a Node consumer of the same name started again at 2"
    )


def main() -> None:
    url = os.environ["ACCORD_TEST_DATABASE_URL"]
    tag = f"polyglot-streams-{os.getpid()}-{time.time_ns() % 1_000_000}"
    try:
        publishers_and_subscribers(url, tag)
        killed_before_ack(url, tag)
    finally:
        for p in STARTED:
            if p.poll() is None:
                p.kill()
                p.wait()


if __name__ == "__main__":
    main()
