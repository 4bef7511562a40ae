"""SIGTERM (what Docker and Kubernetes send to stop a process) runs no ``with`` block and no
``finally``: without a handler, a stopped process's leases and fleet shards stay held until
their ttl passes. So the first client connected in the main thread puts in a handler that
closes every client of the process (releasing leases, leaving memberships and fleets) and
then ends the process as SIGTERM's default does (killed by the signal, no clean-up code run;
as a container's PID 1, which the kernel does not kill that way, with status 143).

It is put in only when SIGTERM still has its default disposition: an application that handles
the signal itself keeps its handler and calls ``accord.close_all()`` from it. A client
connected with ``close_on_sigterm=False`` neither puts it in nor is closed by it. A
multiprocessing worker (a process with a multiprocessing parent) does not put it in: its parent
ends it.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType

from ._accord import close_all

_decided = False


def install() -> None:
    """Called by every connect with ``close_on_sigterm`` on; acts once per process, in the main
    thread (the only one Python lets set a handler; a connect in another thread leaves it to a
    later one in the main thread)."""
    global _decided
    if _decided or threading.current_thread() is not threading.main_thread():
        return
    _decided = True
    # A multiprocessing worker is its parent's to end: a Pool ends its workers with SIGTERM and
    # waits for them, and a pool worker under this handler was seen, now and then, not to end
    # (the suite's spawn-pool tests hung in the pool's join; cause not yet found). Its clients
    # close in their own `with` blocks; the parent process keeps the handler.
    import multiprocessing  # at the first connect, not at `import accord`

    if multiprocessing.parent_process() is not None:
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _close_then_end)


def _close_then_end(signum: int, frame: FrameType | None) -> None:
    close_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.raise_signal(signal.SIGTERM)
    # Still here: the process is a container's first (PID 1), for which the kernel ignores
    # a signal left to its default. The stop was asked for all the same: end as a shell
    # reports a SIGTERM'd process.
    os._exit(128 + signal.SIGTERM)
