"""The driver's own connection on the event loop, for the statements of interactions (server.engine.drivers): no
thread hop, no pool checkout, no SQLAlchemy execution machinery. SQLite: one sqlite3 connection, used by the loop
only, for statements bounded by a primary key or an index range (a read, a page); PostgreSQL: psycopg's async
connections (as many as database.pool_size), the loop waiting on the socket.

Same semantics as the serving engine: autocommit reads, the per-statement timeout (PostgreSQL's statement_timeout,
SQLite's progress handler), a dead connection dropped and the statement repeated once on a new one. The driver's
errors are raised as the storage errors the serving engine raises (server.storage.backend), so they answer what
the engine's would (503, TooCostly...). None with read replicas (database.read_urls): the serving engine routes
those reads."""
from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, time as time_of_day, timedelta
from decimal import Decimal
from typing import Any, Protocol
from uuid import UUID

import psycopg
from sqlalchemy.engine import make_url

from server.errors import StorageError
from server.settings import Settings
from server.storage.budget import left_s
from server.storage.backend import Postgres, Sqlite
from server.storage.db import answer_bound_s, normalize_url, wait_bound_s
from server.storage.watchdog import cut
from server.storage.timeouts import CHECK_EVERY

Row = tuple[Any, ...]
LOOP_CACHE_KIB = 32 * 1024  # the SQLite page cache of the loop's connection (grows as pages are read, to this)


class HotDatabase(Protocol):
    database: str  # what server.storage.freshness.database_of names it

    async def rows(self, sql: str, params: Sequence[Any] | dict[str, Any], budget_s: float | None = None) -> list[Row]:
        """The statement's rows; `budget_s`: a driver that blocks the loop gives up after that long (OverBudget)."""
        ...

    async def close(self) -> None: ...


KEEP_RESULT_BYTES = 64 * 1024  # a cursor keeps its last result (libpq's) until its next statement
SCALARS = (bool, int, float, Decimal, UUID, date, time_of_day, timedelta)  # values of a bounded size


class OverBudget(Exception):
    """A statement ran longer on the loop than its budget: the caller takes the worker thread instead."""


def hot_database(settings: Settings, database_url: str) -> HotDatabase | None:
    """The loop's database reading `database_url` (the serving engine's), None when the hot path cannot read it
    (replicas, a database in memory)."""
    if settings.database.read_urls:
        return None
    url = make_url(normalize_url(database_url))
    if url.drivername.startswith("sqlite"):
        path = url.database
        if not path or path == ":memory:" or path.startswith("file:"):
            return None
        return SqliteOnLoop(path, settings.database.statement_timeout_ms)
    if url.drivername.startswith("postgresql"):
        return PostgresOnLoop(url.set(drivername="postgresql").render_as_string(hide_password=False),
                              settings.database.pool_size, settings.database.statement_timeout_ms,
                              settings.database.connect_timeout_seconds, answer_bound_s(settings),
                              wait_bound_s(settings))
    return None


async def _cancel(conn: Any) -> None:
    """Ask PostgreSQL to cancel the connection's statement (bounded: a silent database is cut by the watchdog)."""
    try:
        await conn.cancel_safe(timeout=5)
    except Exception:  # noqa: BLE001 - finished or closed meanwhile: nothing to cancel
        return


def _raised(exc: Exception, sql: str) -> StorageError:
    """The driver's error as the serving engine raises it (a storage error)."""
    backend = Sqlite() if isinstance(exc, sqlite3.Error) else Postgres()
    found = backend.driver_error(exc)
    return found if found is not None else StorageError(f"{type(exc).__name__}: {exc}")


class SqliteOnLoop:
    database = "primary"

    def __init__(self, path: str, timeout_ms: int) -> None:
        self.path = path
        self.timeout_s = timeout_ms / 1000 if timeout_ms > 0 else None
        self._conn: sqlite3.Connection | None = None
        self._deadline = float("inf")

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, **Sqlite().connect_args(timeout_ms=None,
                                                                                        connect_timeout_s=0))
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA query_only=ON")  # it only reads
        # nearly every read runs here: a page cache that holds the indexes' upper levels (SQLite's default of 2 MB
        # does not at 100k units: a read by id then costs 4-5x its statement in page reads)
        conn.execute(f"PRAGMA cache_size=-{LOOP_CACHE_KIB}")
        conn.set_progress_handler(lambda: 1 if time.monotonic() > self._deadline else 0, CHECK_EVERY)
        return conn

    async def rows(self, sql: str, params: Sequence[Any] | dict[str, Any], budget_s: float | None = None) -> list[Row]:
        conn = self._conn if self._conn is not None else self._connect()
        self._conn = conn
        left = left_s()  # the request's budget
        limit = min(t for t in (self.timeout_s, budget_s, left, float("inf")) if t is not None)
        self._deadline = time.monotonic() + limit
        try:
            return conn.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            if ("interrupted" in str(exc) and budget_s is not None and limit == budget_s != self.timeout_s
                    and limit != left):
                raise OverBudget(sql) from exc
            raise _raised(exc, sql) from exc
        except sqlite3.Error as exc:
            raise _raised(exc, sql) from exc
        finally:
            self._deadline = float("inf")

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _small(found: list[Row]) -> bool:
    """Whether a cursor may keep this result until its connection's next statement (a read, a count): one row at
    most, of text and bytes within KEEP_RESULT_BYTES and otherwise scalars. A page's rows, a large body, a value
    of unknown size (JSON: a geometry) go with a cursor dropped."""
    if len(found) > 1:
        return False
    size = 0
    for value in found[0] if found else ():
        if isinstance(value, (str, bytes)):
            size += len(value)
        elif value is not None and not isinstance(value, SCALARS):
            return False
    return size <= KEEP_RESULT_BYTES


@dataclass(frozen=True)
class Held:
    """A connection of the loop's pool and the one cursor its statements run on (a cursor made per statement
    costs about 25 us of client CPU)."""
    conn: Any  # psycopg.AsyncConnection
    cursor: Any  # its binary AsyncCursor

    @classmethod
    def of(cls, conn: Any) -> Held:
        """The connection with a new cursor (results in binary format)."""
        return cls(conn, conn.cursor(binary=True))


class PostgresOnLoop:
    database = "primary"

    def __init__(self, conninfo: str, size: int, timeout_ms: int, connect_timeout_s: int, answer_s: float,
                 bound_s: float) -> None:
        self.conninfo = conninfo
        self.size = max(1, size)
        # statements prepared once per connection, planned for each one's values (a name prefix, a subtree: what
        # they select decides the plan, which a generic plan would not know); results in binary format (a page of
        # stored bodies comes as bytes, not hex text to decode)
        self.answer_s = answer_s  # a statement unanswered this long: the database is deemed silent
        self.timeout_s = timeout_ms / 1000 if timeout_ms > 0 else float("inf")
        self.bound_s = bound_s  # the longest wait for a connection (behind others, then connecting)
        self.kwargs: dict[str, Any] = {"autocommit": True, **Postgres().connect_args(
            timeout_ms=timeout_ms, connect_timeout_s=connect_timeout_s, plan_cache_mode="force_custom_plan")}
        self._idle: list[Held] = []
        self._open = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        # takers waiting, in order of arrival: each is handed a freed connection, or a place to make one (None)
        self._waiting: deque[asyncio.Future[Held | None]] = deque()

    def _bind(self) -> asyncio.AbstractEventLoop:
        """Connections belong to one loop: a new loop (a test's second client) starts afresh."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._idle, self._open, self._waiting = loop, [], 0, deque()
        return loop

    def _hand(self, handed: Held | None) -> bool:
        """`handed` (a connection freed, or None: a place to make one) to the first taker waiting; False when none
        waits."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(handed)
                return True
        return False

    async def _take(self) -> Held:
        """An idle connection at once when no taker waits before (no wait, no timer: the statement's common case);
        else, within bound_s, a new one while fewer than `size` are open, or what a statement ending hands on, in
        order of arrival (a taker that came later never takes a connection freed for one waiting)."""
        loop = self._bind()
        if self._idle and not self._waiting:
            return self._idle.pop()
        async with asyncio.timeout(self.bound_s):
            if self._waiting or self._open >= self.size:
                waiter: asyncio.Future[Held | None] = loop.create_future()
                self._waiting.append(waiter)
                try:
                    handed = await waiter
                except BaseException:  # cancelled (its request, the bound): _hand passes over its future
                    if waiter.done() and not waiter.cancelled():  # handed, then cancelled: on to the next
                        self._pass_on(waiter.result())
                    raise
                if handed is not None:
                    return handed
            else:
                self._open += 1
            try:  # a place of the `size` is ours: a new connection in it
                return Held.of(await psycopg.AsyncConnection.connect(self.conninfo, **self.kwargs))
            except BaseException:
                self._pass_on(None)
                raise

    def _pass_on(self, handed: Held | None) -> None:
        """A connection freed (`handed`), or a place (None: a connection closed or never made): to the first
        taker waiting, else kept (idle) or given up."""
        if self._hand(handed):
            return
        if handed is not None:
            self._idle.append(handed)
        else:
            self._open -= 1

    def _give(self, held: Held) -> None:
        self._bind()
        self._pass_on(held)

    async def _drop(self, held: Held) -> None:
        try:
            await held.conn.close()
        except Exception:  # noqa: BLE001 - a broken connection may fail to close
            pass
        self._bind()
        self._pass_on(None)

    async def rows(self, sql: str, params: Sequence[Any] | dict[str, Any], budget_s: float | None = None) -> list[Row]:
        """The statement's rows. A silent database (server.storage.watchdog): waiting for a connection, or making
        one, is bounded by bound_s; a statement unanswered after answer_s has its socket shut down (a cancelled
        task would wait for psycopg's own cancellation, through the same silent network), so it fails at once."""
        # budget_s: the loop waits on the socket, never blocked; a connection the server dropped fails once, and the
        # statement runs again on another
        for attempt in (1, 2):
            try:
                held = await self._take()
            except TimeoutError as exc:
                silent = psycopg.OperationalError(f"no connection to the database within {self.bound_s:g} s")
                raise _raised(silent, sql) from exc
            except psycopg.Error as exc:
                raise _raised(exc, sql) from exc
            silent: list[bool] = []
            conn = held.conn
            silent_after = asyncio.get_running_loop().call_later(
                self.answer_s, lambda c=conn: silent.append(True) or cut(c, self.answer_s))
            left = left_s()  # the request's budget, when less is left of it than the statement timeout: the
            # database is asked to cancel the statement then (57014, as for its own timeout: StatementTimedOut)
            cancels: list[asyncio.Task[None]] = []
            spent = None if left is None or left >= self.timeout_s else asyncio.get_running_loop().call_later(
                left, lambda c=conn: cancels.append(asyncio.ensure_future(_cancel(c))))
            try:
                await held.cursor.execute(sql, params, prepare=True)
                found = await held.cursor.fetchall()
            except psycopg.Error as exc:
                if conn.closed or conn.broken:
                    await self._drop(held)
                    if silent:  # the idle ones went through the same silent network: new connections, or none
                        await self._drop_idle()
                    if attempt == 1:
                        continue
                else:
                    self._give(held)
                raise _raised(exc, sql) from exc
            except BaseException:
                await self._drop(held)  # cancelled mid-statement: its state is unknown
                raise
            finally:
                silent_after.cancel()
                if spent is not None:
                    spent.cancel()
                for task in cancels:
                    await task
            self._give(held if _small(found) else Held.of(conn))
            return found
        raise AssertionError("unreachable")

    async def _drop_idle(self) -> None:
        self._bind()
        idle, self._idle = self._idle, []
        for held in idle:
            await self._drop(held)

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for held in idle:
            await held.conn.close()
        self._open = 0
