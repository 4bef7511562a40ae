"""asyncio glue the extension module calls into: the parts of the async API that are about
asyncio's cancellation rules rather than about accord.

- ``Opening``: what ``AsyncClient.connect``, ``AsyncClient.acquire``, ``AsyncClient.listen``,
  ``AsyncSemaphore.acquire`` and ``AsyncElection.campaign`` (among others) return: awaitable
  (``lease = await client.acquire("k")``) and an async context manager
  (``async with client.acquire("k") as lease:``).
- ``settle``: a cancelled ``acquire`` (or ``claim``, a semaphore's ``acquire``, an election's
  ``campaign``) returns (raises ``CancelledError``) only after the core made sure nothing it
  may have been granted stays held (scenario L9).
- ``next_event``: a cancelled subscription read loses no notification (nor a stream
  subscription's read an event); the read in flight is kept and answers the next one.
- ``new_future``: the future of an async call and the loop's ``Completer``, whose pipe the
  loop watches so that finished calls settle their futures on the loop's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import weakref
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, Callable, Generic, Optional, TypeVar

from ._accord import Completer

T = TypeVar("T")

_completers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Completer] = (
    weakref.WeakKeyDictionary()
)


def new_future() -> tuple[Completer, asyncio.Future[Any]]:
    """A future of the running loop, and the loop's completer (made on first use, and again
    in a forked child, which must not read its parent's pipe)."""
    loop = asyncio.get_running_loop()
    completer = _completers.get(loop)
    if completer is None or completer.pid != os.getpid():
        if completer is not None:
            loop.remove_reader(completer.fd)
        completer = Completer()
        loop.add_reader(completer.fd, completer.drain)
        _completers[loop] = completer
    return completer, loop.create_future()


class Opening(Coroutine[Any, Any, T], Generic[T]):
    """Awaitable, or an async context manager that closes what it opened on exit.

    A coroutine too (``asyncio.create_task(client.acquire("k"))`` works). Nothing starts
    until it is awaited or entered.
    """

    __slots__ = ("_opened", "_start", "_started")

    def __init__(self, start: Callable[[], Awaitable[T]]) -> None:
        self._start = start
        self._started: Optional[Generator[Any, None, T]] = None
        self._opened: Optional[Any] = None

    def _steps(self) -> Generator[Any, None, T]:
        if self._started is None:
            self._started = self._start().__await__()
        assert self._started is not None
        return self._started

    def __await__(self) -> Generator[Any, None, T]:
        return self._steps()

    def send(self, value: Any) -> Any:
        return self._steps().send(value)

    def throw(self, *args: Any) -> Any:
        return self._steps().throw(*args)

    def close(self) -> None:
        if self._started is not None:
            self._started.close()

    async def __aenter__(self) -> T:
        opened: Any = await self._start()
        self._opened = opened
        return await opened.__aenter__()  # type: ignore[no-any-return]

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Optional[bool]:
        opened, self._opened = self._opened, None
        if opened is None:
            return None
        return await opened.__aexit__(exc_type, exc, tb)  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return "<accord.Opening>"


async def _finish(aw: Awaitable[Any]) -> asyncio.Future[Any]:
    """Waits for ``aw`` to complete even while the calling task is being cancelled again."""
    future = asyncio.ensure_future(aw)
    while not future.done():
        # Already on the way out because of a cancellation: finish the clean-up first.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait((future,))
    return future


async def settle(future: asyncio.Future[T], cancel: Callable[[], None], undo: str = "release") -> T:
    """Awaits an acquire; when the caller is cancelled, cancels the core's acquire and waits
    until it returned, giving back what was granted in the meantime (its method ``undo``:
    a lease's ``release``, a leadership's ``resign``) before re-raising."""
    try:
        await asyncio.wait((future,))
    except asyncio.CancelledError:
        cancel()
        await _finish(future)
        if not future.cancelled() and future.exception() is None:
            granted: Any = future.result()
            for lease in granted if isinstance(granted, list) else [granted]:
                release = await _finish(getattr(lease, undo)())
                if not release.cancelled():
                    release.exception()  # retrieved, so that asyncio does not log it
        raise
    return future.result()


async def settle_started(start: Callable[[], asyncio.Future[T]], cancel: Callable[[], None]) -> T:
    """``settle`` for a call that starts only once awaited (``AsyncClient.claim``, whose
    granted leases are a list)."""
    return await settle(start(), cancel)


async def next_event(
    sub: Any, timeout: Optional[float], iterating: bool, what: str = "notification"
) -> Any:
    """The next event of an AsyncSubscription (or AsyncStreamSubscription): ``None`` once it is
    closed (or ``StopAsyncIteration`` when iterating); ``accord.Timeout``, saying no ``what``
    came, after ``timeout`` seconds."""
    future = sub._next_future()
    try:
        done, _ = await asyncio.wait((future,), timeout=timeout)
    except asyncio.CancelledError:
        sub._keep(future)
        raise
    if not done:
        sub._keep(future)
        from ._errors import Timeout

        raise Timeout(f"no {what} within {timeout} s")
    event = future.result()
    if event is None and iterating:
        raise StopAsyncIteration
    return event


async def ready(value: T) -> T:
    return value


async def exit_lease(release: Awaitable[None], body_failed: bool) -> bool:
    """``AsyncLease.__aexit__``: releases; a release error (``LeaseLost``: the critical section
    was not protected to its end) is raised unless the body already raised."""
    from ._errors import AccordError

    try:
        await release
    except AccordError:
        if not body_failed:
            raise
    return False


async def exit_closing(close: Awaitable[None]) -> bool:
    await close
    return False


async def stop_at_none(read: Awaitable[Optional[T]]) -> T:
    """``__anext__`` of a fleet or a member watch: the read's answer, or
    ``StopAsyncIteration`` when it is None (closed)."""
    value = await read
    if value is None:
        raise StopAsyncIteration
    return value
