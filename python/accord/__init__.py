"""accord: locks, leases with fencing tokens, done-marking and notify/listen on PostgreSQL.

Workers in several languages (Rust, Python, Node, C, Go) coordinate through one PostgreSQL
database: they take leases on named keys, mark units of work done, and notify each other.

- ``Client`` (blocking; the GIL is released while it waits, Ctrl-C interrupts a wait) and
  ``AsyncClient`` (asyncio) offer the same calls: ``connect``, ``acquire``, ``try_acquire``,
  ``reset``, ``list``, ``notify``, ``listen``, ``close``, and the work pools' ``offer``,
  ``claim`` and ``counts`` (a ``PoolCounts``) and ``semaphore`` (a ``Semaphore``,
  ``AsyncSemaphore``).
- A ``Lease`` (``AsyncLease``) is renewed in the background until released; use it as a
  context manager. Its ``fence`` grows with every grant: pass it to what you write. Its
  ``lost`` signal fires before the coordinator could grant the key to anyone else (sync: a
  ``LostSignal``, like a ``threading.Event``; async: an awaitable); ``status`` and
  ``lost_reason`` say where it stands.
- Membership: ``join`` a group (a ``Member``, ``AsyncMember``: a lease kept alive, with
  ``update_metadata`` and ``leave``), ``members`` (``MemberInfo`` records) and ``watch`` (a
  ``MemberWatch``, ``AsyncMemberWatch``: ``Members``, then ``Joined``, ``Left`` and
  ``Updated``).
- Fleets: ``fleet(name, shards=n | keys=[...])`` (a ``Fleet``, ``AsyncFleet``) splits shards
  among its members; iterate it for ``Assigned`` (with a ``ShardLease``: its fence) and
  ``Revoked`` (reason "handoff", "lost" or "closed"). Asking for the next event acknowledges
  a hand-off: do its work in the loop body. ``close`` hands every shard back.
- Shared locks: ``acquire(key, shared=True)`` (and ``try_acquire``) grants a key to any number
  of shared holders at once, or to one exclusive holder (``Lease.shared``, ``LeaseInfo.shared``).
  Waiting acquires are granted in arrival order; ``waiter_wakeups()`` and ``queued_count()``
  are diagnostics of this client's waiters.
- Elections: ``election(name)`` (an ``Election``, ``AsyncElection``): ``campaign(value)`` waits
  in line to lead (a ``Leadership``, ``AsyncLeadership``: a lease with a ``fence``,
  ``proclaim`` and ``resign``; a context manager), ``leader()`` reads the ``Leader`` and
  ``observe()`` (an ``Observer``, ``AsyncObserver``) yields each new leader and value, and
  None for a vacancy (nobody leads).
- Durable streams: ``publish(stream, payload)`` (and ``publish_many``) appends events and
  returns their seqs (1, 2, 3, … per stream); ``subscribe(stream, after=, consumer=,
  page_size=)`` (a ``StreamSubscription``, ``AsyncStreamSubscription``) yields ``StreamEvent``
  records from a start ("latest", "earliest", a seq, or a named consumer's last ``ack``), each
  once and in order, across reconnects; ``stream_info`` (a ``StreamInfo``) and
  ``set_stream_retention(stream, max_len=, max_age=)``. Reading events retention deleted raises
  ``Trimmed``.
- Stats: ``stats()`` (sync on ``Client`` and ``AsyncClient``: it reads counters) returns a
  ``Stats`` of what the client did since it connected: int counters (``acquires``, ``grants``,
  ``refusals``, ``releases``, ``statements``, …) and ``Histogram`` latencies (``count``,
  ``sum``, ``max``, ``p50``, ``p99``, in float seconds).
- SIGTERM (Docker, Kubernetes) closes every client, so that a stopped process gives back its
  leases and shards at once, then ends the process as the signal's default does: the first
  ``connect`` in the main thread puts the handler in, unless the application has its own, which
  then calls ``close_all()``. ``close_on_sigterm=False`` leaves a client out.
- Errors are subclasses of ``AccordError``, one per kind (``ERROR_CODES`` lists their codes).

Durations (``ttl``, ``timeout``) are in seconds.
"""

# Only public names are bound here (``dir(accord)`` is ``__all__`` plus private ``_`` names):
# no ``from __future__ import annotations``, and typing under a private name.
from typing import Union as _Union

from ._accord import (
    ERROR_CODES,
    MAX_CHANNEL_BYTES,
    MAX_CLAIM_LIMIT,
    MAX_EVENT_BYTES,
    MAX_HANDOFFS_PER_PERIOD,
    MAX_LIST_LIMIT,
    MAX_METADATA_BYTES,
    MAX_NAME_BYTES,
    MAX_OFFER_KEYS,
    MAX_PAGE_SIZE,
    MAX_PERMITS,
    MAX_POOL_SIZE,
    MAX_PUBLISH_EVENTS,
    MAX_SHARDS,
    MAX_TTL,
    MIN_PERIOD,
    MIN_TTL,
    Assigned,
    AsyncClient,
    AsyncElection,
    AsyncFleet,
    AsyncLeadership,
    AsyncLease,
    AsyncMember,
    AsyncMemberWatch,
    AsyncObserver,
    AsyncSemaphore,
    AsyncStreamSubscription,
    AsyncSubscription,
    Client,
    Election,
    Fleet,
    Histogram,
    Joined,
    Leader,
    Leadership,
    Lease,
    LeaseInfo,
    Left,
    ListPage,
    LostSignal,
    Member,
    MemberInfo,
    Members,
    MemberWatch,
    Message,
    Observer,
    PoolCounts,
    Reconnected,
    Revoked,
    Semaphore,
    ShardLease,
    Stats,
    StreamEvent,
    StreamInfo,
    StreamSubscription,
    Subscription,
    Updated,
    __version__,
    close_all,
    migration_sql,
)
from ._aio import Opening
from ._errors import (
    AccordError,
    Cancelled,
    Closed,
    Connection,
    Database,
    Done,
    Held,
    Internal,
    InvalidArgument,
    LeaseLost,
    Timeout,
    Trimmed,
    Unsupported,
)

Event = _Union[Message, Reconnected]
"""What a subscription yields."""

MemberEvent = _Union[Members, Joined, Left, Updated]
"""What a member watch yields: ``Members`` first, then ``Joined``, ``Left`` and ``Updated``."""

FleetEvent = _Union[Assigned, Revoked]
"""What a fleet yields: ``Assigned``, then ``Revoked``, per shard."""

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
    "AccordError",
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
    "Cancelled",
    "Client",
    "Closed",
    "Connection",
    "Database",
    "Done",
    "Election",
    "Event",
    "Fleet",
    "FleetEvent",
    "Held",
    "Histogram",
    "Internal",
    "InvalidArgument",
    "Joined",
    "Leader",
    "Leadership",
    "Lease",
    "LeaseInfo",
    "LeaseLost",
    "Left",
    "ListPage",
    "LostSignal",
    "Member",
    "MemberEvent",
    "MemberInfo",
    "MemberWatch",
    "Members",
    "Message",
    "Observer",
    "Opening",
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
    "Timeout",
    "Trimmed",
    "Unsupported",
    "Updated",
    "__version__",
    "close_all",
    "migration_sql",
]
