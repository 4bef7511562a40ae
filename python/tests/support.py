"""Helpers of the scenarios: the test database (plain SQL, for checks and faults), one test's
namespace and names, clients that close themselves, and a TCP proxy that cuts connections."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
import uuid
from datetime import datetime, timedelta
from typing import Any, Optional, Union
from urllib.parse import urlsplit, urlunsplit

import psycopg

import accord

URL = os.environ.get("ACCORD_TEST_DATABASE_URL", "")
#: Bounds a wait, never a speed.
PATIENCE = 20.0


class Database:
    """A plain SQL connection (psycopg) for checks and faults, independent of accord."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.lock = threading.Lock()

    def close(self) -> None:
        self.conn.close()

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with self.lock, self.conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def value(self, sql: str, *params: Any) -> Any:
        return self.rows(sql, *params)[0][0]

    def execute(self, sql: str, *params: Any) -> None:
        self.rows(sql, *params)

    def now(self) -> datetime:
        now: datetime = self.value("SELECT clock_timestamp()")
        return now

    def holder(self, namespace: str, key: str) -> Optional[str]:
        """The owner holding `key` right now by the coordinator's clock, if any."""
        rows = self.rows(
            "SELECT owner FROM accord.leases WHERE namespace = %s AND key = %s"
            " AND NOT done AND expires_at > clock_timestamp()",
            namespace,
            key,
        )
        return rows[0][0] if rows else None

    def terminate(self, application_name: str) -> int:
        """Terminates every server connection with this application_name."""
        count: int = self.value(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s",
            application_name,
        )
        return count

    def connections(self, application_name: str) -> int:
        count: int = self.value(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            application_name,
        )
        return count


class Scenario:
    """One test's namespace, channel names and application names."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.tag = uuid.uuid4().hex[:10]
        self.namespace = f"py-{self.tag}"

    def app_name(self, owner: str) -> str:
        return f"py-{self.tag}:{owner}"

    def channel(self, name: str) -> str:
        return f"{name}_{self.tag}"

    def options(self, owner: str) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "owner": owner,
            "application_name": self.app_name(owner),
        }


class Clients:
    """Sync clients of one scenario, closed at its end."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.made: list[accord.Client] = []

    def __call__(self, owner: str, url: Optional[str] = None, **options: Any) -> accord.Client:
        merged = {**self.sc.options(owner), **options}
        client = accord.Client.connect(url or self.sc.url, **merged)
        self.made.append(client)
        return client

    def close(self) -> None:
        for client in self.made:
            client.close()


class AsyncClients:
    """Async clients of one scenario, closed at its end."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.made: list[accord.AsyncClient] = []

    async def __call__(
        self, owner: str, url: Optional[str] = None, **options: Any
    ) -> accord.AsyncClient:
        merged = {**self.sc.options(owner), **options}
        client = await accord.AsyncClient.connect(url or self.sc.url, **merged)
        self.made.append(client)
        return client

    async def close(self) -> None:
        for client in self.made:
            await client.close()


class Proxy:
    """A TCP proxy in front of the coordinator that can cut every connection (and refuse new
    ones): a dead network, without touching the server."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self.listener = socket.create_server(("127.0.0.1", 0))
        port = self.listener.getsockname()[1]
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@127.0.0.1:{port}" if userinfo else f"127.0.0.1:{port}"
        self.url = urlunsplit(parts._replace(netloc=netloc))
        self.cut = False
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if self.cut:
                conn.close()
                continue
            try:
                upstream = socket.create_connection(self.upstream)
            except OSError:
                conn.close()
                continue
            with self.lock:
                self.sockets += [conn, upstream]
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self.cut:
                data = src.recv(65536)
                if not data or self.cut:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def set_cut(self, cut: bool) -> None:
        self.cut = cut
        if cut:
            with self.lock:
                sockets, self.sockets = self.sockets, []
            for s in sockets:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.set_cut(True)
        self.listener.close()


def seconds_between(a: datetime, b: datetime) -> float:
    return abs((a - b).total_seconds())


def assert_set_between(expires_at: datetime, before: datetime, after: datetime, ttl: float) -> None:
    """`expires_at` was set `ttl` seconds past a moment of the coordinator's clock between
    `before` and `after` (read from it around the call; a second either side for rounding). A
    slow run widens the bracket instead of failing the check."""
    slack = timedelta(seconds=1)
    low, high = before + timedelta(seconds=ttl) - slack, after + timedelta(seconds=ttl) + slack
    assert low <= expires_at <= high, f"{expires_at} is not within [{low}, {high}]"


def until_queued(client: Union[accord.Client, accord.AsyncClient], n: int = 1) -> None:
    """Waits until `client` has `n` acquires (or campaigns) with a place in a key's line: a
    waiter started after that is behind them, with no sleep to hope for it."""
    deadline = time.monotonic() + PATIENCE
    while client.queued_count() < n:
        assert time.monotonic() < deadline, f"no {n} places in line within {PATIENCE} s"
        time.sleep(0.005)


async def until_queued_async(client: accord.AsyncClient, n: int = 1) -> None:
    """`until_queued` for asyncio tests: the event loop runs meanwhile."""
    deadline = time.monotonic() + PATIENCE
    while client.queued_count() < n:
        assert time.monotonic() < deadline, f"no {n} places in line within {PATIENCE} s"
        await asyncio.sleep(0.005)
