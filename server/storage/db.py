"""Database engines for SQLite (embedded default) and PostgreSQL (production)."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from server.errors import ConfigError, StorageUnavailable
from server.settings import Settings
from server.storage.backend import SQLITE_BUSY_S, SQLITE_PRAGMAS, BoundedPool, backend_of, translate_errors
from server.storage.replicas import MAX_OVERFLOW, PRIMARY, Target, create_read_engine, replica_targets
from server.storage.timeouts import install_sqlite_timeout
from server.storage.watchdog import watch

T = TypeVar("T")


def normalize_url(url: str) -> str:
    """postgresql://... means psycopg 3 here."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def create_db_engine(settings: Settings, *, writing: bool = False, bounded: bool = False) -> Engine:
    """The serving engine has the per-statement timeout and reads from `database.read_urls` when there are
    any; a writing one (migrate, load, demo) has no timeout and always uses the primary, `database.url`; a
    `bounded` writing one (the writes a request waits on) has the statement timeout and the watchdog of serving.
    Every one raises storage errors (server.errors), not the driver's."""
    return translate_errors(_engine(settings, writing, bounded))


def _engine(settings: Settings, writing: bool, bounded: bool) -> Engine:
    url = normalize_url(settings.database_url)
    database = settings.database
    backend = backend_of(url)
    timeout_ms = 0 if writing and not bounded else database.statement_timeout_ms
    connect_args = backend.connect_args(timeout_ms=timeout_ms, connect_timeout_s=database.connect_timeout_seconds)
    if backend.embedded:
        path = make_url(url).database
        if writing and path and path != ":memory:":  # the writer creates the file (serve migrates it first)
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # a file where a folder should be (the commands check it first: checks.py)
                raise ConfigError(f"the database {path}: cannot make its folder {Path(path).parent} "
                                  f"({exc.strerror or exc}); check database.url or server.data_dir") from None
        engine = create_engine(url, connect_args=connect_args)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
            cursor = dbapi_connection.cursor()
            for pragma in SQLITE_PRAGMAS:
                cursor.execute(f"PRAGMA {pragma}")
            cursor.close()

        if not writing:
            install_sqlite_timeout(engine, database.statement_timeout_ms)
        return engine
    if writing and not bounded:
        return create_engine(url, pool_pre_ping=True, connect_args=connect_args, poolclass=BoundedPool)
    if writing:  # the primary, for short writes a request waits on (Bulk Data's jobs): bounded as a read is
        engine = create_engine(url, pool_size=database.pool_size, max_overflow=MAX_OVERFLOW, poolclass=BoundedPool,
                               pool_timeout=wait_bound_s(settings), hide_parameters=True, connect_args=connect_args)
        watch(engine, answer_bound_s(settings), statement_timeout_s(settings))
        return engine
    # serving: a connection is not pinged at checkout (a round trip per request): a dropped one fails its
    # request once, which the endpoint repeats (reads are safe to repeat) on a fresh connection
    if database.read_urls:  # replicas serve the reads; the primary only when none answers
        engine = create_read_engine(replica_targets(database.read_urls, normalize_url), Target(PRIMARY, url),
                                    pool_size=database.pool_size, connect_args=connect_args,
                                    retry_after_s=database.replica_retry_seconds, pool_timeout=wait_bound_s(settings))
    else:
        engine = create_engine(url, pool_size=database.pool_size, max_overflow=MAX_OVERFLOW, poolclass=BoundedPool,
                               pool_timeout=wait_bound_s(settings), connect_args=connect_args, hide_parameters=True)
    watch(engine, answer_bound_s(settings), statement_timeout_s(settings))
    return engine


ANSWER_GRACE_S = 1.0  # past the statement timeout, what the server's own cancellation may take to arrive


def answer_bound_s(settings: Settings) -> float:
    """How long a statement waits for PostgreSQL's answer before the connection is deemed dead (the database's
    statement_timeout fires first when it hears the statement)."""
    timeout_ms = settings.database.statement_timeout_ms or 60_000  # 0: no server timeout; a silent network still ends
    return timeout_ms / 1000 + ANSWER_GRACE_S


def statement_timeout_s(settings: Settings) -> float:
    timeout_ms = settings.database.statement_timeout_ms
    return timeout_ms / 1000 if timeout_ms > 0 else float("inf")


def once_more_if_dropped(work: Callable[[], T]) -> T:
    """`work`, run once more when the database dropped the connection it ran on (StorageUnavailable, `repeatable`):
    the pool has let the dead connection go, and `work`, opening its connection itself, takes a new one. A second
    failure is raised. For reads (a write may have been committed before the connection dropped)."""
    try:
        return work()
    except StorageUnavailable as exc:
        if not exc.repeatable:
            raise
    return work()


def wait_bound_s(settings: Settings) -> float:
    """The longest a request waits for the database in all: a statement, then one new connection."""
    return answer_bound_s(settings) + settings.database.connect_timeout_seconds


def analyze(engine: Engine, wait_s: float | None = None) -> None:
    """Fresh planner statistics after a load: a plan made without them can sort a whole table for one page.
    `wait_s`: how long to wait for another writer's lock (SQLite's ANALYZE writes) before StorageBusy."""
    sqlite = engine.dialect.name == "sqlite"
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if wait_s is not None:
            conn.exec_driver_sql(f"PRAGMA busy_timeout = {int(wait_s * 1000)}" if sqlite
                                 else f"SET lock_timeout = {int(wait_s * 1000)}")
        try:
            conn.exec_driver_sql("ANALYZE")
        finally:  # the pooled connection waits as the others do again
            if wait_s is not None:
                conn.exec_driver_sql(f"PRAGMA busy_timeout = {SQLITE_BUSY_S * 1000}" if sqlite
                                     else "RESET lock_timeout")


@contextmanager
def writing_engine(settings: Settings) -> Iterator[Engine]:
    """An engine on the primary for a command that writes (no statement timeout), disposed afterwards."""
    engine = create_db_engine(settings, writing=True)
    try:
        yield engine
    finally:
        engine.dispose()


@contextmanager
def reading_engine(settings: Settings) -> Iterator[Engine]:
    """An engine as `serve` reads (the statement timeout, the replicas), disposed afterwards: for commands that
    only read."""
    engine = create_db_engine(settings)
    try:
        yield engine
    finally:
        engine.dispose()
