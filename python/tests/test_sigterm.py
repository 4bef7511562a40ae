"""SIGTERM (what Docker and Kubernetes send) closes every client of the process, then ends it as
the signal's default does: a stopped member's shards and leases are given back at once. Every
lease here has a ttl of 120 s and every wait is bounded well below it (60 s), so a test can
only pass by a release, never by an expiry. Also: an application's own handler is kept (and
``close_all`` serves it), ``close_on_sigterm=False`` leaves the handler out, and a connect in
another thread leaves it to the main thread."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
from support import Clients, Database, Scenario

import accord
from accord import Fleet

TTL = 120.0
#: Bounds a wait (a hang), far below TTL: only a release can end the waits in time.
HANG = 60.0
SHARDS = 4


def child(code: str, sc: Scenario) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "URL": sc.url, "NS": sc.namespace},
        cwd=tempfile.gettempdir(),  # not python/: `accord` is the installed package
    )


# Holds a lease and every shard of a fleet (alone in it at first), says "ready", then sleeps:
# it never reads another event, so it never agrees to a hand-off (its handoff_timeout is its
# ttl). Only its SIGTERM handler can give anything back before the ttl.
SYNC_MEMBER = """
    import os, time, accord
    c = accord.Client.connect(os.environ["URL"], namespace=os.environ["NS"], owner="child")
    lease = c.acquire("held", ttl=120)
    fleet = c.fleet("f", 4, ttl=120, period=0.2)
    while len(fleet.shards()) < 4:
        fleet.next_event(timeout=20)
    print("ready", flush=True)
    time.sleep(600)
"""

ASYNC_MEMBER = """
    import asyncio, os, accord
    async def main():
        c = await accord.AsyncClient.connect(
            os.environ["URL"], namespace=os.environ["NS"], owner="child")
        lease = await c.acquire("held", ttl=120)
        fleet = await c.fleet("f", 4, ttl=120, period=0.2)
        while len(fleet.shards()) < 4:
            await fleet.next_event(timeout=20)
        print("ready", flush=True)
        await asyncio.sleep(600)
    asyncio.run(main())
"""


def take_all(fleet: Fleet) -> None:
    """Reads the fleet's events until it holds every shard (bounded by HANG)."""
    deadline = time.monotonic() + HANG
    while len(fleet.shards()) < SHARDS and time.monotonic() < deadline:
        with contextlib.suppress(accord.Timeout):
            fleet.next_event(timeout=0.5)
    assert len(fleet.shards()) == SHARDS, f"only {fleet.shards()} back within {HANG} s"


@pytest.mark.parametrize("code", [SYNC_MEMBER, ASYNC_MEMBER], ids=["sync", "asyncio"])
def test_sigterm_gives_back_a_lease_and_a_fleets_shards(
    clients: Clients, admin: Database, sc: Scenario, code: str
) -> None:
    proc = child(code, sc)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line == "ready", (line, proc.stderr.read() if proc.stderr else "")
    # The other member joins while the child holds everything: it asks for hand-offs that the
    # sleeping child never grants.
    other = clients("other", ttl=TTL).fleet("f", SHARDS, ttl=TTL, period=0.2)
    assert admin.holder(sc.namespace, "held") == "child"

    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=HANG)
    # Ended as SIGTERM's default ends a process, after the clients were closed.
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, err)
    assert admin.holder(sc.namespace, "held") is None, "the lease was not released"
    take_all(other)
    other.close()


# Holds a lease, then blocks in a read that nothing ever answers, with SIGTERM blocked in its main
# thread and a thread of its own that takes it. A Python-level handler only runs when the main
# thread next runs Python code, which here it never does: the stand-in, made certain, for a
# multiprocessing Pool's worker that its pool's terminate() SIGTERMed just before it blocked in
# the task queue's lock (sem_wait, which that signal, already taken, no longer interrupts).
BLOCKED_MEMBER = """
    import os, signal, threading, accord
    c = accord.Client.connect(os.environ["URL"], namespace=os.environ["NS"], owner="child")
    lease = c.acquire("held", ttl=120)
    threading.Thread(target=threading.Event().wait, daemon=True).start()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    r, w = os.pipe()
    print("ready", r, flush=True)
    os.read(r, 1)
"""


def wait_blocked_in_read(pid: int, fd: int) -> None:
    """Waits (bounded by HANG) until the main thread of `pid` is blocked in read(fd, _, 1)."""
    syscall = f"/proc/{pid}/task/{pid}/syscall"
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        with open(syscall) as f:
            fields = f.read().split()
        # "<number> <arg1> <arg2> <arg3> ...", or "running"
        if len(fields) > 3 and int(fields[1], 16) == fd and int(fields[3], 16) == 1:
            return
        time.sleep(0.01)
    raise AssertionError(f"the child's main thread is not blocked in read: {fields}")


def test_sigterm_while_the_main_thread_runs_no_python(admin: Database, sc: Scenario) -> None:
    proc = child(BLOCKED_MEMBER, sc)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line[:1] == ["ready"], (line, proc.stderr.read() if proc.stderr else "")
        wait_blocked_in_read(proc.pid, int(line[1]))
        assert admin.holder(sc.namespace, "held") == "child"

        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=HANG)
        assert proc.returncode == -signal.SIGTERM, (proc.returncode, err)
        assert admin.holder(sc.namespace, "held") is None, "the lease was not released"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


# Holds "parent", forks; the forked child connects a client of its own, holds "held" and
# sleeps. The child inherits the handler but not the thread it wakes (that stays in the
# parent): it must get its own, and its SIGTERM must neither close nor end the parent.
FORKING_MEMBER = """
    import os, signal, time, accord
    def connect(owner):
        return accord.Client.connect(os.environ["URL"], namespace=os.environ["NS"], owner=owner)
    parent = connect("parent").acquire("parent", ttl=120)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        lease = connect("child").acquire("held", ttl=120)
        os.write(w, b"x")
        time.sleep(600)
        os._exit(1)
    os.read(r, 1)
    print("ready", pid, flush=True)
    _, status = os.waitpid(pid, 0)
    print("child ended by", os.WTERMSIG(status) if os.WIFSIGNALED(status) else None, flush=True)
    print("parent", parent.status, flush=True)
"""


def test_sigterm_in_a_forked_child_ends_the_child_alone(admin: Database, sc: Scenario) -> None:
    proc = child(FORKING_MEMBER, sc)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line[:1] == ["ready"], (line, proc.stderr.read() if proc.stderr else "")
        os.kill(int(line[1]), signal.SIGTERM)
        out, err = proc.communicate(timeout=HANG)
        assert proc.returncode == 0, (out, err)
        assert out.splitlines() == [f"child ended by {int(signal.SIGTERM)}", "parent held"], err
        # (The parent's own lease ends with it, once it has said it still held it.)
        assert admin.holder(sc.namespace, "held") is None, "the child's lease was not released"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_an_applications_own_handler_is_kept_and_close_all_serves_it(
    admin: Database, sc: Scenario
) -> None:
    proc = child(
        """
        import os, signal, sys, time, accord
        def stop(signum, frame):
            print("closed", accord.close_all(), flush=True)
            sys.exit(7)
        signal.signal(signal.SIGTERM, stop)
        c = accord.Client.connect(os.environ["URL"], namespace=os.environ["NS"], owner="child")
        kept = accord.Client.connect(os.environ["URL"], namespace=os.environ["NS"],
                                     close_on_sigterm=False)
        assert signal.getsignal(signal.SIGTERM) is stop
        lease = c.acquire("held", ttl=120)
        print("ready", flush=True)
        time.sleep(600)
        """,
        sc,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 7, (out, err)
    assert out.strip() == "closed 1", out  # the opted-out client is left to the application
    assert admin.holder(sc.namespace, "held") is None


def test_where_the_handler_is_put_in(sc: Scenario) -> None:
    proc = child(
        """
        import os, signal, threading, accord
        def connect(**options):
            return accord.Client.connect(os.environ["URL"], namespace=os.environ["NS"], **options)
        def handled():
            # The kernel's word (the handler is the extension's: signal.getsignal does not see it)
            caught = next(l for l in open("/proc/self/status") if l.startswith("SigCgt:"))
            return bool(int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
        connect(close_on_sigterm=False)
        print("opted out", handled())
        # Python lets only the main thread set a handler: another thread's connect leaves it.
        worker = threading.Thread(target=connect)
        worker.start()
        worker.join()
        print("other thread", handled())
        connect()
        print("main thread", handled())
        """,
        sc,
    )
    out, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 0, err
    assert out.splitlines() == ["opted out False", "other thread False", "main thread True"]
