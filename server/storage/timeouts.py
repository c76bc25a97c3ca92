"""A statement timeout for SQLite like PostgreSQL's statement_timeout: a statement still running after
`timeout_ms` (or past the request's budget, server.storage.budget) is interrupted (sqlite3.OperationalError
"interrupted"), so a costly query answers 503."""
from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Engine, event

from server.storage.budget import left_s

CHECK_EVERY = 20_000  # SQLite virtual-machine instructions between two looks at the clock


def install_sqlite_timeout(engine: Engine, timeout_ms: int) -> None:
    if timeout_ms <= 0:
        return
    seconds = timeout_ms / 1000

    @event.listens_for(engine, "connect")
    def _watch(dbapi_connection: Any, record: Any) -> None:
        deadline = [float("inf")]
        record.info["deadline"] = deadline
        dbapi_connection.set_progress_handler(lambda: 1 if time.monotonic() > deadline[0] else 0, CHECK_EVERY)

    @event.listens_for(engine, "before_cursor_execute")
    def _start(conn: Any, cursor: Any, statement: Any, parameters: Any, context: Any, executemany: bool) -> None:
        deadline = conn.connection.info.get("deadline")
        if deadline is not None:
            left = left_s()  # the request's budget, when less is left of it
            deadline[0] = time.monotonic() + (seconds if left is None else min(seconds, left))
