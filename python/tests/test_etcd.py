"""The quick start on etcd: the cluster named by ACCORD_TEST_ETCD_URL (scripts/with-etcd.sh
starts one for `make test`), each test under a key prefix of its own; skipped without it. The
wheel is built with the cargo feature `etcd`."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

import accord
from accord import Message

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture
def etcd_url() -> str:
    url = os.environ.get("ACCORD_TEST_ETCD_URL")
    if not url:
        pytest.skip(
            "ACCORD_TEST_ETCD_URL is not set (an etcd:// URL: scripts/with-etcd.sh starts one)"
        )
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}prefix=/accord-test/py-{uuid.uuid4().hex}"


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        ("quickstart.py", "jobs: report ready"),
        ("quickstart_async.py", "Message(channel='jobs', payload='report ready')"),
    ],
)
def test_quickstart_on_etcd_twice_in_a_row(etcd_url: str, example: str, expected: str) -> None:
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, str(EXAMPLES / example)],
            env={**os.environ, "ACCORD_URL": etcd_url, "ACCORD_NAMESPACE": "reports"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "holding daily/" in done.stdout and expected in done.stdout, done.stdout
        assert "already done" not in done.stdout


def test_a_waiter_is_woken_and_notifications_arrive_on_etcd(etcd_url: str) -> None:
    with (
        accord.Client.connect(etcd_url, namespace="py", owner="o1") as o1,
        accord.Client.connect(etcd_url, namespace="py", owner="o2") as o2,
    ):
        held = o1.acquire("k", ttl=10, timeout=5)
        assert o2.try_acquire("k") is None
        granted: list[accord.Lease] = []
        # Granted once the holder releases: within the wait's 20 s bound, long before the
        # holder's 10 s ttl would free the key by itself.
        waiter = threading.Thread(target=lambda: granted.append(o2.acquire("k", timeout=20)))
        waiter.start()
        held.release()
        waiter.join(60)
        [lease] = granted
        assert lease.fence > held.fence
        lease.done({"rows": 42})
        with pytest.raises(accord.Done):
            o1.try_acquire("k")
        assert o1.reset("k")
        with o2.listen("jobs") as sub:
            o1.notify("jobs", "report ready")
            assert sub.recv(timeout=10) == Message("jobs", "report ready")
