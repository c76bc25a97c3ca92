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

from server.storage.budget import left_s

log = logging.getLogger("orgunit_fhir")
TICK_S = 0.1
CANCEL_WAIT_S = 3  # a cancel request's own connection


class Watchdog:
    """Cuts a connection unanswered `limit_s` after its statement started; and, for a request whose time budget
    (server.storage.budget) ends before its statement's own timeout (`timeout_s`), cancels the statement then (the
    database answers 57014, StatementTimedOut, as for its own timeout)."""

    def __init__(self, limit_s: float, timeout_s: float = float("inf")) -> None:
        self.limit_s, self.timeout_s = limit_s, timeout_s
        self._due: dict[int, tuple[float, Any]] = {}  # id(dbapi connection) -> (deadline, connection)
        self._cancel: dict[int, tuple[float, Any]] = {}  # id(dbapi connection) -> (the request's deadline, connection)
        self._cancelling: dict[int, threading.Event] = {}  # cancels on their way
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self, dbapi_connection: Any, budget_s: float | None = None) -> None:
        now = time.monotonic()
        with self._lock:
            self._due[id(dbapi_connection)] = (now + self.limit_s, dbapi_connection)
            if budget_s is not None and budget_s < self.timeout_s:
                self._cancel[id(dbapi_connection)] = (now + budget_s, dbapi_connection)
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="db-watchdog", daemon=True)
                self._thread.start()

    def stop(self, dbapi_connection: Any) -> None:
        with self._lock:
            self._due.pop(id(dbapi_connection), None)
            self._cancel.pop(id(dbapi_connection), None)
            cancelling = self._cancelling.get(id(dbapi_connection))
        if cancelling is not None:  # a cancel on its way must not reach the connection's next statement
            cancelling.wait(CANCEL_WAIT_S + 1)

    def _watch(self) -> None:
        while True:
            time.sleep(TICK_S)
            now = time.monotonic()
            with self._lock:  # cut under the lock: a connection that answered meanwhile is not cut in its next use
                late = [conn for due, conn in self._due.values() if due < now]
                for conn in late:
                    del self._due[id(conn)]
                    self._cancel.pop(id(conn), None)
                    cut(conn, self.limit_s)
                spent = [conn for due, conn in self._cancel.values() if due < now]
                for conn in spent:
                    del self._cancel[id(conn)]
                    done = self._cancelling[id(conn)] = threading.Event()
                    threading.Thread(target=self._cancel_statement, args=(conn, done), name="db-cancel",
                                     daemon=True).start()

    def _cancel_statement(self, dbapi_connection: Any, done: threading.Event) -> None:
        """Ask PostgreSQL to cancel the connection's statement (a connection of its own, bounded)."""
        try:
            dbapi_connection.cancel_safe(timeout=CANCEL_WAIT_S)
        except Exception:  # noqa: BLE001 - finished or closed meanwhile: nothing to cancel
            pass
        finally:
            with self._lock:
                self._cancelling.pop(id(dbapi_connection), None)
            done.set()


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


def watch(engine: Engine, limit_s: float, timeout_s: float = float("inf")) -> Watchdog:
    """Bound the statements and the rollbacks of the engine's PostgreSQL connections (and each statement by what is
    left of its request's budget)."""
    dog = Watchdog(limit_s, timeout_s)

    @event.listens_for(engine, "before_cursor_execute")
    def _before(conn: Any, cursor: Any, statement: Any, parameters: Any, context: Any, many: bool) -> None:
        dog.start(conn.connection.dbapi_connection, left_s())

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
