"""One writer at a time, and the sync point it gives readers.

Every transaction that writes versions begins with `begin_writing`: it takes the one writer lock (a transaction-scoped
PostgreSQL advisory lock; SQLite's write lock, BEGIN IMMEDIATE) and only then takes the instant its versions carry,
to the millisecond, later than every version stored. Writers therefore commit in the order of their stamps: a version
becomes visible before any version stamped after it, and a transaction still open stamps (or has stamped) later than
every version already committed.

So the newest committed version tells how far a reader's answer is complete: `sync_point` is the millisecond after
it. Every version before that instant is committed, and no version stamped before it can become visible later,
whatever writer is running; a client that sends it back as its next `_since` (or `_lastUpdated=ge`) misses nothing.
Stamps use one clock per database: PostgreSQL's (clock_timestamp(), wherever the writer runs), the host's for SQLite
(a file on that host); a clock set back is harmless (a stamp is never before the newest stored one)."""
from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import Connection, Select, text

from server.declare.instants import as_utc

WRITER_LOCK = 0x6F72_6775_6E69  # pg_advisory_xact_lock's key: "orguni"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)  # the sync point of a database without versions yet
TICK = timedelta(milliseconds=1)  # the precision of stamps (FHIR instants as this server writes them)
_POLL_S = 0.05
_WAITING = "waiting for the write under way to commit (one writer at a time)"

log = logging.getLogger("orgunit_fhir.writes")


def begin_writing(conn: Connection, newest: Select[Any]) -> datetime:
    """Take the writer lock as the first statement of `conn`'s transaction (waiting, as long as it takes, for the
    writer of the moment to commit or roll back: concurrent writers run one after the other) and return the stamp
    of the versions this transaction writes: now, and never before the sync point of what is stored (`newest`: the
    instant of the newest version stored, of every versioned type). The lock is released when the transaction ends."""
    _lock(conn)
    clock = conn.execute(text("SELECT clock_timestamp()")).scalar_one() if conn.dialect.name == "postgresql" \
        else datetime.now(timezone.utc)
    return max(_to_tick(as_utc(clock)), sync_point([conn.execute(newest).scalar()]))


def _lock(conn: Connection) -> None:
    """The writer lock, saying once when it has to wait for another writer."""
    if conn.dialect.name == "postgresql":
        key = {"key": WRITER_LOCK}
        if not conn.execute(text("SELECT pg_try_advisory_xact_lock(:key)"), key).scalar_one():
            log.info(_WAITING)
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), key)
        return
    dbapi = conn.connection.driver_connection
    assert isinstance(dbapi, sqlite3.Connection)
    if dbapi.in_transaction:
        raise RuntimeError("begin_writing must be the first statement of the transaction")
    busy = dbapi.execute("PRAGMA busy_timeout").fetchone()[0]
    dbapi.execute("PRAGMA busy_timeout = 0")  # polled here, to say that it waits
    try:
        said = False
        while True:
            try:
                dbapi.execute("BEGIN IMMEDIATE")  # the driver's own transaction, ended by conn's commit or rollback
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
            if not said:
                log.info(_WAITING)
                said = True
            time.sleep(_POLL_S)
    finally:
        dbapi.execute(f"PRAGMA busy_timeout = {int(busy)}")


def sync_point(newest: Iterable[datetime | str | None]) -> datetime:
    """The millisecond after the newest committed version (of any versioned type: one lock orders them all); the
    epoch when there is none. `newest`: the instant of each type's newest version, as read (None: none)."""
    instants = [as_utc(value) for value in newest if value is not None]
    return _to_tick(max(instants)) + TICK if instants else EPOCH


def complete_through(synced: datetime) -> datetime:
    """The last instant an answer read at `synced` is complete through, inclusive (Bulk Data's transactionTime,
    which the next export's `_since` takes as "changed after"): the last one stored (to the microsecond) before it."""
    return synced - timedelta(microseconds=1)


def _to_tick(value: datetime) -> datetime:
    return value.replace(microsecond=value.microsecond // 1000 * 1000)
