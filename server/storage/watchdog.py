"""A client-side bound on every wait for PostgreSQL from a worker thread. `statement_timeout` is the server's: it
cannot fire when the server never hears the statement (a black-holed network), and TCP keepalives are answered by
whatever still holds the socket (a stalled proxy). The watchdog notes when each statement (and each rollback of a
connection given back to the pool) starts, and shuts down the socket of one still unanswered `limit_s` later: the
driver then fails at once (OperationalError, the connection invalidated and dropped), so the request answers 503
`transient` instead of hanging."""
from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

from sqlalchemy import Engine, event

log = logging.getLogger("orgunit_fhir")
TICK_S = 0.1


class Watchdog:
    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self._due: dict[int, tuple[float, Any]] = {}  # id(dbapi connection) -> (deadline, connection)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self, dbapi_connection: Any) -> None:
        with self._lock:
            self._due[id(dbapi_connection)] = (time.monotonic() + self.limit_s, dbapi_connection)
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="db-watchdog", daemon=True)
                self._thread.start()

    def stop(self, dbapi_connection: Any) -> None:
        with self._lock:
            self._due.pop(id(dbapi_connection), None)

    def _watch(self) -> None:
        while True:
            time.sleep(TICK_S)
            now = time.monotonic()
            with self._lock:  # cut under the lock: a connection that answered meanwhile is not cut in its next use
                late = [conn for due, conn in self._due.values() if due < now]
                for conn in late:
                    del self._due[id(conn)]
                    cut(conn, self.limit_s)


def cut(dbapi_connection: Any, waited_s: float) -> None:
    """Shut down the socket of a psycopg connection (not closed: the driver, woken, finds it broken)."""
    try:
        if dbapi_connection.closed:
            return
        fd = dbapi_connection.pgconn.socket
        with socket.socket(fileno=socket.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except Exception:  # noqa: BLE001 - a connection closing meanwhile has nothing left to cut
        return
    log.warning("the database did not answer within %.1f s: its connection was dropped", waited_s)


def watch(engine: Engine, limit_s: float) -> Watchdog:
    """Bound the statements and the rollbacks of the engine's PostgreSQL connections."""
    dog = Watchdog(limit_s)

    @event.listens_for(engine, "before_cursor_execute")
    def _before(conn: Any, cursor: Any, statement: Any, parameters: Any, context: Any, many: bool) -> None:
        dog.start(conn.connection.dbapi_connection)

    @event.listens_for(engine, "after_cursor_execute")
    def _after(conn: Any, cursor: Any, statement: Any, parameters: Any, context: Any, many: bool) -> None:
        dog.stop(conn.connection.dbapi_connection)

    @event.listens_for(engine, "handle_error")
    def _failed(context: Any) -> None:
        if context.connection is not None and context.connection.connection.dbapi_connection is not None:
            dog.stop(context.connection.connection.dbapi_connection)

    @event.listens_for(engine.pool, "reset")
    def _reset(dbapi_connection: Any, record: Any, state: Any) -> None:
        dog.start(dbapi_connection)

    @event.listens_for(engine.pool, "checkin")
    def _checkin(dbapi_connection: Any, record: Any) -> None:
        if dbapi_connection is not None:
            dog.stop(dbapi_connection)

    @event.listens_for(engine.pool, "close")
    def _close(dbapi_connection: Any, record: Any) -> None:
        dog.stop(dbapi_connection)

    return dog
