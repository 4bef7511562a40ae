"""Type stubs of the compiled module ``accord._accord`` (re-exported by ``accord``)."""

import asyncio
import builtins
from collections.abc import Iterable, Iterator
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Optional, Union, final

from typing_extensions import Self

from ._aio import Opening

__version__: str

MAX_NAME_BYTES: int
MAX_CHANNEL_BYTES: int
MAX_METADATA_BYTES: int
MIN_TTL: float
MAX_TTL: float
MAX_POOL_SIZE: int
MAX_LIST_LIMIT: int
MAX_OFFER_KEYS: int
MAX_CLAIM_LIMIT: int
MAX_PERMITS: int
ERROR_CODES: tuple[str, ...]
"""The ``code`` of every error kind of the core, in its order: each has its exception class."""

__all__ = [
    "ERROR_CODES",
    "MAX_CHANNEL_BYTES",
    "MAX_CLAIM_LIMIT",
    "MAX_LIST_LIMIT",
    "MAX_METADATA_BYTES",
    "MAX_NAME_BYTES",
    "MAX_OFFER_KEYS",
    "MAX_PERMITS",
    "MAX_POOL_SIZE",
    "MAX_TTL",
    "MIN_TTL",
    "AsyncClient",
    "AsyncLease",
    "AsyncSemaphore",
    "AsyncSubscription",
    "Client",
    "Completer",
    "Lease",
    "LeaseInfo",
    "ListPage",
    "LostSignal",
    "Message",
    "PoolCounts",
    "Reconnected",
    "Semaphore",
    "Subscription",
    "__version__",
    "_error_for_code",
    "migration_sql",
]

_Metadata = dict[str, Any]
"""A JSON object (at most 64 KiB as JSON): values are dict, list, str, int, float, bool, None."""
_State = Literal["held", "free", "done", "all"]
_LeaseStatus = Literal["held", "ending", "released", "done", "lost"]
_LostReason = Literal["not_renewed", "not_recorded", "client_closed", "forked"]

def migration_sql(schema: str = "accord") -> str:
    """The SQL that creates or upgrades accord's schema, for DBAs who apply it by hand."""

def _error_for_code(code: str, message: str) -> BaseException:
    """The exception the module raises for a core error of the kind ``code`` (for tests)."""

@final
class Completer:
    """The asyncio completions of one event loop (internal: made and registered by
    ``accord._aio.new_future``)."""

    def __new__(cls) -> Completer: ...
    @property
    def pid(self) -> int: ...
    @property
    def fd(self) -> int: ...
    def drain(self) -> None: ...

@final
class Message:
    """A notification: what was sent on ``channel``."""

    __match_args__ = ("channel", "payload")
    def __new__(cls, channel: str, payload: str) -> Self: ...
    @property
    def channel(self) -> str: ...
    @property
    def payload(self) -> str: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Reconnected:
    """The listening connection was re-established: notifications may have been missed."""

    def __new__(cls) -> Self: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

_Event = Union[Message, Reconnected]

@final
class LeaseInfo:
    """One key as the coordinator knows it."""

    @property
    def key(self) -> str: ...
    @property
    def state(self) -> Literal["held", "free", "done"]: ...
    @property
    def owner(self) -> Optional[str]: ...
    @property
    def fence(self) -> int: ...
    @property
    def expires_at(self) -> Optional[datetime]: ...
    @property
    def metadata(self) -> _Metadata: ...
    @property
    def updated_at(self) -> datetime: ...
    def __eq__(self, other: object, /) -> bool: ...

@final
class ListPage:
    """One page of ``list``, newest grant first."""

    @property
    def items(self) -> builtins.list[LeaseInfo]: ...
    @property
    def next_cursor(self) -> Optional[str]: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[LeaseInfo]: ...
    def __getitem__(self, index: int, /) -> LeaseInfo: ...

@final
class LostSignal:
    """The lost signal of a ``Lease``, in the style of ``threading.Event``."""

    def is_set(self) -> bool:
        """True once the lease is lost (exact: checked against its deadline)."""
    def __bool__(self) -> bool: ...
    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks until the lease is lost (True), ends otherwise (released, done, dropped:
        False) or ``timeout`` seconds passed (whether it is lost then)."""

@final
class Lease:
    """A held key (sync API), renewed in the background until released, done or lost."""

    @property
    def key(self) -> str: ...
    @property
    def fence(self) -> int:
        """The fencing token of this grant: larger than that of every earlier grant."""
    @property
    def owner(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def ttl(self) -> float: ...
    @property
    def expires_at(self) -> datetime:
        """The expiry the coordinator last confirmed, timezone-aware (UTC)."""
    @property
    def metadata(self) -> _Metadata: ...
    @property
    def is_lost(self) -> bool: ...
    @property
    def status(self) -> _LeaseStatus:
        """Where the lease stands (exact: checked against its deadline)."""
    @property
    def lost_reason(self) -> Optional[_LostReason]:
        """Why the lease was lost; None unless lost."""
    @property
    def lost(self) -> LostSignal:
        """The lost signal: ``is_set()`` (and ``bool()``), ``wait(timeout)``."""
    def wait_lost(self, timeout: Optional[float] = None) -> bool:
        """The same as ``lease.lost.wait(timeout)``."""
    def renew(self, metadata: Optional[_Metadata] = None) -> None: ...
    def release(self) -> None: ...
    def done(self, metadata: Optional[_Metadata] = None) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Literal[False]: ...

@final
class AsyncLease:
    """A held key (asyncio API), renewed in the background until released, done or lost."""

    @property
    def key(self) -> str: ...
    @property
    def fence(self) -> int: ...
    @property
    def owner(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def ttl(self) -> float: ...
    @property
    def expires_at(self) -> datetime: ...
    @property
    def metadata(self) -> _Metadata: ...
    @property
    def is_lost(self) -> bool: ...
    @property
    def status(self) -> _LeaseStatus:
        """Where the lease stands (exact: checked against its deadline)."""
    @property
    def lost_reason(self) -> Optional[_LostReason]:
        """Why the lease was lost; None unless lost."""
    @property
    def lost(self) -> asyncio.Future[None]:
        """Completes when the lease is lost; never for a lease that ends otherwise (released,
        done, or dropped)."""
    async def renew(self, metadata: Optional[_Metadata] = None) -> None: ...
    async def release(self) -> None: ...
    async def done(self, metadata: Optional[_Metadata] = None) -> None: ...
    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Literal[False]: ...

@final
class PoolCounts:
    """How many keys of a work pool are free, held and done (the coordinator's clock)."""

    __match_args__ = ("free", "held", "done")
    def __new__(cls, free: int = 0, held: int = 0, done: int = 0) -> Self: ...
    @property
    def free(self) -> int:
        """Claimable now: never granted, released, or expired."""
    @property
    def held(self) -> int:
        """Held by a live lease."""
    @property
    def done(self) -> int:
        """Marked done."""
    @property
    def total(self) -> int:
        """Every key of the pool: free + held + done."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Semaphore:
    """At most ``limit`` holders of ``name`` at once (sync API); each holds a ``Lease`` on a
    permit key."""

    @property
    def name(self) -> str: ...
    @property
    def limit(self) -> int: ...
    def acquire(
        self,
        timeout: Optional[float] = None,
        *,
        ttl: Optional[float] = None,
        metadata: Optional[_Metadata] = None,
    ) -> Lease:
        """Waits for a permit; raises Timeout after ``timeout`` seconds (None: no limit)."""
    def try_acquire(
        self, *, ttl: Optional[float] = None, metadata: Optional[_Metadata] = None
    ) -> Optional[Lease]:
        """A permit if one is free now, else None."""

@final
class AsyncSemaphore:
    """At most ``limit`` holders of ``name`` at once (asyncio API); each holds an
    ``AsyncLease`` on a permit key."""

    @property
    def name(self) -> str: ...
    @property
    def limit(self) -> int: ...
    def acquire(
        self,
        timeout: Optional[float] = None,
        *,
        ttl: Optional[float] = None,
        metadata: Optional[_Metadata] = None,
    ) -> Opening[AsyncLease]:
        """Waits for a permit; raises Timeout after ``timeout`` seconds (None: no limit)."""
    async def try_acquire(
        self, *, ttl: Optional[float] = None, metadata: Optional[_Metadata] = None
    ) -> Optional[AsyncLease]:
        """A permit if one is free now, else None."""

@final
class Subscription:
    """Notifications on one or more channels (sync API)."""

    @property
    def channels(self) -> builtins.list[str]: ...
    @property
    def closed(self) -> bool: ...
    def recv(self, timeout: Optional[float] = None) -> Optional[_Event]:
        """The next event; None once closed. Raises Timeout, or Closed once the client closed."""
    def __iter__(self) -> Self: ...
    def __next__(self) -> _Event: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Literal[False]: ...

@final
class AsyncSubscription:
    """Notifications on one or more channels (asyncio API)."""

    @property
    def channels(self) -> builtins.list[str]: ...
    @property
    def closed(self) -> bool: ...
    async def recv(self, timeout: Optional[float] = None) -> Optional[_Event]: ...
    def __aiter__(self) -> Self: ...
    async def __anext__(self) -> _Event: ...
    async def close(self) -> None: ...
    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Literal[False]: ...

@final
class Client:
    """A connection to a coordinator (sync API); thread-safe."""

    @staticmethod
    def connect(
        url: str,
        *,
        namespace: Optional[str] = None,
        owner: Optional[str] = None,
        ttl: Optional[float] = None,
        schema: Optional[str] = None,
        pool_size: Optional[int] = None,
        connect_timeout: Optional[float] = None,
        statement_timeout: Optional[float] = None,
        migrate: bool = True,
        application_name: Optional[str] = None,
    ) -> Client: ...
    @property
    def owner(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    @property
    def held_count(self) -> int: ...
    def acquire(
        self,
        key: str,
        *,
        ttl: Optional[float] = None,
        timeout: Optional[float] = None,
        metadata: Optional[_Metadata] = None,
    ) -> Lease: ...
    def try_acquire(
        self, key: str, *, ttl: Optional[float] = None, metadata: Optional[_Metadata] = None
    ) -> Optional[Lease]: ...
    def offer(self, prefix: str, keys: Iterable[str], metadata: Optional[_Metadata] = None) -> int:
        """Offers ``keys`` (each under ``prefix``) to the work pool ``prefix``; how many joined."""
    def claim(
        self,
        prefix: str,
        limit: int = 1,
        *,
        ttl: Optional[float] = None,
        metadata: Optional[_Metadata] = None,
        timeout: Optional[float] = None,
    ) -> builtins.list[Lease]:
        """Up to ``limit`` free keys of the pool; empty when none came (after ``timeout``)."""
    def counts(self, prefix: str) -> PoolCounts: ...
    def semaphore(self, name: str, limit: int) -> Semaphore: ...
    def reset(self, key: str) -> bool: ...
    def list(
        self,
        prefix: Optional[str] = None,
        *,
        state: Optional[_State] = None,
        metadata: Optional[_Metadata] = None,
        limit: int = 100,
        cursor: Optional[str] = None,
    ) -> ListPage: ...
    def notify(self, channel: str, payload: str = "") -> None: ...
    def listen(self, *channels: str) -> Subscription: ...
    def _listening_channels(self) -> builtins.list[str]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Literal[False]: ...

@final
class AsyncClient:
    """A connection to a coordinator (asyncio API)."""

    @staticmethod
    def connect(
        url: str,
        *,
        namespace: Optional[str] = None,
        owner: Optional[str] = None,
        ttl: Optional[float] = None,
        schema: Optional[str] = None,
        pool_size: Optional[int] = None,
        connect_timeout: Optional[float] = None,
        statement_timeout: Optional[float] = None,
        migrate: bool = True,
        application_name: Optional[str] = None,
    ) -> Opening[AsyncClient]: ...
    @property
    def owner(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    @property
    def held_count(self) -> int: ...
    def acquire(
        self,
        key: str,
        *,
        ttl: Optional[float] = None,
        timeout: Optional[float] = None,
        metadata: Optional[_Metadata] = None,
    ) -> Opening[AsyncLease]: ...
    async def try_acquire(
        self, key: str, *, ttl: Optional[float] = None, metadata: Optional[_Metadata] = None
    ) -> Optional[AsyncLease]: ...
    async def offer(
        self, prefix: str, keys: Iterable[str], metadata: Optional[_Metadata] = None
    ) -> int: ...
    async def claim(
        self,
        prefix: str,
        limit: int = 1,
        *,
        ttl: Optional[float] = None,
        metadata: Optional[_Metadata] = None,
        timeout: Optional[float] = None,
    ) -> builtins.list[AsyncLease]: ...
    async def counts(self, prefix: str) -> PoolCounts: ...
    async def semaphore(self, name: str, limit: int) -> AsyncSemaphore: ...
    async def reset(self, key: str) -> bool: ...
    async def list(
        self,
        prefix: Optional[str] = None,
        *,
        state: Optional[_State] = None,
        metadata: Optional[_Metadata] = None,
        limit: int = 100,
        cursor: Optional[str] = None,
    ) -> ListPage: ...
    async def notify(self, channel: str, payload: str = "") -> None: ...
    def listen(self, *channels: str) -> Opening[AsyncSubscription]: ...
    async def _listening_channels(self) -> builtins.list[str]: ...
    async def close(self) -> None: ...
    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Literal[False]: ...
