"""A request's time budget for the database (server.request_timeout_seconds; an export job's,
bulk.job_timeout_seconds): every statement the request runs is bounded by what is left of it as well as by the
per-statement limit (database.statement_timeout_ms), so many statements each within their limit cannot add up to
more. The deadline is a context variable: set once where the request (or the job) starts, it follows the work into
worker threads (anyio copies the context). Enforced by the database's own means: SQLite's progress handler
(server.storage.timeouts, server.storage.hot), PostgreSQL's cancel (server.storage.watchdog, server.storage.hot);
past it the statement fails as StatementTimedOut (503 too-costly), never repeated."""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_DEADLINE: ContextVar[float | None] = ContextVar("database_deadline", default=None)
SPENT_S = 0.001  # what is left of a spent budget: the next statement is stopped at once


@contextmanager
def database_budget(seconds: float | None) -> Iterator[None]:
    """The work inside may use the database for `seconds` in all (None or 0: no budget beyond each statement's)."""
    token = _DEADLINE.set(time.monotonic() + seconds if seconds else None)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def left_s() -> float | None:
    """What is left of the current budget (at least SPENT_S), None without one."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return None
    return max(deadline - time.monotonic(), SPENT_S)
