"""Functions run in other processes (multiprocessing with the spawn start method)."""

from __future__ import annotations

import os
import time
from typing import Optional

import accord


def take_turn(url: str, namespace: str, key: str) -> int:
    """Acquires `key` in a fresh process, holds it briefly, releases it; returns the fence."""
    owner = f"spawned-{os.getpid()}"
    with accord.Client.connect(url, namespace=namespace, owner=owner) as c:
        lease = c.acquire(key, ttl=30, timeout=30)
        with lease:
            time.sleep(0.02)
        return lease.fence


def try_held(url: str, namespace: str, key: str) -> Optional[int]:
    """try_acquire of a key the parent holds: None expected."""
    with accord.Client.connect(url, namespace=namespace, owner=f"spawned-{os.getpid()}") as c:
        lease = c.try_acquire(key)
        return None if lease is None else lease.fence


def hold_until_ended(url: str, namespace: str, key: str) -> None:
    """Holds `key` (ttl 120 s) and sleeps until the process is ended."""
    c = accord.Client.connect(url, namespace=namespace, owner=f"spawned-{os.getpid()}")
    lease = c.acquire(key, ttl=120)  # held while referenced
    time.sleep(600)
    lease.release()
