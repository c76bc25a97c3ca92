"""What an interaction asks of the database, as plain values: the sans-I/O vocabulary of the engine.

An interaction is a generator: it yields a step, is sent what the step gives, and returns its answer; it decides
everything else (visibility, counts, paging, 404/410, entries) without I/O. A driver (server.engine.drivers) runs
the steps: on the event loop where the statement is bounded by a key or an index range, in a worker thread where
something blocks. So each interaction is written once and runs on either driver, the same bytes out.

- `Query`: a statement (compiled once per shape, server.storage.prepared); sent its rows, decoded as SQLAlchemy
  would give them (tuples, or dicts by column name);
- `Blocking`: work on a SQLAlchemy connection (building a visibility, a snapshot of what the database holds, an
  operation's own handler...), which a thread runs; `at_hand(database)` answers without I/O when it can (a
  snapshot still fresh, a visibility already built);
- `Threaded`: work that holds no connection of the driver's (a plugin's handler, which opens what it reads
  itself, when it reads), run in a worker thread;
- `DATABASE`: the name of the database the driver reads (what the caches are keyed by: a replica's totals are its
  own)."""
from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection
from sqlalchemy.sql import ClauseElement

from server.engine.context import ServerContext
from server.search.asks import Asks, shaped
from server.storage.prepared import Bound, driver_sql

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Query:
    bound: Bound
    mappings: bool = False  # dicts by column name (a provider's to_resource reads them)
    bounded: bool = True  # by a key or an index range: the loop runs it at once (else within a time budget)


@dataclass(frozen=True, slots=True)
class Blocking(Generic[T]):
    work: Callable[[Connection], T]
    at_hand: Callable[[str], T | None] | None = None


@dataclass(frozen=True, slots=True)
class Threaded(Generic[T]):
    work: Callable[[], T]


class Which:
    """The step that asks which database the driver reads."""


DATABASE = Which()

Step = Query | Blocking[Any] | Threaded[Any] | Which
Steps = Generator[Step, Any, T]


def rows(ctx: ServerContext, statement: ClauseElement, *, mappings: bool = False,
         bounded: bool = True) -> Steps[list[Any]]:
    """The statement's rows (compiled once per shape for the server's dialect)."""
    found: list[Any] = yield Query(driver_sql(statement, ctx.db.dialect, ctx.statements), mappings, bounded)
    return found


def scalar(ctx: ServerContext, statement: ClauseElement, *, bounded: bool = True) -> Steps[Any]:
    """The first column of the first row (None without a row)."""
    found = yield from rows(ctx, statement, bounded=bounded)
    return found[0][0] if found else None


def blocking(work: Callable[[Connection], T], at_hand: Callable[[str], T | None] | None = None) -> Steps[T]:
    found: T = yield Blocking(work, at_hand)
    return found


def threaded(work: Callable[[], T]) -> Steps[T]:
    found: T = yield Threaded(work)
    return found


def database() -> Steps[str]:
    name: str = yield DATABASE
    return name


def asked(ctx: ServerContext, asks: Asks[T], *, bounded: bool = True) -> Steps[T]:
    """What the search layer asks (server.search.asks), as steps."""
    sent: Any = None
    try:
        while True:
            statement, shape = asks.send(sent)
            found = yield from rows(ctx, statement, mappings=shape == "mappings", bounded=bounded)
            sent = shaped(found, shape)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
