"""Waiting for the writes begun before transactionTime, so that every version stamped at or before it is committed
when the export reads (the Bulk Data spec: "a server might need to wait for any pending transactions to resolve").

A writer stamps its versions with an instant taken just before its transaction starts (`load` does, and every
writer must, within `bulk.settle_seconds`). transactionTime is the kick-off's time less that margin, so a writer
stamping at or before it has a transaction open at the kick-off: on PostgreSQL the transactions open in this
database then (pg_locks' virtualxid locks, readable by any role, as CREATE INDEX CONCURRENTLY waits for them) are
named at the kick-off and the job waits until each has ended; SQLite has one writer at a time, and taking the write
lock once (BEGIN IMMEDIATE) waits for it. Versions stamped after transactionTime are left out by the export's
queries, so a write committing meanwhile appears in none of its files."""
from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence

from sqlalchemy import Connection, Engine, text

IN_FLIGHT = text("""
SELECT l.virtualxid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'virtualxid' AND l.granted AND l.pid <> pg_backend_pid()
  AND a.datname = current_database() AND a.backend_type = 'client backend'
""")
STILL_OPEN = text("SELECT count(*) FROM pg_locks WHERE locktype = 'virtualxid' AND virtualxid = ANY(:ids)")
POLL_S = 0.05


def in_flight(conn: Connection) -> tuple[str, ...]:
    """The transactions open in this database now (PostgreSQL; SQLite: none to name, see wait)."""
    if conn.dialect.name != "postgresql":
        return ()
    return tuple(str(v) for v in conn.execute(IN_FLIGHT).scalars() if v)


def wait(engine: Engine, transactions: Sequence[str], timeout_s: float,
         tick: Callable[[int], None]) -> bool:
    """Wait until the transactions named have ended (PostgreSQL) or the writer of the moment has committed (SQLite);
    `tick(still open)` is called between looks. False when they were still open after `timeout_s`."""
    if not transactions:  # transactionTime is the sync point (server.storage.writes): nothing to wait for
        return True
    deadline = time.monotonic() + timeout_s
    if engine.dialect.name == "sqlite":
        return _sqlite_writer_done(engine, deadline, tick)
    if not transactions:
        return True
    with engine.connect() as conn:
        while True:
            still = int(conn.execute(STILL_OPEN, {"ids": list(transactions)}).scalar_one())
            conn.rollback()
            if not still:
                return True
            if time.monotonic() > deadline:
                return False
            tick(still)
            time.sleep(POLL_S)


def _sqlite_writer_done(engine: Engine, deadline: float, tick: Callable[[int], None]) -> bool:
    raw = engine.raw_connection()
    try:
        dbapi = raw.driver_connection
        assert isinstance(dbapi, sqlite3.Connection)
        previous, dbapi.isolation_level = dbapi.isolation_level, None  # explicit BEGIN/ROLLBACK
        try:
            while True:
                try:
                    dbapi.execute("BEGIN IMMEDIATE")
                    dbapi.execute("ROLLBACK")
                    return True
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or time.monotonic() > deadline:
                        if "locked" in str(exc):
                            return False
                        raise
                    tick(1)
        finally:
            dbapi.isolation_level = previous
    finally:
        raw.close()
