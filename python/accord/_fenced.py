"""Fenced writes on the application's own connection: runs the statements a lease gives
(``fence_check_sql()``, ``done_sql()``: the core makes them, in the placeholder style each
driver takes) and turns the server's refusal into accord's exception (the core's mapping,
``_fenced_refusal``).

Drivers: psycopg 3 (sync and asyncio; its raw cursors, psycopg 3.2 and later, take
PostgreSQL's own ``$1``), psycopg2 (sync; DB-API's ``%s``) and asyncpg (``$1``, each parameter
bound by its type). None is a dependency of accord: a driver is looked at only when the caller's
connection is one of its own, so only drivers already imported are consulted.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Optional, Union, cast

from ._accord import _fenced_refusal
from ._errors import InvalidArgument, Unsupported

if TYPE_CHECKING:
    import psycopg

    from ._accord import AsyncLease, Lease

    _Conn = Union[psycopg.Connection[Any], psycopg.Cursor[Any], Any]
    _AsyncConn = Union[psycopg.AsyncConnection[Any], psycopg.AsyncCursor[Any], Any]

_Params = list[Any]

_SYNC = "a psycopg 3 Connection or Cursor, or a psycopg2 connection or cursor"
_ASYNC = "a psycopg 3 AsyncConnection or AsyncCursor, or an asyncpg Connection"


def _driver(name: str) -> Any:
    """The driver module `name` if the program imported it (the caller's connection can only
    be one of its own then), else None."""
    return sys.modules.get(name)


def _psycopg(conn: Any, asynchronous: bool) -> Any:
    """The psycopg 3 connection of ``conn`` (a connection, or a cursor of one), or None."""
    psycopg = _driver("psycopg")
    if psycopg is None:
        return None
    if asynchronous:
        kinds: tuple[type, ...] = (psycopg.AsyncConnection,)
        cursors: tuple[type, ...] = (psycopg.AsyncCursor,)
    else:
        kinds, cursors = (psycopg.Connection,), (psycopg.Cursor,)
    if not isinstance(conn, kinds + cursors):
        return None
    if not hasattr(psycopg, "RawCursor"):
        raise Unsupported(
            f"fenced writes need psycopg >= 3.2, whose raw cursors take PostgreSQL's own "
            f"placeholders ($1), as the statements are written; this is {psycopg.__version__}"
        )
    return conn if isinstance(conn, kinds) else cast(Any, conn).connection


def _psycopg2(conn: Any) -> Any:
    """The psycopg2 connection of ``conn`` (a connection, or a cursor of one), or None."""
    psycopg2 = _driver("psycopg2")
    if psycopg2 is None:
        return None
    extensions = psycopg2.extensions
    if isinstance(conn, extensions.connection):
        return conn
    if isinstance(conn, extensions.cursor):
        return conn.connection
    return None


def _asyncpg(conn: Any) -> Any:
    """``conn`` if it is an asyncpg connection (or a pool's proxy of one), else None."""
    asyncpg = _driver("asyncpg")
    if asyncpg is None:
        return None
    kinds: tuple[type, ...] = (asyncpg.Connection, asyncpg.pool.PoolConnectionProxy)
    return conn if isinstance(conn, kinds) else None


def _unknown(conn: Any, wanted: str) -> NoReturn:
    raise InvalidArgument(
        f"invalid conn: {wanted} inside a transaction is needed, not {type(conn).__name__}"
    )


def _refused(what: str, error: Exception) -> NoReturn:
    """Raises accord's exception for a refusal by the server; anything else as it is. The
    SQLSTATE and primary message, as each driver names them (psycopg 3 ``sqlstate`` and
    ``diag``, psycopg2 ``pgcode`` and ``diag``, asyncpg ``sqlstate`` and ``message``)."""
    sqlstate = getattr(error, "sqlstate", None) or getattr(error, "pgcode", None)
    if not sqlstate:
        raise error
    diag = getattr(error, "diag", None)
    message = (
        getattr(diag, "message_primary", None) or getattr(error, "message", None) or str(error)
    )
    raise _fenced_refusal(what, sqlstate, message) from error


#: How each driver takes a statement: its placeholders, and whether parameters are bound by
#: their types (asyncpg) rather than sent as strings.
_STYLE: dict[str, tuple[Literal["$1", "%s"], bool]] = {
    "psycopg": ("$1", False),
    "psycopg2": ("%s", False),
    "asyncpg": ("$1", True),
}


def _sync(conn: Any) -> tuple[str, Any]:
    """The driver of ``conn`` and its connection, for the sync lease."""
    connection = _psycopg(conn, asynchronous=False)
    if connection is not None:
        return "psycopg", connection
    connection = _psycopg2(conn)
    if connection is not None:
        return "psycopg2", connection
    _unknown(conn, _SYNC)


def _async(conn: Any) -> tuple[str, Any]:
    """The driver of ``conn`` and its connection, for the asyncio lease."""
    connection = _psycopg(conn, asynchronous=True)
    if connection is not None:
        return "psycopg", connection
    connection = _asyncpg(conn)
    if connection is not None:
        return "asyncpg", connection
    _unknown(conn, _ASYNC)


def _statement(lease: Union[Lease, AsyncLease], driver: str) -> tuple[str, _Params]:
    """``fence_check_sql()`` as ``driver`` takes it."""
    placeholders, typed = _STYLE[driver]
    return lease.fence_check_sql(placeholders=placeholders, typed=typed)


def _done_statement(
    lease: Union[Lease, AsyncLease], driver: str, metadata: Optional[dict[str, Any]]
) -> tuple[str, _Params]:
    placeholders, typed = _STYLE[driver]
    return lease.done_sql(metadata, placeholders=placeholders, typed=typed)


def _execute(driver: str, connection: Any, what: str, text: str, params: _Params) -> Any:
    """Runs a statement on a sync driver; the first column of its row."""
    if driver == "psycopg":
        import psycopg

        try:
            with psycopg.RawCursor(connection) as cursor:
                cursor.execute(text, params)
                row = cursor.fetchone()
        except psycopg.Error as e:
            _refused(what, e)
    else:
        psycopg2 = _driver("psycopg2")
        try:
            with connection.cursor() as cursor:
                cursor.execute(text, params)
                row = cursor.fetchone()
        except psycopg2.Error as e:
            _refused(what, e)
    return row[0] if row else None


async def _execute_async(
    driver: str, connection: Any, what: str, text: str, params: _Params
) -> Any:
    """Runs a statement on an asyncio driver; the first column of its row."""
    if driver == "psycopg":
        import psycopg

        try:
            async with psycopg.AsyncRawCursor(connection) as cursor:
                await cursor.execute(text, params)
                row = await cursor.fetchone()
        except psycopg.Error as e:
            _refused(what, e)
        return row[0] if row else None
    asyncpg = _driver("asyncpg")
    try:
        return await connection.fetchval(text, *params)
    except asyncpg.PostgresError as e:
        _refused(what, e)


def fenced(lease: Lease, conn: _Conn) -> None:
    driver, connection = _sync(conn)
    text, params = _statement(lease, driver)
    _execute(driver, connection, "check_fence", text, params)


def done_in(lease: Lease, conn: _Conn, metadata: Optional[dict[str, Any]]) -> dict[str, Any]:
    driver, connection = _sync(conn)
    text, params = _done_statement(lease, driver, metadata)
    try:
        merged = _execute(driver, connection, "done", text, params)
    finally:
        lease.done_sent()
    result: dict[str, Any] = json.loads(merged)
    return result


async def fenced_async(lease: AsyncLease, conn: _AsyncConn) -> None:
    driver, connection = _async(conn)
    text, params = _statement(lease, driver)
    await _execute_async(driver, connection, "check_fence", text, params)


async def done_in_async(
    lease: AsyncLease, conn: _AsyncConn, metadata: Optional[dict[str, Any]]
) -> dict[str, Any]:
    driver, connection = _async(conn)
    text, params = _done_statement(lease, driver, metadata)
    try:
        merged = await _execute_async(driver, connection, "done", text, params)
    finally:
        lease.done_sent()
    result: dict[str, Any] = json.loads(merged)
    return result
