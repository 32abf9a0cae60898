"""The Postgres driver's lower layer: connections, rendered statements, now, notify, errors.

Every noun of ``PostgresDriver`` (``pg_jobs``, ``pg_maintenance``, ``pg_operator``,
``pg_queues``, ``pg_schedule``, ``pg_outbox``, ``pg_slots``, ``pg_steps``) works through one
``PgDatabase``, which is also the driver's ``Storage`` (migrate, ping, close). It owns:

- three connection pools, each opened lazily on first use, so a supervisor that builds a
  driver before forking holds no connection across the fork, and each bounded by a size that
  does not grow with a worker's slots unless the application asks for it:

  ``verbs`` (``pool_size``)        the driver's own statements: claim, ack, renewal, sweeps
  ``steps`` (``step_pool_size``)   a run's step statements: every run of the process shares
                                   these few, each statement a short autocommit round trip
                                   (or one short transaction), and ``step.run`` results go out
                                   together (``pg_step_writes``), so 128 runs recording steps
                                   share one write, not 128 server sessions
  ``transactions``                 ``ctx.transaction()``: a body holds its connection for as
  (``transaction_pool_size``)      long as it runs, so one each, opened on demand and let go
                                   of when idle (``TRANSACTION_IDLE_S``): a worker whose bodies
                                   never open one holds none

  Steps and transactions are kept off the verbs' pool because the claim, ack and renewal
  that keep every run's lease alive must never queue behind a body; transactions are kept off
  the steps' pool because a body holding one for its whole run would starve the other runs'
  step writes;
- the statements of ``queries.sql``, rendered for this schema and this notion of now;
- ``now()``: the ``now`` parameter of a statement. A database built without ``clock=`` takes
  now in every statement from the server (``statement_timestamp()``), so a worker whose wall
  clock runs ahead can neither rescue another machine's live lease nor make a delayed job due
  early. One built with ``clock=`` (the test suites) binds that clock's reading instead, so
  tests step time by hand. ``clock`` stays available to callers either way;
- ``notify``: waking the idle workers of queues whose jobs came back to ready (the insert
  trigger only sees new rows);
- the schema install (``pg_install``) and the quick "does the server answer" probe;
- the driver's errors: every statement of a verb runs on a connection or a cursor of this
  layer, and what psycopg raises there leaves as the seam's own error (``driver_errors``):
  ``DatabaseUnavailable``, ``DatabaseTimeout``, ``SchemaMissing`` or ``DriverError``, with
  psycopg's exception as its ``__cause__``. A job body's own statements in
  ``job_transaction`` are the application's: what they raise is left as psycopg raised it.
"""

from __future__ import annotations

import contextlib
import math
import threading
from typing import Any, Callable, Iterator, Sequence, cast

import orjson
import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import tuple_row
from psycopg.types.json import set_json_loads
from psycopg_pool import ConnectionPool, PoolTimeout

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import DatabaseTimeout, DatabaseUnavailable, DriverError, InvalidOption, SchemaMissing
from ..options import finite_count, finite_option
from .base import CallerConnection, Storage
from .pg_install import install
from .sql import cancel_channel, check_schema_name, notify_channel, settled_channel, statements

# Every connection the driver opens gives up on an unreachable server after connect_timeout
# seconds, and TCP keepalives notice a peer that vanished (a failed-over primary, a dropped
# NAT entry) within about idle + interval * count = 25 s instead of the kernel's two hours.
CONNECT_OPTIONS = {"connect_timeout": 10, "keepalives": 1, "keepalives_idle": 10,
                   "keepalives_interval": 5, "keepalives_count": 3}

# How long an idle connection of the transactions' pool stays open. The pool keeps none open
# of its own accord (min_size 0), and psycopg_pool lets go of one idle connection per period
# of this length, so a burst of bodies in ctx.transaction() leaves its connections behind for
# a few periods at most, not for the pool's default ten minutes.
TRANSACTION_IDLE_S = 10.0


def _configure(conn: psycopg.Connection) -> None:
    set_json_loads(orjson.loads, conn)


def driver_error(exc: psycopg.Error) -> DriverError:
    """The seam's error for what psycopg raised under one of the driver's statements."""
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, pg_errors.QueryCanceled):
        return DatabaseTimeout(text)
    if isinstance(exc, pg_errors.UndefinedTable):
        return SchemaMissing(text)
    sqlstate = getattr(exc, "sqlstate", None) or ""
    if isinstance(exc, PoolTimeout) or sqlstate.startswith(("08", "57P")) or sqlstate == "53300" or (
            not sqlstate and isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))):
        # no connection: refused, dropped, shut down, too many, or none free in the pool
        return DatabaseUnavailable(text)
    return DriverError(text)


@contextlib.contextmanager
def driver_errors() -> Iterator[None]:
    """Around the driver's own statements: psycopg's failures leave as the seam's errors."""
    try:
        yield
    except psycopg.Error as exc:     # PoolTimeout is one too
        raise driver_error(exc) from exc


def callers_connection(conn: CallerConnection) -> psycopg.Connection[Any]:
    """The application's connection a verb joins, taken as psycopg's: it is used as one (a
    pool's proxy of one serves as well), and what it lacks fails where it is used."""
    return cast("psycopg.Connection[Any]", conn)


@contextlib.contextmanager
def in_callers_transaction(conn: psycopg.Connection) -> Iterator[None]:
    """Where a verb that takes the caller's connection puts its statements: all of them in
    the caller's transaction, so the caller's rollback leaves nothing and nobody sees them
    before the caller's commit.

    Not ``conn.transaction()`` alone: psycopg makes that a savepoint only inside a transaction
    already begun. On a connection that has run no statement since its last commit it BEGINs
    and COMMITs a transaction of its own, which the caller's later rollback cannot undo.
    """
    with driver_errors(), _callers_transaction(conn):
        yield


def _callers_transaction(conn: psycopg.Connection) -> contextlib.AbstractContextManager[Any]:
    return contextlib.nullcontext() if joins_as_is(conn) else conn.transaction()


def joins_as_is(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether a verb's statements go on the caller's connection as they are, sync or async.

    True on a connection in no transaction yet and not autocommit: the verb's first statement
    begins the caller's transaction, as the caller's own next statement would (a failure part
    way aborts that transaction whole). False: inside a ``conn.transaction()`` block, which is
    a transaction of the verb's own on an autocommit connection (the caller has none) and a
    savepoint inside a begun one (a failure undoes the verb's rows only)."""
    return not conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def first_row(cur: psycopg.Cursor) -> tuple[Any, ...]:
    """The one row a statement always answers (an aggregate, a count)."""
    row = cur.fetchone()
    if row is None:
        raise psycopg.InterfaceError("a statement that always answers one row answered none")
    return row


class PgDatabase(Storage):
    def __init__(self, dsn: str, *, schema: str, clock: Clock | None, pool_size: int,
                 step_pool_size: int, transaction_pool_size: int, pool_timeout: float,
                 application_name: str, statement_timeout_ms: int | None) -> None:
        try:
            conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:   # a DSN that cannot be parsed is never right
            raise InvalidOption("dsn", str(exc).strip()) from None
        self.dsn = dsn
        self.schema = check_schema_name(schema)
        self._server_clock = clock is None
        self.clock: Clock = SYSTEM_CLOCK if clock is None else clock
        self.channel = notify_channel(self.schema)
        self.cancel_channel = cancel_channel(self.schema)
        self.settled_channel = settled_channel(self.schema)
        self.application_name = application_name
        self.sql = statements(self.schema, self.server_clock)
        self._pool_size = finite_count(pool_size, "pool_size", minimum=1, maximum=1000)
        self._step_pool_size = finite_count(step_pool_size, "step_pool_size", minimum=1, maximum=1000)
        self._transaction_pool_size = finite_count(transaction_pool_size, "transaction_pool_size",
                                                   minimum=1, maximum=1000)
        self._pool_timeout = finite_option(pool_timeout, "pool_timeout", maximum=3600.0,
                                           exclusive_minimum=True)
        self._statement_timeout_ms = None if statement_timeout_ms is None else finite_count(
            statement_timeout_ms, "statement_timeout_ms", minimum=1, maximum=86_400_000)
        self._pools: dict[str, ConnectionPool] = {}
        self._pool_lock = threading.Lock()

    @property
    def server_clock(self) -> bool:
        return self._server_clock

    @property
    def step_pool_size(self) -> int:
        return self._step_pool_size

    def now(self) -> dict[str, float]:
        """The ``now`` parameter of a statement: none when the server's clock is now."""
        return {} if self.server_clock else {"now": self.clock.now_ms()}

    # -- connections ----------------------------------------------------------------------------

    def _options(self, capped: bool = True) -> dict[str, Any]:
        options: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0,
                                   "application_name": self.application_name, **CONNECT_OPTIONS}
        if capped and self._statement_timeout_ms is not None:
            options["options"] = f"-c statement_timeout={self._statement_timeout_ms}"
        return options

    def listen_options(self) -> dict[str, Any]:
        """What ``connect`` opens a connection with, for an ``AsyncConnection`` of its own."""
        return self._options()

    def connect(self, **extra: Any) -> psycopg.Connection:
        """A fresh dedicated connection (LISTEN, migrations), configured like the pool's; what
        it raises is psycopg's."""
        conn = psycopg.connect(self.dsn, **{**self._options(), **extra})
        _configure(conn)
        return conn

    def _pool(self, label: str) -> ConnectionPool:
        pool = self._pools.get(label)
        if pool is None:
            with self._pool_lock:
                pool = self._pools.get(label)
                if pool is None:
                    pool = self._open_pool(label)
                    self._pools[label] = pool
        return pool

    def _open_pool(self, label: str) -> ConnectionPool:
        # the verbs' statements are capped by statement_timeout; a step's and a body's are
        # made on behalf of the application's code, whose waits are its own
        kwargs, name = self._options(capped=label == "verbs"), f"xjobs-{label}-{self.application_name}"
        if label == "transactions":
            return ConnectionPool(self.dsn, min_size=0, max_size=self._transaction_pool_size,
                                  max_idle=TRANSACTION_IDLE_S, open=True, timeout=self._pool_timeout,
                                  kwargs=kwargs, configure=_configure, name=name)
        size = self._pool_size if label == "verbs" else self._step_pool_size
        return ConnectionPool(self.dsn, min_size=1, max_size=size, open=True, timeout=self._pool_timeout,
                              kwargs=kwargs, configure=_configure, name=name)

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A connection of the verbs' pool, for the driver's statements."""
        with driver_errors(), self._pool("verbs").connection() as conn:
            yield conn

    @contextlib.contextmanager
    def step_connection(self) -> Iterator[psycopg.Connection]:
        """A connection of the steps' pool (a run's step statements), never capped."""
        with driver_errors(), self._pool("steps").connection() as conn:
            yield conn

    def body_session(self) -> contextlib.AbstractContextManager[psycopg.Connection]:
        """A connection of the transactions' pool as the pool gives it, psycopg's errors and
        all: what ``job_transaction`` yields to a body, whose statements are the application's."""
        return self._pool("transactions").connection()

    def cursor(self, conn: CallerConnection | None = None
               ) -> contextlib.AbstractContextManager[psycopg.Cursor[Any]]:
        """A cursor on the application's ``conn`` when given, else on a connection of the
        verbs' pool."""
        return self._cursor(conn, self.connection)

    def step_cursor(self) -> contextlib.AbstractContextManager[psycopg.Cursor[Any]]:
        """A cursor on a connection of the steps' pool (a run's step statements)."""
        return self._cursor(None, self.step_connection)

    @staticmethod
    @contextlib.contextmanager
    def _cursor(conn: CallerConnection | None,
                pooled: Callable[[], contextlib.AbstractContextManager[psycopg.Connection]]
                ) -> Iterator[psycopg.Cursor[Any]]:
        if conn is not None:
            # the application's connection may hand rows back as dicts or objects; every
            # statement here reads its columns by position
            with driver_errors(), callers_connection(conn).cursor(row_factory=tuple_row) as cur:
                yield cur
            return
        with pooled() as own, own.cursor() as cur:
            yield cur

    def notify(self, cur: psycopg.Cursor, rows: Sequence[Sequence[Any]]) -> None:
        """Wake the queues of rows ``(id, queue, state)`` that came back to ready."""
        queues = sorted({queue for _, queue, state in rows if state == "ready"})
        if queues:
            cur.execute(self.sql["queue_notify"], {"channel": self.channel, "queues": queues})

    def settled(self, cur: psycopg.Cursor, ids: Sequence[int]) -> None:
        """Tell waiters on results that ``ids`` settled (``job_settled``), 300 to a note."""
        if ids:
            notes = [",".join(map(str, ids[at:at + 300])) for at in range(0, len(ids), 300)]
            cur.execute(self.sql["job_settled"], {"settled": self.settled_channel, "notes": notes})

    # -- lifecycle ------------------------------------------------------------------------------

    def migrate(self, *, lock_timeout_ms: float = 10_000.0, upgrade: bool = True) -> list[str]:
        """Install or upgrade the schema (see ``pg_install``); safe from many processes at once,
        and one read without a lock when the schema is current."""
        with driver_errors(), self.connect(prepare_threshold=None) as conn:
            return install(conn, self.schema, lock_timeout_ms, upgrade=upgrade)

    def ping(self, timeout_s: float) -> None:
        """Open and close one connection, giving up after ``timeout_s`` (libpq counts whole
        seconds, and treats 1 as 2)."""
        with driver_errors():
            self.connect(connect_timeout=max(1, math.ceil(timeout_s))).close()

    def close(self) -> None:
        with self._pool_lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()
