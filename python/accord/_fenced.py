"""Fenced writes on the application's own connection (psycopg 3, sync and asyncio): runs the
statements a lease gives (``fence_check_sql()``, ``done_sql()``: the core makes them) and turns
the server's refusal into accord's exception (the core's mapping, ``_fenced_refusal``).

psycopg is not a dependency of accord: it is imported only here, when a helper is called. The
statements take PostgreSQL's own placeholders (``$1``), which psycopg's raw cursors (psycopg
3.2 and later) run as they are.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, NoReturn, Optional, Union, cast

from ._accord import _fenced_refusal
from ._errors import InvalidArgument, Unsupported

if TYPE_CHECKING:
    import psycopg

    from ._accord import AsyncLease, Lease

    _Conn = Union[psycopg.Connection[Any], psycopg.Cursor[Any]]
    _AsyncConn = Union[psycopg.AsyncConnection[Any], psycopg.AsyncCursor[Any]]

_Params = list[Optional[str]]


def _connection(conn: Any, asynchronous: bool) -> Any:
    """The psycopg 3 connection of ``conn`` (a connection, or a cursor of one)."""
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg is what the caller passes
        psycopg = None  # type: ignore[assignment]
    if psycopg is not None and not hasattr(psycopg, "RawCursor"):
        raise Unsupported(
            f"fenced writes need psycopg >= 3.2, whose raw cursors take PostgreSQL's own "
            f"placeholders ($1), as the statements are written; this is {psycopg.__version__}"
        )
    if psycopg is not None:
        kinds: tuple[type, ...] = (
            (psycopg.AsyncConnection,) if asynchronous else (psycopg.Connection,)
        )
        cursors: tuple[type, ...] = (psycopg.AsyncCursor,) if asynchronous else (psycopg.Cursor,)
        if isinstance(conn, kinds):
            return conn
        if isinstance(conn, cursors):
            return cast(Any, conn).connection
    wanted = "AsyncConnection or AsyncCursor" if asynchronous else "Connection or Cursor"
    raise InvalidArgument(
        f"invalid conn: a psycopg 3 {wanted} inside a transaction is needed, "
        f"not {type(conn).__name__}"
    )


def _refused(what: str, error: Exception) -> NoReturn:
    """Raises accord's exception for a refusal by the server; anything else as it is."""
    sqlstate = getattr(error, "sqlstate", None)
    if not sqlstate:
        raise error
    diag = getattr(error, "diag", None)
    message = getattr(diag, "message_primary", None) or str(error)
    raise _fenced_refusal(what, sqlstate, message) from error


def _run(conn: Any, what: str, text: str, params: _Params) -> Any:
    import psycopg

    connection = _connection(conn, asynchronous=False)
    try:
        with psycopg.RawCursor(connection) as cursor:
            cursor.execute(text, params)
            row = cursor.fetchone()
    except psycopg.Error as e:
        _refused(what, e)
    return row[0] if row else None


async def _run_async(conn: Any, what: str, text: str, params: _Params) -> Any:
    import psycopg

    connection = _connection(conn, asynchronous=True)
    try:
        async with psycopg.AsyncRawCursor(connection) as cursor:
            await cursor.execute(text, params)
            row = await cursor.fetchone()
    except psycopg.Error as e:
        _refused(what, e)
    return row[0] if row else None


def fenced(lease: Lease, conn: _Conn) -> None:
    text, params = lease.fence_check_sql()
    _run(conn, "check_fence", text, params)


def done_in(lease: Lease, conn: _Conn, metadata: Optional[dict[str, Any]]) -> dict[str, Any]:
    text, params = lease.done_sql(metadata)
    try:
        merged = _run(conn, "done", text, params)
    finally:
        lease.done_sent()
    result: dict[str, Any] = json.loads(merged)
    return result


async def fenced_async(lease: AsyncLease, conn: _AsyncConn) -> None:
    text, params = lease.fence_check_sql()
    await _run_async(conn, "check_fence", text, params)


async def done_in_async(
    lease: AsyncLease, conn: _AsyncConn, metadata: Optional[dict[str, Any]]
) -> dict[str, Any]:
    text, params = lease.done_sql(metadata)
    try:
        merged = await _run_async(conn, "done", text, params)
    finally:
        lease.done_sent()
    result: dict[str, Any] = json.loads(merged)
    return result
