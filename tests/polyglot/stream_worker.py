"""A Python worker of the polyglot streams run (tests/polyglot/streams.py): publishes to a
stream, or reads it, and prints one line per step, flushed at once:

    PUBLISHED <i> <seq>        (publish) event i (1..COUNT) was stored with this seq
    DONE                       (publish) every event was published
    EVENT <seq> <sha256>       (subscribe) an event, with the sha256 (hex) of its payload's
                               UTF-8 bytes; acked after the line when a consumer is named
    RECEIVED <seq>             (consume-slowly) an event; the worker then reads a line on
                               standard input (the harness writes "ack"), acks it and says
    ACKED <seq>

    python stream_worker.py URL NAMESPACE publish STREAM COUNT TAG
    python stream_worker.py URL NAMESPACE subscribe STREAM CONSUMER COUNT   (CONSUMER "-": none)
    python stream_worker.py URL NAMESPACE consume-slowly STREAM CONSUMER

Payload i is f"{TAG}:{i}:" followed by EXTRA[i % 4]. The publisher publishes in rounds of 10
concurrent single publishes (asyncio.gather on an AsyncClient). Readers start at "earliest" (a
named consumer: after its last ack). consume-slowly exits when standard input ends.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import queue
import sys
import threading

import accord

#: What follows the "TAG:i:" of each payload: nothing, a NUL, non-ASCII, SQL's quotes.
EXTRA = ["", "nul\u0000byte", "é中🦀", "quote'\"\\$accord$"]
ROUND = 10


def say(line: str) -> None:
    print(line, flush=True)


def owner() -> str:
    return f"python-{os.getpid()}"


async def publish(url: str, namespace: str, stream: str, count: int, tag: str) -> None:
    async with accord.AsyncClient.connect(
        url, namespace=namespace, owner=owner()
    ) as client:
        for start in range(1, count + 1, ROUND):
            round_ = range(start, min(start + ROUND, count + 1))
            seqs = await asyncio.gather(
                *(client.publish(stream, f"{tag}:{i}:{EXTRA[i % 4]}") for i in round_)
            )
            for i, seq in zip(round_, seqs):
                say(f"PUBLISHED {i} {seq}")
    say("DONE")


def subscribe(
    url: str, namespace: str, stream: str, consumer: str | None, count: int
) -> None:
    with accord.Client.connect(url, namespace=namespace, owner=owner()) as client:
        sub = client.subscribe(stream, after="earliest", consumer=consumer)
        for _ in range(count):
            event = sub.next()
            if event is None:
                raise SystemExit("the subscription closed before COUNT events")
            say(
                f"EVENT {event.seq} {hashlib.sha256(event.payload.encode()).hexdigest()}"
            )
            if consumer is not None:
                sub.ack(event.seq)


def consume_slowly(url: str, namespace: str, stream: str, consumer: str) -> None:
    with accord.Client.connect(url, namespace=namespace, owner=owner()) as client:
        sub = client.subscribe(stream, after="earliest", consumer=consumer)
        # The lines of standard input, then None at its end.
        lines: queue.Queue[str | None] = queue.Queue()
        lock = threading.Lock()
        state = {"eof": False, "acking": False}

        def read_stdin() -> None:
            for line in sys.stdin:
                lines.put(line)
            lines.put(None)
            with lock:
                state["eof"] = True
                if not state["acking"]:
                    sub.close()  # a read waiting for the next event returns None

        threading.Thread(target=read_stdin, daemon=True).start()
        for event in sub:
            with lock:
                state["acking"] = True
            say(f"RECEIVED {event.seq}")
            if lines.get() is None:
                return
            sub.ack(event.seq)
            say(f"ACKED {event.seq}")
            with lock:
                state["acking"] = False
                if state["eof"]:
                    return


def main() -> None:
    url, namespace, mode, *args = sys.argv[1:]
    if mode == "publish":
        stream, count, tag = args[0], int(args[1]), args[2]
        asyncio.run(publish(url, namespace, stream, count, tag))
    elif mode == "subscribe":
        stream, consumer, count = args[0], args[1], int(args[2])
        subscribe(url, namespace, stream, None if consumer == "-" else consumer, count)
    elif mode == "consume-slowly":
        stream, consumer = args[0], args[1]
        consume_slowly(url, namespace, stream, consumer)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
