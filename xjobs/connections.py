"""What ``conn=`` may be: a psycopg connection, or a SQLAlchemy session or connection on a
psycopg engine, taken down to the psycopg connection of the transaction it is in.

    with Session(engine) as session:              # postgresql+psycopg://
        session.add(Order(...))
        send_receipt.enqueue({"order": 42}, conn=session)
        session.commit()                          # the order and its job, or neither

A ``Session`` (or an engine ``Connection``) is asked for its connection, which begins its
transaction as its own next statement would, so the user's ``commit()`` or ``rollback()``
decides the job too. An ``AsyncSession`` or ``AsyncConnection`` of ``sqlalchemy.ext.asyncio``
does the same for the async verbs. SQLAlchemy is never imported here: an object is one of its
sessions when a class it is made from comes from a ``sqlalchemy`` module.

The wrong kind is refused before anything is written (``X_INVALID_OPTION``, ``option`` =
``conn``): an async connection handed to a synchronous verb, a synchronous one to an async
verb, an ``Engine`` (it is in no transaction), or an engine whose driver is not psycopg 3.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias, cast

import psycopg

from .drivers.base import CallerConnection
from .drivers.base_async import AsyncCallerConnection, AsyncWrites
from .errors import InvalidOption

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection as SAConnection
    from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

# what ``conn=`` of a synchronous verb takes, and of an async one
Joinable: TypeAlias = "CallerConnection | Session | SAConnection"
AsyncJoinable: TypeAlias = "AsyncCallerConnection | AsyncSession | SAAsyncConnection"


def _sqlalchemy_kind(conn: object) -> str | None:
    """The SQLAlchemy class ``conn`` is made from (``Session``, ``AsyncConnection``...), or None."""
    for cls in type(conn).__mro__:
        if cls.__module__.split(".")[0] == "sqlalchemy" and cls.__name__ in (
                "Session", "Connection", "AsyncSession", "AsyncConnection", "Engine", "AsyncEngine"):
            return cls.__name__
    return None


def joined(conn: Joinable | None, verb: str) -> CallerConnection | None:
    """The connection a synchronous verb writes on, in ``conn``'s transaction."""
    if conn is None:
        return None
    if isinstance(conn, psycopg.AsyncConnection):
        raise InvalidOption("conn", f"{verb} runs on a synchronous connection; an AsyncConnection "
                                    f"is awaited with a{verb}(..., conn=)")
    kind, given = _sqlalchemy_kind(conn), cast(Any, conn)   # SQLAlchemy's, taken by duck typing
    if kind is None:
        return cast(CallerConnection, conn)   # psycopg's, or the memory driver's: the driver decides
    if kind in ("AsyncSession", "AsyncConnection"):
        raise InvalidOption("conn", f"{verb} takes a synchronous Session or Connection; an {kind} "
                                    f"is awaited with a{verb}(..., conn=)")
    if kind == "Session":
        bound = given.connection()     # begins the session's transaction, as its next statement would
    elif kind == "Connection":
        bound = given
        if not bound.in_transaction():
            bound.begin()      # as its next statement would: its commit() then commits the job too
    else:
        raise _engine(kind)
    return cast("psycopg.Connection[Any]", _psycopg(bound.connection.driver_connection, psycopg.Connection, kind))


async def ajoined(conn: AsyncJoinable, verb: str) -> AsyncCallerConnection:
    """The connection an async verb awaits on, in ``conn``'s transaction."""
    if isinstance(conn, psycopg.Connection):
        raise InvalidOption("conn", f"{verb} awaits on a psycopg AsyncConnection; a synchronous "
                                    f"connection is passed to {verb[1:]}(..., conn=)")
    kind, given = _sqlalchemy_kind(conn), cast(Any, conn)
    if kind is None:
        return cast(AsyncCallerConnection, conn)
    if kind in ("Session", "Connection"):
        raise InvalidOption("conn", f"{verb} takes an AsyncSession or AsyncConnection; a {kind} "
                                    f"is passed to {verb[1:]}(..., conn=)")
    if kind == "AsyncSession":
        bound = await given.connection()
    elif kind == "AsyncConnection":
        bound = given
        if not bound.in_transaction():
            await bound.begin()
    else:
        raise _engine(kind)
    raw = await bound.get_raw_connection()
    return cast("psycopg.AsyncConnection[Any]", _psycopg(raw.driver_connection, psycopg.AsyncConnection, kind))


def _engine(kind: str) -> InvalidOption:
    return InvalidOption("conn", f"an {kind} is in no transaction: pass a Session or a Connection "
                                 f"of it, whose transaction the job joins")


def _psycopg(raw: object, wanted: type, kind: str) -> object:
    if not isinstance(raw, wanted):
        raise InvalidOption("conn", f"this {kind}'s engine runs on {type(raw).__module__}.{type(raw).__name__}; "
                                    f"xjobs joins psycopg 3 connections only (postgresql+psycopg://)")
    return raw


def async_writes(driver: object) -> AsyncWrites:
    """The driver's ``AsyncWrites``, which an async verb's ``conn=`` needs."""
    if not isinstance(driver, AsyncWrites):
        raise InvalidOption("conn", f"{type(driver).__name__} awaits nothing on a connection of yours; "
                                    "leave conn out")
    return driver
