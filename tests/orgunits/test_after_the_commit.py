"""After the commit, the truth (issue 38 item 8, issue 37 item 7): a committed load never exits as failed. A step
afterwards that cannot get the write lock (another writer holds it: the planner statistics, pre-rendering) is skipped
with a warning and left to the next load, exit 0, the report printed; any other failure (a full disk, a broken pipe,
Ctrl-C) exits 3 saying what was committed and what to run. A failure before the commit says "nothing was written" and
names the real cause (a full disk, a connection lost), never "a bug". And an `$export` kick-off answers while a load
writes. On SQLite and PostgreSQL where the condition exists on both."""
from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, text

import plugins.orgunits.importers.transaction as transaction
import server.cli.data as data
from server.errors import StorageFull
from server.storage.backend import Postgres, Sqlite
from server.storage.db import normalize_url
from tests.support.bulk import ASYNC, kick_off
from tests.support.operator import LAKELAND, LAKELAND_CSV, LAKELAND_UNITS, Operator, operator, settings_path

__all__ = ["operator", "settings_path"]  # fixtures
LOAD = ("load", "mapped", str(LAKELAND_CSV), "--mapping", str(LAKELAND))


def served(operator: Operator) -> int:
    with operator.consumer() as client:
        return int(client.get("/fhir/Location", params={"_summary": "count"}).json()["total"])


@contextmanager
def another_writer(url: str) -> Iterator[None]:
    """A writer holding what the statistics need: SQLite's one write lock; on PostgreSQL, org_unit locked against the
    ANALYZE (a lock that conflicts with it)."""
    engine = create_engine(normalize_url(url))
    conn = engine.connect()
    try:
        if engine.dialect.name == "sqlite":
            conn.connection.driver_connection.execute("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")
            conn.exec_driver_sql("LOCK TABLE org_unit IN SHARE UPDATE EXCLUSIVE MODE")
        yield
    finally:
        conn.rollback() if engine.dialect.name != "sqlite" else conn.connection.driver_connection.rollback()
        conn.close()
        engine.dispose()


def test_statistics_another_writer_holds_are_skipped_and_the_load_succeeds(operator: Operator,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37 item 7: the post-commit ANALYZE needs the lock; another writer holds it past the wait: a warning, the
    report, exit 0."""
    operator.ok("migrate")
    monkeypatch.setattr(data, "STATISTICS_WAIT_S", 0.2)
    analyze = data.analyze

    def held_while_analyzing(engine: Engine, wait_s: float | None = None) -> None:
        with another_writer(operator.url):
            analyze(engine, wait_s)

    monkeypatch.setattr(data, "analyze", held_while_analyzing)
    status, said = operator.run(*LOAD)
    assert status == 0, said
    assert f"load mapped: Location: {LAKELAND_UNITS} inserted" in said  # the report, printed first
    assert "planner statistics skipped: another writer holds the database" in said
    assert "the next load (or `orgunit-fhir render`) does it" in said
    monkeypatch.undo()
    assert served(operator) == LAKELAND_UNITS


def test_a_full_disk_after_the_commit_exits_3_and_says_what_was_committed(operator: Operator,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38 item 8 as written: a first load on a nearly full disk commits, then the statistics cannot be written:
    never exit 1 with "check database.url"."""
    def full(engine: Engine, wait_s: float | None = None) -> None:
        with engine.connect() as conn:
            if engine.dialect.name != "sqlite":
                raise StorageFull("could not extend file: No space left on device")
            pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
            conn.exec_driver_sql(f"PRAGMA max_page_count = {pages}")  # SQLite's own: the file cannot grow
            conn.exec_driver_sql("CREATE TABLE filler AS SELECT * FROM org_unit_history")

    monkeypatch.setattr(data, "analyze", full)
    status, said = operator.run(*LOAD)
    assert status == 3, said
    assert f"the changes were committed (mapped: Location: {LAKELAND_UNITS} inserted" in said
    assert "and are served, but planner statistics failed afterwards: the disk holding the database is full" in said
    assert "run `orgunit-fhir render`" in said and "check database.url" not in said and "a bug" not in said
    monkeypatch.undo()
    assert served(operator) == LAKELAND_UNITS


def test_a_broken_pipe_after_the_commit_exits_3(operator: Operator, monkeypatch: pytest.MonkeyPatch) -> None:
    """`load --json | head -c 0`: the report cannot be printed; the load is committed and served all the same."""
    class Closed:
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    operator.ok("migrate")
    monkeypatch.setattr(data.sys, "stdout", Closed())
    status, said = operator.run(*LOAD, "--json")
    monkeypatch.undo()
    assert status == 3, said
    assert "but printing the report failed afterwards: the output was closed (a broken pipe" in said
    assert served(operator) == LAKELAND_UNITS


def test_a_full_disk_before_the_commit_says_nothing_was_written(operator: Operator,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills mid-transaction (SQLite's own limit, max_page_count): the cause is named, never the URL."""
    if not operator.url.startswith("sqlite"):
        pytest.skip("a full disk is simulated with SQLite's max_page_count (PostgreSQL: see the next test)")
    operator.ok("migrate")
    write_units = transaction.write_units

    def filling(conn: Any, *args: Any, **kwargs: Any) -> Any:
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
        conn.exec_driver_sql(f"PRAGMA max_page_count = {pages + 2}")
        return write_units(conn, *args, **kwargs)

    monkeypatch.setattr(transaction, "write_units", filling)
    status, said = operator.run(*LOAD)
    assert status == 1, said
    assert "the disk holding the database is full (database or disk is full): nothing was written" in said
    assert "check database.url" not in said and "a bug" not in said
    monkeypatch.undo()
    assert served(operator) == 0


@pytest.mark.parametrize("error, words", [
    pytest.param(psycopg.errors.DiskFull("could not extend file"), "StorageFull", id="postgresql-disk-full"),
    pytest.param(psycopg.errors.LockNotAvailable("canceling statement due to lock timeout"), "StorageBusy",
                 id="postgresql-lock-timeout"),
    pytest.param(sqlite3.OperationalError("database or disk is full"), "StorageFull", id="sqlite-full"),
    pytest.param(sqlite3.OperationalError("database is locked"), "StorageBusy", id="sqlite-locked"),
])
def test_each_backend_names_a_full_disk_and_a_lock_not_had(error: Exception, words: str) -> None:
    backend = Postgres() if isinstance(error, psycopg.Error) else Sqlite()
    assert type(backend.driver_error(error)).__name__ == words


def test_a_connection_lost_mid_load_says_nothing_was_written(operator: Operator,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL: the server ends the load's connection mid-transaction; never "unexpected PendingRollbackError (a
    bug)"."""
    if operator.url.startswith("sqlite"):
        pytest.skip("an embedded database has no connection to lose")
    operator.ok("migrate")
    write_units = transaction.write_units

    def dropped(conn: Any, *args: Any, **kwargs: Any) -> Any:
        killer = psycopg.connect(operator.url.replace("postgresql+psycopg", "postgresql"), autocommit=True)
        try:
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
        finally:
            killer.close()
        return write_units(conn, *args, **kwargs)

    monkeypatch.setattr(transaction, "write_units", dropped)
    status, said = operator.run(*LOAD)
    assert status == 1, said
    assert "the connection to the database" in said and "was lost" in said
    assert "nothing was written (its transaction was rolled back)" in said and "a bug" not in said, said
    monkeypatch.undo()
    assert served(operator) == 0


def test_an_export_kick_off_answers_while_a_load_writes(operator: Operator) -> None:
    """SQLite: the job row needs the one write lock, which a load holds: the kick-off waits 2 s at most, then 503
    with Retry-After naming the writer; PostgreSQL: loads and kick-offs take different locks, it is accepted."""
    operator.load_lakeland()
    with operator.consumer() as client, another_writer_lock(operator.url):
        answer = client.get("/fhir/$export", headers=ASYNC)
        if operator.url.startswith("sqlite"):
            assert answer.status_code == 503 and answer.headers["Retry-After"] == "10", answer.text
            assert "another writer holds the database" in answer.text
        else:
            assert answer.status_code == 202, answer.text
    with operator.consumer() as client:
        assert kick_off(client)  # the writer done: 202


@contextmanager
def another_writer_lock(url: str) -> Iterator[None]:
    """The lock a load holds from its first statement to its commit (server.storage.writes), held in a thread."""
    engine = create_engine(normalize_url(url))
    started, release = threading.Event(), threading.Event()

    def hold() -> None:
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                conn.connection.driver_connection.execute("BEGIN IMMEDIATE")
            else:
                conn.exec_driver_sql("BEGIN")
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": 0x6F72_6775_6E69})
            started.set()
            release.wait(30)
            conn.connection.driver_connection.rollback()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert started.wait(10)
        yield
    finally:
        release.set()
        thread.join(30)
        engine.dispose()
