"""What an interaction asks of the database, as plain values: the sans-I/O vocabulary of the engine and the search
layer alike.

An interaction is a generator: it yields a step, is sent what the step gives, and returns its answer; it decides
everything else (visibility, counts, paging, 404/410, entries) without I/O. The search layer's look-ups, keyset
positions, includes and chains are such generators too, which an interaction runs with `yield from`. A driver
(server.engine.drivers) runs the steps: on the event loop where the statement is bounded by a key or an index range,
in a worker thread where something blocks. So each interaction is written once and runs on either driver, the same
bytes out.

- `Query`: a statement and how its rows come back (tuples, or dicts by column name, decoded as SQLAlchemy would
  give them): a `Bound` statement (compiled once: a prepared read, a kept page) as it is, any other compiled by the
  driver once per shape for its database (server.storage.prepared.driver_sql);
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

from server.storage.prepared import Bound

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Query:
    statement: Bound | ClauseElement  # not Bound: compiled by the driver, once per shape
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


def rows(statement: Bound | ClauseElement, *, mappings: bool = False, bounded: bool = True) -> Steps[list[Any]]:
    """The statement's rows: tuples, or dicts by column name."""
    found: list[Any] = yield Query(statement, mappings, bounded)
    return found


def scalars(statement: Bound | ClauseElement, *, bounded: bool = True) -> Steps[list[Any]]:
    """The first column of each row."""
    return [row[0] for row in (yield from rows(statement, bounded=bounded))]


def scalar(statement: Bound | ClauseElement, *, bounded: bool = True) -> Steps[Any]:
    """The first column of the first row (None without a row)."""
    found = yield from rows(statement, bounded=bounded)
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
