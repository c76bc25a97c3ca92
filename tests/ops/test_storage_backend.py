"""One backend per database (server.storage.backend): what the driver raises becomes a storage error (a statement
timeout, a database out of reach, a refusal), and those get their HTTP answer in one place (server.defaults); the
read-only transaction of operations refuses writes; on both backends."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Column, Integer, MetaData, Table, create_engine, insert, text
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.pool import NullPool

from server.defaults import translate_exception
from server.errors import (
    InternalError,
    ServiceUnavailable,
    StatementTimedOut,
    StorageError,
    StorageUnavailable,
    TooCostly,
)
from server.storage.backend import (
    Postgres,
    Sqlite,
    backend_of,
    is_embedded,
    is_postgresql,
    refresh_statistics,
    reuses_deleted_ids,
    storage_error,
    translate_errors,
)
from server.storage.db import create_db_engine, once_more_if_dropped, writing_engine
from tests.support.contexts import make_settings

SLOW = {"sqlite": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000000) "
                  "SELECT count(*) FROM c",
        "postgresql": "SELECT pg_sleep(2)"}


def _dropped(orig: Exception) -> DBAPIError:
    return DBAPIError("SELECT 1", None, orig, connection_invalidated=True)  # type: ignore[arg-type]


@pytest.mark.parametrize("raised, kind, repeatable", [
    pytest.param(sqlite3.OperationalError("interrupted"), StatementTimedOut, False, id="sqlite-interrupted"),
    pytest.param(sqlite3.OperationalError("unable to open database file"), StorageUnavailable, False,
                 id="sqlite-cannot-open"),
    pytest.param(sqlite3.IntegrityError("UNIQUE constraint failed"), StorageError, False, id="sqlite-refused"),
    pytest.param(psycopg.errors.QueryCanceled("canceling statement due to statement timeout"), StatementTimedOut,
                 False, id="postgresql-statement-timeout"),
    pytest.param(psycopg.OperationalError("connection refused"), StorageUnavailable, False, id="postgresql-down"),
    pytest.param(psycopg.errors.InsufficientPrivilege("permission denied"), StorageError, False,
                 id="postgresql-refused"),
    pytest.param(OperationalError("SELECT 1", None, sqlite3.OperationalError("interrupted")),  # type: ignore[arg-type]
                 StatementTimedOut, False, id="wrapped-by-sqlalchemy"),
    pytest.param(_dropped(psycopg.OperationalError("server closed the connection")), StorageUnavailable, True,
                 id="connection-dropped"),
    pytest.param(IntegrityError("INSERT", None, sqlite3.IntegrityError("NOT NULL")),  # type: ignore[arg-type]
                 StorageError, False, id="wrapped-refusal"),
    pytest.param(PoolTimeout("QueuePool limit reached"), StorageUnavailable, False, id="no-connection-free"),
])
def test_driver_errors_become_storage_errors(raised: Exception, kind: type[StorageError], repeatable: bool) -> None:
    found = storage_error(raised)
    assert type(found) is kind and found.repeatable is repeatable


def test_other_errors_are_not_storage_errors() -> None:
    assert storage_error(ValueError("not the database")) is None


@pytest.mark.parametrize("error, answer, status, code", [
    pytest.param(StatementTimedOut("x"), TooCostly, 503, "too-costly", id="timed-out"),
    pytest.param(StorageUnavailable("x"), ServiceUnavailable, 503, "transient", id="unavailable"),
    pytest.param(StorageError("x"), InternalError, 500, "exception", id="refused"),
])
def test_storage_errors_are_answered_in_one_place(error: StorageError, answer: type, status: int, code: str) -> None:
    found = translate_exception(exception=error, interaction=None)
    assert type(found) is answer and found.status == status and found.code == code


@pytest.mark.parametrize("url, backend, embedded, postgresql", [
    pytest.param("sqlite:///x.db", Sqlite, True, False, id="sqlite"),
    pytest.param("postgresql://u@h/db", Postgres, False, True, id="postgresql"),
    pytest.param("postgres://u@h/db", Postgres, False, True, id="postgres-scheme"),
    pytest.param("postgresql+psycopg://u@h/db", Postgres, False, True, id="driver-named"),
])
def test_the_backend_of_a_url(url: str, backend: type, embedded: bool, postgresql: bool) -> None:
    assert type(backend_of(url)) is backend and is_embedded(url) is embedded and is_postgresql(url) is postgresql


def test_a_database_this_server_does_not_use_has_no_backend() -> None:
    with pytest.raises(ValueError):
        backend_of("mysql://u@h/db")
    assert not is_embedded("not a url") and not is_postgresql("mysql://u@h/db")


def test_postgresql_connect_arguments_carry_the_timeout_and_options() -> None:
    args = Postgres().connect_args(timeout_ms=500, connect_timeout_s=3, plan_cache_mode="force_custom_plan")
    assert args["options"] == ("-c statement_timeout=500 -c jit=off -c client_connection_check_interval=1000 "
                               "-c plan_cache_mode=force_custom_plan")  # bounded sessions: no JIT (issue 39)
    assert args["connect_timeout"] == 3 and args["keepalives"] == 1
    assert "options" not in Postgres().connect_args(timeout_ms=None, connect_timeout_s=3)


def test_a_statement_past_the_timeout_raises_statement_timed_out(database_url: str, tmp_path: Path) -> None:
    engine = create_db_engine(make_settings(database_url, tmp_path, database={"statement_timeout_ms": 50}))
    try:
        with pytest.raises(StatementTimedOut) as info, engine.connect() as conn:
            conn.execute(text(SLOW[backend_of(engine).name]))
        assert not isinstance(info.value, DBAPIError)
    finally:
        engine.dispose()


@pytest.mark.parametrize("url", [
    pytest.param("sqlite:////nonexistent-dir/x/y.db", id="sqlite"),
    pytest.param("postgresql://postgres@127.0.0.1:1/none", id="postgresql", marks=pytest.mark.postgres),
])
def test_a_database_out_of_reach_raises_storage_unavailable(url: str, tmp_path: Path) -> None:
    engine = create_db_engine(make_settings(url, tmp_path, database={"connect_timeout_seconds": 1}))
    try:
        with pytest.raises(StorageUnavailable), engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    finally:
        engine.dispose()


def test_an_engine_whose_dialect_takes_a_freed_ones_address_still_raises_storage_errors() -> None:
    """A flake found in a full run (`check_serving_databases` raised SQLAlchemy's OperationalError for a primary
    down): SQLAlchemy's `event.contains` keys by the target's id, and a new engine's dialect can take the address
    of a freed one whose listeners still await the garbage collector (held here), so the new engine was taken as
    translating its errors when it was not. Each engine is asked of its own listeners."""
    held, freed, reused = [], set(), 0
    for _ in range(2000):
        engine = translate_errors(create_engine("postgresql+psycopg://postgres@127.0.0.1:1/none", poolclass=NullPool))
        reused += id(engine.dialect) in freed
        with pytest.raises(StorageUnavailable), engine.connect():
            pass
        held.append(engine.dialect.dispatch.handle_error)  # as a garbage cycle holds it until collected
        freed.add(id(engine.dialect))
        engine.dispose()
        del engine
        if reused >= 3:
            break
    assert reused >= 3, "no dialect took a freed one's address: the case was not tried"


def test_the_read_only_transaction_refuses_writes(database_url: str, tmp_path: Path) -> None:
    settings = make_settings(database_url, tmp_path)
    with writing_engine(settings) as writer, writer.begin() as conn:
        conn.execute(text("CREATE TABLE kept (x INTEGER)"))
    engine = create_db_engine(settings)
    try:
        with engine.connect() as conn:
            with backend_of(conn).read_only(conn) as reading:
                assert reading.execute(text("SELECT count(*) FROM kept")).scalar() == 0
            with pytest.raises(StorageError), backend_of(conn).read_only(conn) as reading:  # SQLite: an
                reading.execute(text("INSERT INTO kept VALUES (1)"))  # OperationalError, 503 as before
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM kept")).scalar() == 0
    finally:
        engine.dispose()


def test_the_read_only_transaction_reads_one_snapshot(database_url: str, tmp_path: Path) -> None:
    """Its statements see the same commits: a write committed between two of them is seen by neither (a Bulk export
    reads a type by several statements; on SQLite each read its own snapshot, and a resource changed meanwhile was
    written twice)."""
    settings = make_settings(database_url, tmp_path)
    with writing_engine(settings) as writer:
        with writer.begin() as conn:
            conn.execute(text("CREATE TABLE kept (x INTEGER)"))
        engine = create_db_engine(settings)
        try:
            with engine.connect() as conn, backend_of(conn).read_only(conn) as reading:
                assert reading.execute(text("SELECT count(*) FROM kept")).scalar() == 0
                with writer.begin() as other:
                    other.execute(text("INSERT INTO kept VALUES (1)"))
                assert reading.execute(text("SELECT count(*) FROM kept")).scalar() == 0
            with engine.connect() as conn:
                assert conn.execute(text("SELECT count(*) FROM kept")).scalar() == 1
        finally:
            engine.dispose()


def _kept() -> tuple[Table, MetaData]:
    metadata = MetaData()
    return Table("kept", metadata, Column("id", Integer, primary_key=True), Column("x", Integer)), metadata


def test_whether_a_deleted_id_is_given_again_is_what_the_backend_says(database_url: str, tmp_path: Path) -> None:
    """The row holding the highest id deleted, the next insert gets that id again on SQLite, not on PostgreSQL (a
    writer that must never give an id twice asks reuses_deleted_ids)."""
    kept, metadata = _kept()
    with writing_engine(make_settings(database_url, tmp_path)) as engine, engine.begin() as conn:
        metadata.create_all(conn)
        conn.execute(insert(kept), [{"x": 1}, {"x": 2}])
        conn.execute(kept.delete().where(kept.c.id == 2))
        given = conn.execute(insert(kept).values(x=3)).inserted_primary_key[0]
        assert (given == 2) is reuses_deleted_ids(conn)


@pytest.mark.parametrize("database_url, statistics, found", [
    pytest.param("sqlite", "SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'", 0, id="sqlite-none"),
    pytest.param("postgresql", "SELECT reltuples::int FROM pg_class WHERE relname = 'kept'", 100,
                 id="postgresql-analyzed", marks=pytest.mark.postgres),
], indirect=["database_url"])
def test_refreshed_statistics_see_the_rows_the_transaction_wrote(database_url: str, statistics: str, found: int,
                                                                  tmp_path: Path) -> None:
    kept, metadata = _kept()
    with writing_engine(make_settings(database_url, tmp_path)) as engine, engine.begin() as conn:
        metadata.create_all(conn)
        conn.execute(insert(kept), [{"x": i} for i in range(100)])
        refresh_statistics(conn, kept)
        assert conn.execute(text(statistics)).scalar() == found


DROPPED = StorageUnavailable("server closed the connection", repeatable=True)


@pytest.mark.parametrize("raised, runs, answer", [
    pytest.param([], 1, "rows", id="answered"),
    pytest.param([DROPPED], 2, "rows", id="dropped-then-answered"),
    pytest.param([DROPPED, DROPPED], 2, StorageUnavailable, id="dropped-twice"),
    pytest.param([StorageUnavailable("cannot connect")], 1, StorageUnavailable, id="unreachable-not-again"),
    pytest.param([StatementTimedOut("canceling statement")], 1, StatementTimedOut, id="timed-out-not-again"),
])
def test_a_read_runs_once_more_only_when_its_connection_was_dropped(raised: list[StorageError], runs: int,
                                                                    answer: str | type[StorageError]) -> None:
    """The one rule the serving paths share (the loop's blocking steps, a request's thread, the readiness probe)."""
    calls: list[int] = []

    def work() -> str:
        calls.append(1)
        if len(calls) <= len(raised):
            raise raised[len(calls) - 1]
        return "rows"

    if isinstance(answer, str):
        assert once_more_if_dropped(work) == answer
    else:
        with pytest.raises(answer):
            once_more_if_dropped(work)
    assert len(calls) == runs
