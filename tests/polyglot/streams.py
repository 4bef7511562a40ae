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
worker (`cargo build -p accord-coord --example contend`); `make test-polyglot` does all of it.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import signal
import time

import accord
from procs import BOUND, Worker, spawn, stop_all

LANGS = ["rust", "python", "node"]
PER_PUBLISHER = int(os.environ.get("ACCORD_POLYGLOT_EVENTS", "60"))
EXTRA = ["", "nul\u0000byte", "é中🦀", "quote'\"\\$accord$"]
#: 65,536 bytes of UTF-8: the largest event.
BIG = "é" * 32_768


def start(lang: str, url: str, namespace: str, *args: str) -> Worker:
    return spawn(lang, "stream_worker", url, namespace, *args)


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
    with accord.Client.connect(url, namespace=tag) as client:
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
    with accord.Client.connect(url, namespace=tag) as client:
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
        stop_all()


if __name__ == "__main__":
    main()
