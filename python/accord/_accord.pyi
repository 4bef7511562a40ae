"""Type stubs of the compiled module ``accord._accord`` (re-exported by ``accord``)."""

import asyncio
import builtins
from collections.abc import Iterable, Iterator
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Optional, Union, final, overload

import psycopg
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
MAX_SHARDS: int
MAX_HANDOFFS_PER_PERIOD: int
MIN_PERIOD: float
MAX_EVENT_BYTES: int
MAX_PUBLISH_EVENTS: int
MAX_PAGE_SIZE: int
ERROR_CODES: tuple[str, ...]
"""The ``code`` of every error kind of the core, in its order: each has its exception class."""

__all__ = [
    "ERROR_CODES",
    "MAX_CHANNEL_BYTES",
    "MAX_CLAIM_LIMIT",
    "MAX_EVENT_BYTES",
    "MAX_HANDOFFS_PER_PERIOD",
    "MAX_LIST_LIMIT",
    "MAX_METADATA_BYTES",
    "MAX_NAME_BYTES",
    "MAX_OFFER_KEYS",
    "MAX_PAGE_SIZE",
    "MAX_PERMITS",
    "MAX_POOL_SIZE",
    "MAX_PUBLISH_EVENTS",
    "MAX_SHARDS",
    "MAX_TTL",
    "MIN_PERIOD",
    "MIN_TTL",
    "Assigned",
    "AsyncClient",
    "AsyncElection",
    "AsyncFleet",
    "AsyncLeadership",
    "AsyncLease",
    "AsyncMember",
    "AsyncMemberWatch",
    "AsyncObserver",
    "AsyncSemaphore",
    "AsyncStreamSubscription",
    "AsyncSubscription",
    "Client",
    "Completer",
    "Election",
    "Fleet",
    "Histogram",
    "Joined",
    "Leader",
    "Leadership",
    "Lease",
    "LeaseInfo",
    "Left",
    "ListPage",
    "LostSignal",
    "Member",
    "MemberInfo",
    "MemberWatch",
    "Members",
    "Message",
    "Observer",
    "PoolCounts",
    "Reconnected",
    "Revoked",
    "Semaphore",
    "ShardLease",
    "Stats",
    "StreamEvent",
    "StreamInfo",
    "StreamSubscription",
    "Subscription",
    "Updated",
    "__version__",
    "_close_on_sigterm",
    "_error_for_code",
    "_fenced_refusal",
    "close_all",
    "migration_sql",
]

_Metadata = dict[str, Any]
"""A JSON object (at most 64 KiB as JSON): values are dict, list, str, int, float, bool, None."""
_State = Literal["held", "free", "done", "all"]
_LeaseStatus = Literal["held", "ending", "released", "done", "lost"]
_LostReason = Literal["not_renewed", "not_recorded", "client_closed", "forked"]
_RevokeReason = Literal["handoff", "lost", "closed"]
_After = Union[Literal["latest", "earliest"], int]
#: The placeholders of a fenced-write statement: PostgreSQL's ``$1``, or DB-API's ``%s``.
_Placeholders = Literal["$1", "%s"]
#: The application's connection for fenced writes: psycopg 3's (typed here), psycopg2's
#: connection or cursor (sync) or asyncpg's Connection (asyncio), untyped here: accord depends
#: on none of them.
_Conn = Union[psycopg.Connection[Any], psycopg.Cursor[Any], Any]
_AsyncConn = Union[psycopg.AsyncConnection[Any], psycopg.AsyncCursor[Any], Any]
"""Where a subscription starts: only events published from now on, the oldest the stream
still holds, or after this seq."""

def migration_sql(schema: str = "accord") -> str:
    """The SQL that creates or upgrades accord's schema, for DBAs who apply it by hand."""

def close_all() -> int:
    """Closes every open client of this process (those connected with
    ``close_on_sigterm=False`` aside) as ``close()`` does, and returns how many: what the
    SIGTERM handler runs, for programs that handle the signal themselves."""

def _close_on_sigterm() -> bool:
    """Puts in the SIGTERM handler (see ``accord/_sigterm.py``) if SIGTERM has its default
    disposition; returns whether it did."""

def _error_for_code(code: str, message: str) -> BaseException:
    """The exception the module raises for a core error of the kind ``code`` (for tests)."""

def _fenced_refusal(what: str, sqlstate: str, message: str) -> BaseException:
    """accord's exception for a fenced statement the server refused with ``sqlstate``
    (``LeaseLost`` for AC001), the core's mapping (for ``accord/_fenced.py``)."""

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
    @property
    def shared(self) -> bool:
        """One of the key's shared holders (listed once per holder)."""
    def __eq__(self, other: object, /) -> bool: ...

@final
class ListPage:
    """One page of ``list``, in key order."""

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
    def shared(self) -> bool:
        """One of the key's shared holders: it renews and releases, but cannot change the
        key's metadata or mark it done (InvalidArgument)."""
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
    def fenced(self, conn: _Conn) -> None:
        """Checks this lease in the application's transaction (a psycopg 3 or psycopg2
        connection or cursor), before its writes: they then commit before any later grant of
        the key. LeaseLost when the lease is not the key's live grant: roll back."""
    def done_in(
        self,
        conn: _Conn,
        metadata: Optional[_Metadata] = None,
    ) -> _Metadata:
        """Marks the key done in the application's transaction, merging ``metadata``; returns
        the key's metadata. After the commit the lease ends as "done", after a rollback it is
        still held."""
    @overload
    def fence_check_sql(
        self, *, placeholders: _Placeholders = "$1", typed: Literal[False] = False
    ) -> tuple[str, list[Optional[str]]]:
        """The statement ``fenced`` runs (``accord.check_fence``) for a driver of your own: its
        text (``$1``, ``$2``, …, or ``placeholders="%s"``: DB-API's ``%s``, any other ``%``
        doubled) and parameters as strings (``typed``: str, int or None, for drivers that bind
        by type). LeaseLost when the lease is already not held here; Unsupported on the
        embedded store."""
    @overload
    def fence_check_sql(
        self, *, placeholders: _Placeholders = "$1", typed: bool
    ) -> tuple[str, list[Union[str, int, None]]]: ...
    @overload
    def done_sql(
        self,
        metadata: Optional[_Metadata] = None,
        *,
        placeholders: _Placeholders = "$1",
        typed: Literal[False] = False,
    ) -> tuple[str, list[Optional[str]]]:
        """The statement ``done_in`` runs (``accord.done``; it answers the key's metadata as
        JSON text) for a driver of your own; then call ``done_sent()``. ``placeholders`` and
        ``typed`` as ``fence_check_sql``'s."""
    @overload
    def done_sql(
        self,
        metadata: Optional[_Metadata] = None,
        *,
        placeholders: _Placeholders = "$1",
        typed: bool,
    ) -> tuple[str, list[Union[str, int, None]]]: ...
    def done_sent(self) -> None:
        """Says that ``done_sql()``'s statement ran in the application's transaction: the
        lease settles as done at once after the commit, renewed as before after a rollback."""
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
    def shared(self) -> bool:
        """One of the key's shared holders: it renews and releases, but cannot change the
        key's metadata or mark it done (InvalidArgument)."""
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
    async def fenced(self, conn: _AsyncConn) -> None:
        """``Lease.fenced`` for psycopg 3's async connection or cursor, or an asyncpg
        connection."""
    async def done_in(
        self,
        conn: _AsyncConn,
        metadata: Optional[_Metadata] = None,
    ) -> _Metadata:
        """``Lease.done_in`` for psycopg 3's async connection or cursor, or an asyncpg
        connection."""
    @overload
    def fence_check_sql(
        self, *, placeholders: _Placeholders = "$1", typed: Literal[False] = False
    ) -> tuple[str, list[Optional[str]]]:
        """The statement ``fenced`` runs (``accord.check_fence``) for a driver of your own: its
        text (``$1``, ``$2``, …, or ``placeholders="%s"``: DB-API's ``%s``, any other ``%``
        doubled) and parameters as strings (``typed``: str, int or None, for drivers that bind
        by type). LeaseLost when the lease is already not held here; Unsupported on the
        embedded store."""
    @overload
    def fence_check_sql(
        self, *, placeholders: _Placeholders = "$1", typed: bool
    ) -> tuple[str, list[Union[str, int, None]]]: ...
    @overload
    def done_sql(
        self,
        metadata: Optional[_Metadata] = None,
        *,
        placeholders: _Placeholders = "$1",
        typed: Literal[False] = False,
    ) -> tuple[str, list[Optional[str]]]:
        """The statement ``done_in`` runs (``accord.done``; it answers the key's metadata as
        JSON text) for a driver of your own; then call ``done_sent()``. ``placeholders`` and
        ``typed`` as ``fence_check_sql``'s."""
    @overload
    def done_sql(
        self,
        metadata: Optional[_Metadata] = None,
        *,
        placeholders: _Placeholders = "$1",
        typed: bool,
    ) -> tuple[str, list[Union[str, int, None]]]: ...
    def done_sent(self) -> None:
        """Says that ``done_sql()``'s statement ran in the application's transaction: the
        lease settles as done at once after the commit, renewed as before after a rollback."""
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
class MemberInfo:
    """One member of a group, as ``members()`` and a watch report it."""

    @property
    def owner(self) -> str:
        """The member's owner (its client's owner)."""
    @property
    def metadata(self) -> _Metadata:
        """The member's metadata, as it last set it."""
    @property
    def since(self) -> datetime:
        """When it joined, by the coordinator's clock (timezone-aware, UTC)."""
    @property
    def fence(self) -> int:
        """The fence of its member lease: a member that joined again has a new one."""
    @property
    def expires_at(self) -> Optional[datetime]:
        """When its member lease expires unless renewed (the coordinator's clock)."""
    def __eq__(self, other: object, /) -> bool: ...

@final
class Members:
    """A watch's first event: the members of the group when it started, oldest first."""

    __match_args__ = ("members",)
    @property
    def members(self) -> builtins.list[MemberInfo]: ...
    def __eq__(self, other: object, /) -> bool: ...

@final
class Joined:
    """A member joined the group."""

    __match_args__ = ("member",)
    @property
    def member(self) -> MemberInfo: ...
    def __eq__(self, other: object, /) -> bool: ...

@final
class Left:
    """A member left the group: it left, its client closed, or its lease expired."""

    __match_args__ = ("member",)
    @property
    def member(self) -> MemberInfo: ...
    def __eq__(self, other: object, /) -> bool: ...

@final
class Updated:
    """A member replaced its metadata: the member as it is now (updates between two reads of
    the watch come as one, with the latest metadata)."""

    __match_args__ = ("member",)
    @property
    def member(self) -> MemberInfo: ...
    def __eq__(self, other: object, /) -> bool: ...

_MemberEvent = Union[Members, Joined, Left, Updated]

@final
class Member:
    """Membership of a group (sync API), kept by the client's keepalive; a context manager
    that leaves at the end of the block."""

    @property
    def group(self) -> str: ...
    @property
    def key(self) -> str:
        """The key of the member lease (``accord.group/<group>/<owner>``)."""
    @property
    def fence(self) -> int: ...
    @property
    def owner(self) -> str: ...
    @property
    def ttl(self) -> float: ...
    @property
    def status(self) -> _LeaseStatus:
        """The member lease's status ("released" once left)."""
    @property
    def lost_reason(self) -> Optional[_LostReason]: ...
    @property
    def is_lost(self) -> bool: ...
    @property
    def lost(self) -> LostSignal:
        """The lost signal: ``is_set()`` (and ``bool()``), ``wait(timeout)``."""
    def update_metadata(self, metadata: _Metadata) -> None:
        """Replaces the member's metadata (what ``members`` shows), renewing it; watchers see
        ``Updated``."""
    def leave(self) -> None:
        """Leaves the group now; leaving again is harmless. Raises LeaseLost if lost."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Literal[False]: ...

@final
class AsyncMember:
    """Membership of a group (asyncio API); ``async with`` leaves at the end of the block."""

    @property
    def group(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def fence(self) -> int: ...
    @property
    def owner(self) -> str: ...
    @property
    def ttl(self) -> float: ...
    @property
    def status(self) -> _LeaseStatus: ...
    @property
    def lost_reason(self) -> Optional[_LostReason]: ...
    @property
    def is_lost(self) -> bool: ...
    @property
    def lost(self) -> asyncio.Future[None]:
        """Completes when the membership is lost; never for one that ends otherwise."""
    async def update_metadata(self, metadata: _Metadata) -> None: ...
    async def leave(self) -> None: ...
    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Literal[False]: ...

@final
class MemberWatch:
    """The members of a group, then every change (sync API); iteration ends once closed."""

    @property
    def closed(self) -> bool: ...
    def next(self, timeout: Optional[float] = None) -> _MemberEvent:
        """The next event; raises Timeout after ``timeout`` seconds, Closed once closed."""
    def __iter__(self) -> Self: ...
    def __next__(self) -> _MemberEvent: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Literal[False]: ...

@final
class AsyncMemberWatch:
    """The members of a group, then every change (asyncio API); ``async for`` ends once
    closed."""

    @property
    def closed(self) -> bool: ...
    async def next(self, timeout: Optional[float] = None) -> _MemberEvent: ...
    def __aiter__(self) -> Self: ...
    async def __anext__(self) -> _MemberEvent: ...
    async def close(self) -> None: ...
    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Literal[False]: ...

@final
class ShardLease:
    """A shard's lease as a fleet's user sees it (the fleet holds, renews and releases it)."""

    @property
    def shard(self) -> str: ...
    @property
    def key(self) -> str:
        """The key of its lease (``accord.fleet/<name>/s/<shard>``)."""
    @property
    def fence(self) -> int:
        """The fence of this grant of the shard: larger than every earlier grant's."""
    @property
    def status(self) -> _LeaseStatus: ...
    @property
    def lost_reason(self) -> Optional[_LostReason]: ...
    @property
    def is_lost(self) -> bool: ...
    @property
    def lost(self) -> LostSignal: ...

@final
class Assigned:
    """This member now holds ``shard``; ``lease.fence`` is its fence."""

    __match_args__ = ("shard", "lease")
    @property
    def shard(self) -> str: ...
    @property
    def lease(self) -> ShardLease: ...

@final
class Revoked:
    """This member no longer holds ``shard`` (for "handoff": once the next event is asked
    for, or the hand-off timeout passed)."""

    __match_args__ = ("shard", "reason", "fence")
    @property
    def shard(self) -> str: ...
    @property
    def reason(self) -> _RevokeReason: ...
    @property
    def fence(self) -> int:
        """The fence of the grant revoked."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

_FleetEvent = Union[Assigned, Revoked]

@final
class Fleet:
    """A member of a fleet (sync API): iterate it for its events; asking for the next one
    acknowledges the previous (a hand-off is released then). ``close`` hands every shard
    back; a context manager that closes it at the end of the block."""

    @property
    def name(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def shards(self) -> builtins.list[str]:
        """The shards this member holds now, in name order."""
    def members(self) -> builtins.list[MemberInfo]: ...
    def next_event(self, timeout: Optional[float] = None) -> Optional[_FleetEvent]:
        """The next event; None once closed and every event was read. Raises Timeout."""
    def __iter__(self) -> Self: ...
    def __next__(self) -> _FleetEvent: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Literal[False]: ...

@final
class AsyncFleet:
    """A member of a fleet (asyncio API): ``async for event in fleet``; see ``Fleet``."""

    @property
    def name(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def shards(self) -> builtins.list[str]: ...
    async def members(self) -> builtins.list[MemberInfo]: ...
    async def next_event(self, timeout: Optional[float] = None) -> Optional[_FleetEvent]: ...
    def __aiter__(self) -> Self: ...
    async def __anext__(self) -> _FleetEvent: ...
    async def close(self) -> None: ...
    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Literal[False]: ...

@final
class Leader:
    """The leader of an election as the coordinator records it."""

    @property
    def owner(self) -> str:
        """The leading client's owner."""
    @property
    def value(self) -> str:
        """The value it campaigned with or last proclaimed."""
    @property
    def fence(self) -> int:
        """The leadership's fence: larger for every new leader."""
    @property
    def since(self) -> datetime:
        """When this leadership began (the coordinator's clock, timezone-aware)."""
    @property
    def expires_at(self) -> datetime:
        """When the leadership expires unless renewed."""
    def __eq__(self, other: object, /) -> bool: ...

@final
class Leadership:
    """This client leads an election (sync API); a context manager that resigns at the end
    of the block."""

    @property
    def election(self) -> Election: ...
    @property
    def key(self) -> str:
        """The key of the leadership lease (``accord.election/<name>``, percent-encoded)."""
    @property
    def fence(self) -> int:
        """The leadership's fence: pass it to what the leader writes."""
    @property
    def owner(self) -> str: ...
    @property
    def ttl(self) -> float: ...
    @property
    def value(self) -> str:
        """The value observers see."""
    @property
    def status(self) -> _LeaseStatus:
        """The leadership lease's status ("released" once resigned)."""
    @property
    def lost_reason(self) -> Optional[_LostReason]: ...
    @property
    def is_lost(self) -> bool: ...
    @property
    def lost(self) -> LostSignal:
        """The lost signal: ``is_set()`` (and ``bool()``), ``wait(timeout)``."""
    def proclaim(self, value: str) -> None:
        """Changes the value observers see (the fence stays). Raises LeaseLost once ended."""
    def resign(self) -> None:
        """Stops leading; the next campaigner leads. Again: harmless. Raises LeaseLost if lost."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Literal[False]: ...

@final
class AsyncLeadership:
    """This client leads an election (asyncio API); ``async with`` resigns at the end of the
    block."""

    @property
    def election(self) -> AsyncElection: ...
    @property
    def key(self) -> str: ...
    @property
    def fence(self) -> int: ...
    @property
    def owner(self) -> str: ...
    @property
    def ttl(self) -> float: ...
    @property
    def value(self) -> str: ...
    @property
    def status(self) -> _LeaseStatus: ...
    @property
    def lost_reason(self) -> Optional[_LostReason]: ...
    @property
    def is_lost(self) -> bool: ...
    @property
    def lost(self) -> asyncio.Future[None]:
        """Completes when the leadership is lost; never for one that ends otherwise."""
    async def proclaim(self, value: str) -> None: ...
    async def resign(self) -> None: ...
    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Literal[False]: ...

@final
class Observer:
    """The leaders of an election (sync API): the current state (the leader, or None when
    nobody leads), then every change, vacancies (None) included, each once; iteration ends
    once closed."""

    @property
    def closed(self) -> bool: ...
    def next(self, timeout: Optional[float] = None) -> Optional[Leader]:
        """The next leader, new value or vacancy (None); raises Timeout after ``timeout``
        seconds, Closed once closed."""
    def __iter__(self) -> Self: ...
    def __next__(self) -> Optional[Leader]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Literal[False]: ...

@final
class AsyncObserver:
    """The leaders of an election (asyncio API), vacancies (None) included; ``async for``
    ends once closed."""

    @property
    def closed(self) -> bool: ...
    async def next(self, timeout: Optional[float] = None) -> Optional[Leader]: ...
    def __aiter__(self) -> Self: ...
    async def __anext__(self) -> Optional[Leader]: ...
    async def close(self) -> None: ...
    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Literal[False]: ...

@final
class Election:
    """An election (sync API): ``campaign`` to lead, ``leader`` to read, ``observe`` to
    follow."""

    @property
    def name(self) -> str: ...
    def campaign(
        self, value: str, *, ttl: Optional[float] = None, timeout: Optional[float] = None
    ) -> Leadership:
        """Waits in line to lead (arrival order), then leads with ``value``."""
    def leader(self) -> Optional[Leader]:
        """The current leader; None when nobody leads."""
    def observe(self) -> Observer: ...

@final
class AsyncElection:
    """An election (asyncio API): ``campaign`` to lead, ``leader`` to read, ``observe`` to
    follow."""

    @property
    def name(self) -> str: ...
    def campaign(
        self, value: str, *, ttl: Optional[float] = None, timeout: Optional[float] = None
    ) -> Opening[AsyncLeadership]: ...
    async def leader(self) -> Optional[Leader]: ...
    def observe(self) -> Opening[AsyncObserver]: ...

@final
class StreamEvent:
    """One event of a stream."""

    __match_args__ = ("stream", "seq", "payload", "published_at")
    def __new__(cls, stream: str, seq: int, payload: str, published_at: datetime) -> Self: ...
    @property
    def stream(self) -> str: ...
    @property
    def seq(self) -> int:
        """Its place in the stream: 1 for the first event, one more for each after it."""
    @property
    def payload(self) -> str: ...
    @property
    def published_at(self) -> datetime:
        """When the coordinator stored it (its clock, timezone-aware)."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class StreamInfo:
    """A stream's bounds and retention rule."""

    @property
    def stream(self) -> str: ...
    @property
    def first_seq(self) -> int:
        """The oldest seq still stored; ``last_seq + 1`` when none is."""
    @property
    def last_seq(self) -> int:
        """The newest seq published (0: nothing ever was)."""
    @property
    def max_len(self) -> Optional[int]: ...
    @property
    def max_age(self) -> Optional[float]:
        """Seconds."""
    def __eq__(self, other: object, /) -> bool: ...

@final
class Histogram:
    """One latency distribution of ``Stats``: how many values, their sum, the largest, and two
    percentiles. Durations are float seconds. A percentile is the upper edge of its logarithmic
    bucket: at most about 9% above the true value, never below it."""

    @property
    def count(self) -> int: ...
    @property
    def sum(self) -> float:
        """Seconds (the mean is ``sum / count``)."""
    @property
    def max(self) -> float:
        """Seconds."""
    @property
    def p50(self) -> float:
        """Seconds."""
    @property
    def p99(self) -> float:
        """Seconds."""
    def __eq__(self, other: object, /) -> bool: ...

@final
class Stats:
    """What a client did since it connected (``Client.stats()``): counters of this client's
    calls and events, and latency histograms (seconds)."""

    @property
    def acquires(self) -> int:
        """Calls to acquire, try_acquire, claim and semaphore acquires."""
    @property
    def grants(self) -> int:
        """Leases granted (a claim of 50 counts 50)."""
    @property
    def refusals(self) -> int:
        """Tries that found the key held; claims that found nothing."""
    @property
    def timeouts(self) -> int: ...
    @property
    def cancellations(self) -> int: ...
    @property
    def lost(self) -> int: ...
    @property
    def releases(self) -> int: ...
    @property
    def done(self) -> int: ...
    @property
    def notifications(self) -> int: ...
    @property
    def reconnects(self) -> int: ...
    @property
    def statements(self) -> int:
        """Statements sent to the coordinator, keepalive included."""
    @property
    def acquire_wait(self) -> Histogram:
        """From the call to the grant, for calls that got one."""
    @property
    def hold_time(self) -> Histogram:
        """From the grant to its release, done or loss."""
    @property
    def statement_time(self) -> Histogram:
        """One statement's round trip, as the client saw it."""
    @property
    def keepalive_tick(self) -> Histogram:
        """One keepalive tick's renew statement."""
    def __eq__(self, other: object, /) -> bool: ...

@final
class StreamSubscription:
    """The events of one stream (sync API), each once and in seq order; iteration ends once
    closed."""

    @property
    def stream(self) -> str: ...
    @property
    def consumer(self) -> Optional[str]: ...
    @property
    def position(self) -> int:
        """The seq of the last event delivered (before the first: where it started)."""
    @property
    def closed(self) -> bool: ...
    def next(self, timeout: Optional[float] = None) -> Optional[StreamEvent]:
        """The next event; None once closed. Raises Timeout, Closed once the client closed,
        Trimmed when retention deleted events not read yet."""
    def __iter__(self) -> Self: ...
    def __next__(self) -> StreamEvent: ...
    def ack(self, seq: int) -> None:
        """Stores the named consumer's position (a seq this subscription delivered)."""
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Literal[False]: ...

@final
class AsyncStreamSubscription:
    """The events of one stream (asyncio API); ``async for`` ends once closed. A cancelled read
    loses no event."""

    @property
    def stream(self) -> str: ...
    @property
    def consumer(self) -> Optional[str]: ...
    @property
    def position(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    async def next(self, timeout: Optional[float] = None) -> Optional[StreamEvent]: ...
    def __aiter__(self) -> Self: ...
    async def __anext__(self) -> StreamEvent: ...
    async def ack(self, seq: int) -> None: ...
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
        listen_url: Optional[str] = None,
        prepare_statements: bool = True,
        close_on_sigterm: bool = True,
    ) -> Client: ...
    @property
    def owner(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def held_count(self) -> int:
        """How many leases this client holds and keeps alive now."""
    def stats(self) -> Stats:
        """What this client did since it connected (durations in seconds); never blocks."""
    def waiter_wakeups(self) -> int:
        """How many times this client's waiting acquires were woken by a release (diagnostics)."""
    def queued_count(self) -> int:
        """How many of this client's waiting acquires hold a place in a key's line now."""
    def election(self, name: str) -> Election:
        """The election ``name``; raises InvalidArgument for a bad name."""
    def acquire(
        self,
        key: str,
        *,
        ttl: Optional[float] = None,
        timeout: Optional[float] = None,
        metadata: Optional[_Metadata] = None,
        shared: bool = False,
    ) -> Lease:
        """Waits until ``key`` is granted (waiters in arrival order); ``shared=True``: a shared
        grant (many shared holders, or one exclusive)."""
    def try_acquire(
        self,
        key: str,
        *,
        ttl: Optional[float] = None,
        metadata: Optional[_Metadata] = None,
        shared: bool = False,
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
    def join(
        self, group: str, *, metadata: Optional[_Metadata] = None, ttl: Optional[float] = None
    ) -> Member: ...
    def members(self, group: str) -> builtins.list[MemberInfo]: ...
    def watch(self, group: str) -> MemberWatch: ...
    def fleet(
        self,
        name: str,
        shards: Optional[int] = None,
        *,
        keys: Optional[Iterable[str]] = None,
        ttl: Optional[float] = None,
        period: Optional[float] = None,
        max_handoffs_per_period: Optional[int] = None,
        handoff_timeout: Optional[float] = None,
        metadata: Optional[_Metadata] = None,
    ) -> Fleet: ...
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
    def publish(self, stream: str, payload: str) -> int:
        """Appends ``payload`` to ``stream``; its seq (1, 2, 3, … in commit order)."""
    def publish_many(self, stream: str, payloads: Iterable[str]) -> builtins.list[int]:
        """Appends ``payloads`` in this order (at most ``MAX_PUBLISH_EVENTS``); their seqs."""
    def subscribe(
        self,
        stream: str,
        *,
        after: _After = "latest",
        consumer: Optional[str] = None,
        page_size: int = 100,
    ) -> StreamSubscription:
        """Reads ``stream`` from ``after`` (a named consumer: from its last ack, unless
        ``after`` is a seq); raises Trimmed when that start was deleted by retention."""
    def stream_info(self, stream: str) -> StreamInfo: ...
    def set_stream_retention(
        self, stream: str, *, max_len: Optional[int] = None, max_age: Optional[float] = None
    ) -> int:
        """Replaces the stream's retention rule and trims now; how many events were deleted."""
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
        listen_url: Optional[str] = None,
        prepare_statements: bool = True,
        close_on_sigterm: bool = True,
    ) -> Opening[AsyncClient]: ...
    @property
    def owner(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def held_count(self) -> int: ...
    def stats(self) -> Stats:
        """What this client did since it connected (not awaited: it reads counters)."""
    def waiter_wakeups(self) -> int: ...
    def queued_count(self) -> int: ...
    def election(self, name: str) -> AsyncElection:
        """The election ``name``; raises InvalidArgument for a bad name."""
    def acquire(
        self,
        key: str,
        *,
        ttl: Optional[float] = None,
        timeout: Optional[float] = None,
        metadata: Optional[_Metadata] = None,
        shared: bool = False,
    ) -> Opening[AsyncLease]: ...
    async def try_acquire(
        self,
        key: str,
        *,
        ttl: Optional[float] = None,
        metadata: Optional[_Metadata] = None,
        shared: bool = False,
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
    def join(
        self, group: str, *, metadata: Optional[_Metadata] = None, ttl: Optional[float] = None
    ) -> Opening[AsyncMember]: ...
    async def members(self, group: str) -> builtins.list[MemberInfo]: ...
    def watch(self, group: str) -> Opening[AsyncMemberWatch]: ...
    def fleet(
        self,
        name: str,
        shards: Optional[int] = None,
        *,
        keys: Optional[Iterable[str]] = None,
        ttl: Optional[float] = None,
        period: Optional[float] = None,
        max_handoffs_per_period: Optional[int] = None,
        handoff_timeout: Optional[float] = None,
        metadata: Optional[_Metadata] = None,
    ) -> Opening[AsyncFleet]: ...
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
    async def publish(self, stream: str, payload: str) -> int: ...
    async def publish_many(self, stream: str, payloads: Iterable[str]) -> builtins.list[int]: ...
    def subscribe(
        self,
        stream: str,
        *,
        after: _After = "latest",
        consumer: Optional[str] = None,
        page_size: int = 100,
    ) -> Opening[AsyncStreamSubscription]: ...
    async def stream_info(self, stream: str) -> StreamInfo: ...
    async def set_stream_retention(
        self, stream: str, *, max_len: Optional[int] = None, max_age: Optional[float] = None
    ) -> int: ...
    async def _listening_channels(self) -> builtins.list[str]: ...
    async def close(self) -> None: ...
    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> Literal[False]: ...
