"""One backend per database this server uses, chosen once from the URL or the dialect: everything that differs
between SQLite (embedded) and PostgreSQL (production) is here and nowhere else — connection settings, the
read-only transaction, the writers' lock, the bulk copy, and which of the driver's errors mean a statement timed
out or the database is unavailable (raised as server.errors' storage errors, never as the driver's or
SQLAlchemy's). The SQL constructs that compile differently per dialect are in server.storage.dialects."""
from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import psycopg
from sqlalchemy import Connection, Engine, Table, event, false, text, update
from sqlalchemy.engine import Dialect, URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.pool import QueuePool

from server.errors import SchemaMissing, StatementTimedOut, StorageBusy, StorageError, StorageFull, StorageUnavailable

DRIVERS = frozenset({"sqlite", "sqlite+pysqlite", "postgresql", "postgres", "postgresql+psycopg"})  # URLs' schemes
CHECK_EVERY = 20_000  # SQLite virtual-machine instructions between two looks at the clock (a job's budget)
SQLITE_BUSY_S = 30  # how long a SQLite connection waits for another's write lock
SQLITE_PRAGMAS = ("journal_mode=WAL", "foreign_keys=ON", "synchronous=NORMAL")
QUERY_CANCELED = "57014"  # PostgreSQL's SQLSTATE of a statement cancelled by its statement_timeout
UNDEFINED = frozenset({"42P01", "42703"})  # undefined table, undefined column: a schema behind the server's
DISK_FULL = frozenset({"53100"})  # disk_full: nothing more can be written
LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout: another transaction held the lock
# a bounded session (serving, and the writes a request waits on): no JIT compilation, which heeds neither
# statement_timeout nor a cancel (a costly search compiled for 10 s past a 3 s timeout, its backend for minutes
# past the request); a backend whose client is gone stops within a second, not when it next writes to it
BOUNDED_SESSION = {"jit": "off", "client_connection_check_interval": "1000"}
# a database that vanishes without closing its connections (a dropped network) is noticed in about 40 s,
# not after the kernel's 15 minutes of retransmissions
DEAD_PEER = {"keepalives": 1, "keepalives_idle": 15, "keepalives_interval": 5, "keepalives_count": 3,
             "tcp_user_timeout": 30_000}


class Backend(Protocol):
    name: ClassVar[str]
    embedded: ClassVar[bool]  # a file the server itself creates, migrates and renders (SQLite)
    copies_binary: ClassVar[bool]  # whole columns can be read by a binary COPY (Bulk Data's bodies)
    # an integer primary key may be given again once the row holding the highest is deleted (SQLite without
    # AUTOINCREMENT); a sequence never gives a number twice (PostgreSQL)
    reuses_deleted_ids: ClassVar[bool]

    def connect_args(self, *, timeout_ms: int | None, connect_timeout_s: int, **options: str) -> dict[str, Any]:
        """The driver's connect arguments: the statement timeout (None: the database's own; 0: none), options."""
        ...

    def read_only(self, conn: Connection) -> AbstractContextManager[Connection]:
        """One transaction on `conn` that refuses writes and reads one snapshot (PostgreSQL: REPEATABLE READ, READ
        ONLY; SQLite: query_only, a deferred transaction): several statements see the same commits."""
        ...

    def exclusive(self, conn: Connection, key: int, table: Table) -> None:
        """Hold the writers' lock `key` until the transaction ends (one writer at a time, across workers): an
        advisory lock, or (SQLite) the database's write lock, taken by a write of `table` that changes nothing."""
        ...

    def driver_error(self, exc: BaseException, *, dropped: bool = False) -> StorageError | None:
        """The storage error a driver error means (None: not the driver's)."""
        ...

    def waiting_at_most(self, conn: Connection, seconds: float) -> AbstractContextManager[None]:
        """While in the block, `conn` waits `seconds` at most for another writer's lock (then StorageBusy);
        PostgreSQL's advisory lock is not bounded here."""
        ...

    def within(self, conn: Connection, seconds: float) -> AbstractContextManager[Connection]:
        """The statements run on `conn` inside finish within `seconds` from now, in all (an export job's budget),
        else fail as StatementTimedOut; PostgreSQL: in one transaction (the one open on `conn`, such as
        read_only's, or a new one), without JIT."""
        ...

    def refresh_statistics(self, conn: Connection, table: Table) -> None:
        """Let the planner see what the transaction on `conn` wrote to `table`: PostgreSQL's statistics taken on a
        table still empty (a fresh database) make it walk many new rows once per row (ANALYZE, transactional);
        SQLite: nothing."""
        ...


@dataclass(frozen=True)
class Sqlite:
    name: ClassVar[str] = "sqlite"
    embedded: ClassVar[bool] = True
    copies_binary: ClassVar[bool] = False
    reuses_deleted_ids: ClassVar[bool] = True

    def connect_args(self, *, timeout_ms: int | None, connect_timeout_s: int, **options: str) -> dict[str, Any]:
        return {"check_same_thread": False, "timeout": SQLITE_BUSY_S}  # the timeout: server.storage.timeouts

    @contextmanager
    def read_only(self, conn: Connection) -> Iterator[Connection]:
        driver = conn.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        conn.exec_driver_sql("PRAGMA query_only = ON")
        began = not driver.in_transaction
        if began:  # one snapshot: a deferred transaction, fixed by its first read (WAL: writers go on meanwhile)
            driver.execute("BEGIN")
        try:
            yield conn
        finally:
            if began and driver.in_transaction:
                driver.execute("ROLLBACK")
            conn.exec_driver_sql("PRAGMA query_only = OFF")

    @contextmanager
    def waiting_at_most(self, conn: Connection, seconds: float) -> Iterator[None]:
        driver = conn.connection.driver_connection  # a PRAGMA outside SQLAlchemy's transaction
        assert driver is not None
        driver.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")
        try:
            yield
        finally:
            driver.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_S * 1000}")

    def exclusive(self, conn: Connection, key: int, table: Table) -> None:
        # SQLite's one write lock, taken by a write that changes nothing (the implicit BEGIN precedes it)
        column = next(iter(table.c))
        conn.execute(update(table).where(false()).values({column: column}))

    @contextmanager
    def within(self, conn: Connection, seconds: float) -> Iterator[Connection]:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        deadline = time.monotonic() + seconds
        raw.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, CHECK_EVERY)
        try:
            yield conn
        finally:
            raw.set_progress_handler(None, 0)

    def refresh_statistics(self, conn: Connection, table: Table) -> None:
        pass

    def driver_error(self, exc: BaseException, *, dropped: bool = False) -> StorageError | None:
        if isinstance(exc, sqlite3.OperationalError):
            if "interrupted" in str(exc):  # server.storage.timeouts' progress handler
                return StatementTimedOut(_first_line(exc))
            if str(exc).startswith(("no such table", "no such column")):
                return SchemaMissing(_first_line(exc))
            if "disk is full" in str(exc):  # SQLITE_FULL: "database or disk is full"
                return StorageFull(_first_line(exc))
            if "database is locked" in str(exc) or "database is busy" in str(exc):
                return StorageBusy(_first_line(exc))
            return StorageUnavailable(_first_line(exc), repeatable=dropped)
        if isinstance(exc, sqlite3.Error):
            return (StorageUnavailable if dropped else StorageError)(_first_line(exc), repeatable=dropped)
        return None


@dataclass(frozen=True)
class Postgres:
    name: ClassVar[str] = "postgresql"
    embedded: ClassVar[bool] = False
    copies_binary: ClassVar[bool] = True
    reuses_deleted_ids: ClassVar[bool] = False

    def connect_args(self, *, timeout_ms: int | None, connect_timeout_s: int, **options: str) -> dict[str, Any]:
        settings = ({} if timeout_ms is None else {"statement_timeout": str(timeout_ms)}) | (
            BOUNDED_SESSION if timeout_ms else {}) | options
        found: dict[str, Any] = {"connect_timeout": connect_timeout_s, **DEAD_PEER}
        if settings:
            found["options"] = " ".join(f"-c {k}={v}" for k, v in settings.items())
        return found

    @contextmanager
    def read_only(self, conn: Connection) -> Iterator[Connection]:
        conn = conn.execution_options(isolation_level="REPEATABLE READ")  # reset when the pool takes it back
        with conn.begin():
            conn.exec_driver_sql("SET TRANSACTION READ ONLY")  # one snapshot, no write
            yield conn

    def exclusive(self, conn: Connection, key: int, table: Table) -> None:
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})

    @contextmanager
    def waiting_at_most(self, conn: Connection, seconds: float) -> Iterator[None]:
        yield

    @contextmanager
    def within(self, conn: Connection, seconds: float) -> Iterator[Connection]:
        # SET LOCAL: until the transaction ends, never on the pooled connection's next use
        with nullcontext() if conn.in_transaction() else conn.begin():
            conn.exec_driver_sql(f"SET LOCAL statement_timeout = {max(1, int(seconds * 1000))}")
            conn.exec_driver_sql("SET LOCAL jit = off")
            yield conn

    def refresh_statistics(self, conn: Connection, table: Table) -> None:
        conn.exec_driver_sql(f"ANALYZE {conn.dialect.identifier_preparer.format_table(table)}")

    def driver_error(self, exc: BaseException, *, dropped: bool = False) -> StorageError | None:
        if isinstance(exc, psycopg.Error) and getattr(exc, "sqlstate", None) == QUERY_CANCELED:
            return StatementTimedOut(_first_line(exc))
        if isinstance(exc, psycopg.Error) and getattr(exc, "sqlstate", None) in DISK_FULL:
            return StorageFull(_first_line(exc))
        if isinstance(exc, psycopg.Error) and getattr(exc, "sqlstate", None) == LOCK_NOT_AVAILABLE:
            return StorageBusy(_first_line(exc))
        if isinstance(exc, psycopg.Error) and getattr(exc, "sqlstate", None) in UNDEFINED:
            return SchemaMissing(_first_line(exc))
        if isinstance(exc, psycopg.OperationalError) or dropped and isinstance(exc, psycopg.Error):
            return StorageUnavailable(_first_line(exc), repeatable=dropped)
        if isinstance(exc, psycopg.Error):
            return StorageError(_first_line(exc))
        return None


BACKENDS: tuple[Backend, ...] = (Sqlite(), Postgres())


def backend_of(where: Engine | Connection | Dialect | URL | str) -> Backend:
    """The backend of an engine, a connection, a dialect or a URL (postgres:// and driver suffixes included)."""
    if isinstance(where, Engine | Connection):
        where = where.dialect
    name = where.name if isinstance(where, Dialect) else make_url(where).get_backend_name()
    name = "postgresql" if name == "postgres" else name
    for backend in BACKENDS:
        if backend.name == name:
            return backend
    raise ValueError(f"{name} is not a database this server uses")


def reuses_deleted_ids(conn: Connection) -> bool:
    """Whether the database of `conn` may give a deleted row's integer id again (SQLite), where a sequence never
    does (PostgreSQL): a writer that must never give an id twice (one a purge erased) then gives ids itself."""
    return backend_of(conn).reuses_deleted_ids


def refresh_statistics(conn: Connection, table: Table) -> None:
    """After a large write to `table` in the transaction on `conn`: the planner sees the new rows in the statements
    that follow (Backend.refresh_statistics)."""
    backend_of(conn).refresh_statistics(conn, table)


def is_embedded(url: str) -> bool:
    """The URL names a SQLite database (the embedded one the server creates and migrates itself)."""
    return _named(url) == Sqlite.name


def is_postgresql(url: str) -> bool:
    return _named(url) == Postgres.name


def unknown_driver(url: URL) -> str | None:
    """The URL's driver when this server does not use it (None: one it uses)."""
    return None if url.drivername in DRIVERS else url.drivername


def _named(url: str) -> str | None:
    try:
        return backend_of(url).name
    except (ArgumentError, ValueError):
        return None


def storage_error(exc: BaseException) -> StorageError | None:
    """What a SQLAlchemy (or driver) error raised by an engine of this server means, as a storage error."""
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, PoolTimeout):
        return StorageUnavailable(f"no database connection free in time: {_first_line(exc)}")
    if isinstance(exc, DBAPIError):
        orig, dropped = exc.orig, bool(exc.connection_invalidated)
        for backend in BACKENDS:
            if orig is not None and (found := backend.driver_error(orig, dropped=dropped)) is not None:
                return found
        if isinstance(exc, OperationalError) or dropped:
            return StorageUnavailable(_first_line(orig or exc), repeatable=dropped)
        return StorageError(_first_line(orig or exc))
    for backend in BACKENDS:
        if (found := backend.driver_error(exc)) is not None:
            return found
    return None


class BoundedPool(QueuePool):
    """A queue pool whose wait for a free connection, past its timeout, raises StorageUnavailable."""

    def _do_get(self) -> Any:
        try:
            return super()._do_get()
        except PoolTimeout as exc:
            raise StorageUnavailable(f"no database connection free in time: {_first_line(exc)}") from exc


def translate_errors(engine: Engine) -> Engine:
    """The engine raises storage errors, not SQLAlchemy's (statements, and connecting): installed once, as the
    engine's own listeners say (SQLAlchemy's `event.contains` keys by the target's id: a new engine's dialect may
    take the address of a freed one whose listeners still await the garbage collector, and be taken as
    translated when it is not)."""
    if _translated not in engine.dialect.dispatch.handle_error:
        event.listen(engine, "handle_error", _translated)
    return engine


def _translated(context: Any) -> StorageError | None:
    if context.sqlalchemy_exception is None or context.is_pre_ping:  # not the driver's (a type's processing...),
        return None  # or a ping at checkout (SQLAlchemy replaces a dead connection itself): as it is
    found = storage_error(context.original_exception)
    if found is None:
        return None
    dropped = bool(context.is_disconnect)
    if dropped and not isinstance(found, StatementTimedOut):
        found = StorageUnavailable(found.message, repeatable=True)
    return found


def _first_line(exc: BaseException) -> str:
    text_ = str(exc).strip()
    return text_.splitlines()[0] if text_ else type(exc).__name__
