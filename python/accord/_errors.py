"""accord's exceptions: one base, one subclass per error kind of the core (docs/semantics.md).

The extension module raises these classes (it imports them from here), so that they can
inherit from several builtins, pickle by name and read well in tracebacks as ``accord.X``.
"""

from __future__ import annotations

__all__ = [
    "AccordError",
    "Cancelled",
    "Closed",
    "Connection",
    "Database",
    "Done",
    "Held",
    "Internal",
    "InvalidArgument",
    "LeaseLost",
    "Timeout",
    "Trimmed",
    "Unsupported",
]


class AccordError(Exception):
    """Base of every error accord raises. ``code`` is the kind's stable name, the same in
    every language (Node's ``err.code``, C's status names)."""

    code: str = "ACCORD_ERROR"


class InvalidArgument(AccordError, ValueError):
    """An argument is malformed or out of range; the message names the field."""

    code = "ACCORD_INVALID_ARGUMENT"


class Held(AccordError):
    """The key is held by a live lease (for example when resetting it)."""

    code = "ACCORD_HELD"


class Done(AccordError):
    """The key was marked done; it is not granted again until ``reset``."""

    code = "ACCORD_DONE"


class Timeout(AccordError, TimeoutError):
    """A wait ran out of time; nothing was left held."""

    code = "ACCORD_TIMEOUT"


class Cancelled(AccordError):
    """A wait was cancelled; nothing was left held."""

    code = "ACCORD_CANCELLED"


class LeaseLost(AccordError):
    """The lease is no longer held: it expired, was released, or was finished."""

    code = "ACCORD_LEASE_LOST"


class Connection(AccordError, ConnectionError):
    """The coordinator could not be reached, or the connection broke mid-call."""

    code = "ACCORD_CONNECTION"


class Database(AccordError):
    """The coordinator refused a statement (permissions, schema, constraint)."""

    code = "ACCORD_DATABASE"


class Closed(AccordError):
    """The client was closed."""

    code = "ACCORD_CLOSED"


class Unsupported(AccordError):
    """Not available here: backend, option, or process state (a client used after fork())."""

    code = "ACCORD_UNSUPPORTED"


class Internal(AccordError):
    """A bug in accord; please report it."""

    code = "ACCORD_INTERNAL"


class Trimmed(AccordError):
    """A stream no longer holds the events asked for: its retention deleted them. The message
    names the seq the stream starts at now."""

    code = "ACCORD_TRIMMED"


for _cls in (
    AccordError,
    InvalidArgument,
    Held,
    Done,
    Timeout,
    Cancelled,
    LeaseLost,
    Connection,
    Database,
    Closed,
    Unsupported,
    Internal,
    Trimmed,
):
    _cls.__module__ = "accord"
del _cls
