"""One writer at a time, and the sync point it gives readers.

Every transaction that writes versions begins with `begin_writing`: it takes the one writer lock (a transaction-scoped
PostgreSQL advisory lock; SQLite's write lock, BEGIN IMMEDIATE) and only then takes the instant its versions carry.
Writers therefore commit in the order of their stamps: a version becomes visible before any version stamped after
it, and every transaction still open will stamp (or has stamped) later than every version already committed.

So the newest committed version tells how far a reader's answer is complete: `sync_point` is the instant just after
it. No version at or before that instant can become visible later, whatever writer is running; a client that sends
it back as its next `_since` (or `_lastUpdated=ge`) misses nothing. Stamps use one clock per database: PostgreSQL's
(clock_timestamp(), whichever host the writer runs on), the host's for SQLite (a file on that host)."""
from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone

from sqlalchemy import Connection, text

from server.engine.instants import as_utc

WRITER_LOCK = 0x6F72_6775_6E69  # pg_advisory_xact_lock's key: "orguni"
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)  # the sync point of a database without versions yet
TICK = timedelta(microseconds=1)  # the precision instants are stored at (both backends)
_POLL_S = 0.05

log = logging.getLogger("orgunit_fhir.writes")


def begin_writing(conn: Connection) -> datetime:
    """Take the writer lock as the first statement of `conn`'s transaction (waiting, as long as it takes, for the
    writer of the moment to commit or roll back: concurrent writers run one after the other) and return the stamp
    of the versions this transaction writes. The lock is released when the transaction ends."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": WRITER_LOCK})
        return as_utc(conn.execute(text("SELECT clock_timestamp()")).scalar_one())
    dbapi = conn.connection.driver_connection
    assert isinstance(dbapi, sqlite3.Connection)
    if dbapi.in_transaction:
        raise RuntimeError("begin_writing must be the first statement of the transaction")
    said = False
    while True:
        try:
            dbapi.execute("BEGIN IMMEDIATE")  # the driver's own transaction: committed or rolled back by conn's
            break
        except sqlite3.OperationalError as exc:  # still locked after the driver's busy timeout
            if "locked" not in str(exc):
                raise
        if not said:
            log.info("waiting for the write under way to finish (one writer at a time)")
            said = True
        time.sleep(_POLL_S)
    return datetime.now(timezone.utc)


def sync_point(newest: Iterable[datetime | str | None]) -> datetime:
    """Just after the newest committed version (of any versioned type: one lock orders them all); the epoch when
    there is none. `newest`: the instant of each type's newest version, as read (None for a type without any)."""
    instants = [as_utc(value) for value in newest if value is not None]
    return max(instants) + TICK if instants else EPOCH
