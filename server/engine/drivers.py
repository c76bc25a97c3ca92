"""The drivers that run an interaction's steps (server.storage.steps): the I/O, and nothing else.

- `on_loop`: on the event loop, on the driver's own connection (server.storage.hot: sqlite3 for statements bounded
  by a key or an index range, psycopg async): a statement that is not bounded runs within a time budget on a driver
  that blocks the loop, and in a worker thread past it; `Blocking` work runs in a worker thread, on a pooled
  connection; `Threaded` work in a worker thread.
- `in_thread`: in the calling thread, on one SQLAlchemy connection for the whole interaction (read replicas, a
  database in memory, Bulk Data's exports, the command line, tests).

Both send the same values back (rows decoded as SQLAlchemy would give them): an interaction answers the same bytes
on either."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from sqlalchemy import Connection

from server.engine.context import ServerContext
from server.storage.db import once_more_if_dropped
from server.storage.freshness import database_of
from server.storage.hot import OverBudget
from server.storage.prepared import Bound, driver_sql
from server.storage.steps import Blocking, Query, Steps, Threaded, Which

T = TypeVar("T")
LOOP_BUDGET_S = 0.02  # an unbounded statement longer than this on a driver that blocks the loop goes to a thread


def _bound(ctx: ServerContext, step: Query) -> Bound:
    """The step's statement as the driver's SQL and parameters (compiled once per shape for the server's database)."""
    statement = step.statement
    return statement if isinstance(statement, Bound) else driver_sql(statement, ctx.db.dialect, ctx.statements)


def _on(conn: Connection, bound: Bound, mappings: bool) -> list[Any]:
    found = conn.exec_driver_sql(bound.sql, bound.params).all()
    return bound.results.decode(found, mappings)


def _at_hand(step: Which | Blocking[Any] | Threaded[Any], name: str) -> Any:
    """What a step gives without I/O, the same on either driver: the database's name, or Blocking work's answer
    at hand (None: the driver does the work)."""
    if isinstance(step, Which):
        return name
    return step.at_hand(name) if isinstance(step, Blocking) and step.at_hand is not None else None


def _blocking(ctx: ServerContext, work: Callable[[Connection], T]) -> T:
    """`work` on a pooled connection; once more on a new one when the first was found dead."""
    def on_a_connection() -> T:
        with ctx.db.connect() as conn:
            return work(conn)

    return once_more_if_dropped(on_a_connection)


async def on_loop(ctx: ServerContext, interaction: Steps[T], limiter: anyio.CapacityLimiter | None = None) -> T:
    hot = ctx.hot
    assert hot is not None
    name = hot.database
    sent: Any = None
    try:
        while True:
            step = interaction.send(sent)
            if isinstance(step, Query):
                bound = _bound(ctx, step)
                try:
                    found = await hot.rows(bound.sql, bound.params, None if step.bounded else LOOP_BUDGET_S)
                    sent = bound.results.decode(found, step.mappings)
                except OverBudget:  # too long to hold the loop: a thread runs it
                    sent = await anyio.to_thread.run_sync(_blocking, ctx, lambda c, b=bound, m=step.mappings:
                                                          _on(c, b, m), limiter=limiter)
            elif (known := _at_hand(step, name)) is not None:
                sent = known
            elif isinstance(step, Blocking):
                sent = await anyio.to_thread.run_sync(_blocking, ctx, step.work, limiter=limiter)
            else:
                assert isinstance(step, Threaded)
                sent = await anyio.to_thread.run_sync(step.work, limiter=limiter)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        interaction.close()


def in_thread(ctx: ServerContext, interaction: Steps[T], conn: Connection | None = None) -> T:
    """The interaction on `conn`, or on a connection of its own (released when it ends)."""
    if conn is None:
        with ctx.db.connect() as own:
            return in_thread(ctx, interaction, own)
    name = database_of(conn)
    sent: Any = None
    try:
        while True:
            step = interaction.send(sent)
            if isinstance(step, Query):
                sent = _on(conn, _bound(ctx, step), step.mappings)
            elif (known := _at_hand(step, name)) is not None:
                sent = known
            elif isinstance(step, Blocking):
                sent = step.work(conn)
            else:
                assert isinstance(step, Threaded)
                sent = step.work()
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        interaction.close()
