"""The chaos run's Python subscriber (chaos/run.py starts it; see docs/reliability.md): one
client that listens on CHAOS_CHANNEL and reads the stream CHAOS_STREAM as the consumer
CHAOS_CONSUMER, until killed.

JSON lines on stdout, in the order the client delivered them:

    {"ev": "listening"}              once `listen` returned (the server confirmed the LISTEN)
    {"ev": "msg", "n": N}            a notification (its payload is the source's number)
    {"ev": "reconnected"}            the listening connection came back: messages may be lost
    {"ev": "entry", "seq": S, "p": P}  a stream event, acked right after the line

The checker holds the listener to the contract of docs/semantics.md (G8): every message it
missed must be announced by a `reconnected` before the next message it got; and the reader to
the streams' one: every event, in seq order, once per subscription.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

import accord


def say(**event: Any) -> None:
    event["t"] = time.time()
    # Two threads print: one whole line at a time.
    with LOCK:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


LOCK = threading.Lock()


def listen(client: accord.Client, channel: str) -> None:
    while True:
        try:
            sub = client.listen(channel)
            break
        except accord.AccordError as e:
            say(ev="error", op="listen", err=str(e)[:200])
            time.sleep(0.2)
    say(ev="listening")
    for event in sub:
        if isinstance(event, accord.Reconnected):
            say(ev="reconnected")
        else:
            say(ev="msg", n=int(event.payload))
    say(ev="error", op="listen", err="the subscription ended")
    os._exit(3)


def read(client: accord.Client, stream: str, consumer: str) -> None:
    while True:
        try:
            sub = client.subscribe(stream, after="earliest", consumer=consumer)
            break
        except accord.AccordError as e:
            say(ev="error", op="subscribe", err=str(e)[:200])
            time.sleep(0.2)
    for event in sub:
        say(ev="entry", seq=event.seq, p=event.payload)
        try:
            sub.ack(event.seq)
        except accord.AccordError as e:  # the next ack stores a later position anyway
            say(ev="error", op="ack", seq=event.seq, err=str(e)[:200])
    say(ev="error", op="read", err="the subscription ended")
    os._exit(3)


def main() -> None:
    url, name = os.environ["CHAOS_URL"], os.environ["CHAOS_NAME"]
    while True:  # the server may be restarting or failing over when a worker starts
        try:
            client = accord.Client.connect(url, namespace=os.environ["CHAOS_NAMESPACE"], owner=name)
            break
        except accord.AccordError as e:
            say(ev="error", op="connect", err=str(e)[:200])
            time.sleep(0.5)
    say(ev="start", w=name)
    threading.Thread(
        target=read,
        args=(client, os.environ["CHAOS_STREAM"], os.environ["CHAOS_CONSUMER"]),
        daemon=True,
    ).start()
    listen(client, os.environ["CHAOS_CHANNEL"])


if __name__ == "__main__":
    main()
