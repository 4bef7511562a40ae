"""O2 from Python: failover to a synchronous standby. One URL names both nodes with
target_session_attrs=read-write; the primary is stopped (immediate) and the standby promoted.
The same clients follow: the held lease renews on the new primary, the waiter gets the key
when it is released (with a larger fence), the listener reports Reconnected and hears what is
sent afterwards, and a write fenced by the old grant is refused.

Runs under `scripts/failover-pair.sh run` (`make test-failover`); skipped without it."""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid

import psycopg
import pytest

from accord import Client, Lease, Message, Reconnected

URL = os.environ.get("ACCORD_TEST_FAILOVER_URL", "")
CTL = os.environ.get("ACCORD_TEST_FAILOVER_CTL", "")

pytestmark = pytest.mark.skipif(not URL, reason="run under scripts/failover-pair.sh")


def ctl(*args: str) -> str:
    done = subprocess.run([CTL, *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"failover-pair.sh {args}: {done.stderr}"
    return done.stdout.strip()


def fenced_write(key: str, fence: int) -> bool:
    """A write to the resource the lease protects, accepted only with a larger fence than any
    before, on whichever node is the primary now."""
    with psycopg.connect(URL, autocommit=True) as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS failover_resource_py"
            " (key text PRIMARY KEY, fence bigint NOT NULL)"
        )
        row = db.execute(
            "INSERT INTO failover_resource_py AS r VALUES (%s, %s)"
            " ON CONFLICT (key) DO UPDATE SET fence = excluded.fence"
            " WHERE r.fence < excluded.fence RETURNING fence",
            (key, fence),
        ).fetchone()
        return row is not None


def test_o2_python_clients_follow_a_promoted_standby() -> None:
    ns = f"o2py_{uuid.uuid4().hex[:8]}"
    holder = Client.connect(URL, namespace=ns, owner="holder", ttl=10)
    waiter = Client.connect(URL, namespace=ns, owner="waiter", ttl=10)
    try:
        channel = f"{ns}_ch"
        sub = waiter.listen(channel)
        lease = holder.acquire("resource")
        assert fenced_write("resource", lease.fence)
        got: list[Lease | BaseException] = []

        def wait() -> None:
            try:
                got.append(waiter.acquire("resource", timeout=60))
            except BaseException as e:  # reported by the test, not lost in the thread
                got.append(e)

        thread = threading.Thread(target=wait)
        thread.start()
        deadline = time.monotonic() + 10
        while waiter.queued_count() != 1:
            assert time.monotonic() < deadline, "the waiter took no place in line"
            time.sleep(0.02)

        old = ctl("primary")
        new = "b" if old == "a" else "a"
        ctl("stop", old, "immediate")
        ctl("promote", new)
        assert ctl("primary") == new

        assert sub.recv(timeout=30) == Reconnected()
        holder.notify(channel, "after")
        assert sub.recv(timeout=10) == Message(channel, "after")

        lease.renew()
        assert not got, f"the waiter got a held key: {got}"
        old_fence = lease.fence
        lease.release()
        thread.join(timeout=30)
        assert not thread.is_alive(), "the waiter was not woken"
        (next_lease,) = got
        assert isinstance(next_lease, Lease), next_lease
        assert next_lease.fence > old_fence
        assert fenced_write("resource", next_lease.fence)
        assert not fenced_write("resource", old_fence), "a stale fence was accepted"
        next_lease.release()
        sub.close()
        ctl("standby", old)
    finally:
        holder.close()
        waiter.close()
