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
- Errors are subclasses of ``AccordError``, one per kind (``ERROR_CODES`` lists their codes).

Durations (``ttl``, ``timeout``) are in seconds.
"""

from __future__ import annotations

from typing import Union

from ._accord import (
    ERROR_CODES,
    MAX_CHANNEL_BYTES,
    MAX_CLAIM_LIMIT,
    MAX_LIST_LIMIT,
    MAX_METADATA_BYTES,
    MAX_NAME_BYTES,
    MAX_OFFER_KEYS,
    MAX_PERMITS,
    MAX_POOL_SIZE,
    MAX_TTL,
    MIN_TTL,
    AsyncClient,
    AsyncLease,
    AsyncSemaphore,
    AsyncSubscription,
    Client,
    Lease,
    LeaseInfo,
    ListPage,
    LostSignal,
    Message,
    PoolCounts,
    Reconnected,
    Semaphore,
    Subscription,
    __version__,
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
    Unsupported,
)

Event = Union[Message, Reconnected]
"""What a subscription yields."""

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
    "AccordError",
    "AsyncClient",
    "AsyncLease",
    "AsyncSemaphore",
    "AsyncSubscription",
    "Cancelled",
    "Client",
    "Closed",
    "Connection",
    "Database",
    "Done",
    "Event",
    "Held",
    "Internal",
    "InvalidArgument",
    "Lease",
    "LeaseInfo",
    "LeaseLost",
    "ListPage",
    "LostSignal",
    "Message",
    "Opening",
    "PoolCounts",
    "Reconnected",
    "Semaphore",
    "Subscription",
    "Timeout",
    "Unsupported",
    "__version__",
    "migration_sql",
]
