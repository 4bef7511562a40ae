"""The examples run (against the test database), so that they cannot rot."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from support import Clients, Scenario

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(name: str, sc: Scenario, *args: str, namespace: str | None = None) -> str:
    env = {**os.environ, "ACCORD_URL": sc.url, "ACCORD_NAMESPACE": namespace or sc.namespace}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_quickstart_twice_in_a_row(sc: Scenario) -> None:
    """A quick start runs again and again: it resets the key it marks done."""
    for _ in range(2):
        out = run("quickstart.py", sc)
        assert "holding daily/2026-11-22 with fence" in out
        assert "jobs: report ready" in out
        assert "already done" not in out


def test_quickstart_async_twice_in_a_row(sc: Scenario) -> None:
    for _ in range(2):
        out = run("quickstart_async.py", sc)
        assert "holding daily/2026-11-23 with fence" in out
        assert "Message(channel='jobs', payload='report ready')" in out
        assert "already done" not in out


def test_quickstart_in_the_readmes_namespace(sc: Scenario) -> None:
    """In the namespace every language's quick start uses ("reports"), with the same key: after
    the Rust, Node, C or Go quick start, or before them, it holds the key (no Done)."""
    for _ in range(2):
        out = run("quickstart.py", sc, namespace="reports")
        assert "holding daily/2026-11-22 with fence" in out


def test_worker_pool(sc: Scenario, tmp_path: Path) -> None:
    for i in range(30):
        (tmp_path / f"f{i}.txt").write_text("word " * i)
    out = run("worker_pool.py", sc, str(tmp_path))
    # A work pool: offered once, claimed by the workers, every key done.
    assert "offered 30 new files" in out, out
    assert "30 files done, 435 words" in out, out
    assert "(sum 30)" in out
    assert "pool file/: 0 free, 0 held, 30 done" in out, out
    again = run("worker_pool.py", sc, str(tmp_path))  # nothing is redone
    assert "offered 0 new files" in again, again
    assert "(sum 0)" in again and "30 files done, 435 words" in again
    assert "pool file/: 0 free, 0 held, 30 done" in again, again


def test_listener(sc: Scenario, clients: Clients) -> None:
    env = {**os.environ, "ACCORD_URL": sc.url, "ACCORD_NAMESPACE": sc.namespace}
    channel = sc.channel("jobs")
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "listener.py"), channel],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("listening on")
    sender = clients("sender")
    sender.notify(channel, "hello")
    assert proc.stdout.readline().strip() == f"{channel}: hello"
    time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=10)
    assert out.strip() == "bye"
    assert proc.returncode == 0
