"""SIGTERM (what Docker and Kubernetes send to stop a process) runs no ``with`` block and no
``finally``: without a handler, a stopped process's leases and fleet shards stay held until
their ttl passes. So the first client connected in the main thread puts in a handler that
closes every client of the process (releasing leases, leaving memberships and fleets) and
then ends the process as SIGTERM's default does (killed by the signal, no clean-up code run;
as a container's PID 1, which the kernel does not kill that way, with status 143).

It is put in only when SIGTERM still has its default disposition: an application that handles
the signal itself keeps its handler and calls ``accord.close_all()`` from it. A client
connected with ``close_on_sigterm=False`` neither puts it in nor is closed by it.

The handler is the extension's (``python/src/sigterm.rs``), not a Python one: a Python handler
runs only once the main thread runs Python code again, which a main thread blocked in a C call
may never do (a multiprocessing Pool's worker, SIGTERMed by its pool just before it blocked on
the task queue's lock, was seen never to end). So ``signal.getsignal`` still reports
``SIG_DFL``, and an application's ``signal.signal(SIGTERM, ...)`` replaces it.
"""

from __future__ import annotations

import threading

from ._accord import _close_on_sigterm

_decided = False


def install() -> None:
    """Called by every connect with ``close_on_sigterm`` on; acts once per process, in the main
    thread (as in Node, whose worker threads cannot listen for signals: clients connected only
    in other threads are left to a handler of the application's, which calls ``close_all``)."""
    global _decided
    if _decided or threading.current_thread() is not threading.main_thread():
        return
    _decided = True
    _close_on_sigterm()
