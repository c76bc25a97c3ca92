"""What a search may cost, estimated from its query before anything runs (no parsing, no I/O), and the gate that
gives costly searches their own, smaller share of a worker: at most `server.costly_searches` at once, the others
waiting up to `server.costly_search_wait_seconds` for a turn, then 503 `too-costly` with Retry-After. Reads and
cheap searches never wait for them.

The estimate is a sum over the search parameters of values x weight: a value costs 1; a `:contains` value
CONTAINS (a leading wildcard: no index helps, every row is looked at); a chained value HOP per hop (`a.b.c`: two
joins) and each `_has` HOP; an `_include`/`_revinclude` value INCLUDE (a query more), an `:iterate` one ITERATE (a
query per level, up to server.search.include.MAX_ITERATE_DEPTH). Result parameters (_count, _sort, _total...) cost
nothing. A value that is itself a search (`Type?query`, as Bulk Data's `_typeFilter` values) costs what that search
costs."""
from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from urllib.parse import parse_qsl

import anyio

from server.errors import TooCostly

CONTAINS, HOP, INCLUDE, ITERATE = 20, 5, 2, 10
FREE = frozenset({"_count", "_skip", "_after", "_sort", "_total", "_summary", "_elements", "_format", "_pretty",
                  "_contained", "_containedType"})
RETRY_AFTER_S = 5
_SEARCH = re.compile(r"[A-Z][A-Za-z]{0,63}\?")  # a value that is a search of its own: `Type?query`
_NEXT_SEARCH = re.compile(r",(?=[A-Z][A-Za-z]{0,63}\?)")  # a comma before the next `Type?`


def search_cost(items: Sequence[tuple[str, str]]) -> int:
    cost = 0
    for key, raw in items:
        if key in FREE or not raw:
            continue
        if _SEARCH.match(raw):  # values that are searches (`_typeFilter=Location?name:contains=a,Organization?...`)
            cost += sum(search_cost(parse_qsl(query.partition("?")[2], keep_blank_values=True))
                        for query in _NEXT_SEARCH.split(raw))
            continue
        values = raw.count(",") - raw.count("\\,") + 1
        if key.startswith(("_include", "_revinclude")):
            weight = ITERATE if key.endswith(":iterate") else INCLUDE
        else:  # dots appear in chains only (a.b: one hop); each _has: is a hop back
            weight = (CONTAINS if key.endswith(":contains") else 1) + HOP * (key.count(".") + key.count("_has:"))
        cost += values * weight
    return cost


def scope_cost(filters: Iterable[tuple[str, Iterable[Sequence[tuple[str, str]]]]]) -> int:
    """What a caller's scope queries (SMART `system/Location.rs?...`, per type) add to every request: each is a
    search its statements carry, estimated as one."""
    return sum(search_cost(query) for _, queries in filters for query in queries)


class CostlyGate:
    """Per worker: the turns of the costly searches."""

    def __init__(self, threshold: int, turns: int, wait_s: float) -> None:
        self.threshold = threshold
        self.turns = turns
        self.wait_s = wait_s
        self._semaphore = anyio.Semaphore(turns)

    def costly(self, items: Sequence[tuple[str, str]]) -> bool:
        return search_cost(items) >= self.threshold

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Wait for a turn (at most wait_s), hold it while the search runs; 503 too-costly when none came."""
        try:
            self._semaphore.acquire_nowait()
        except anyio.WouldBlock:
            with anyio.move_on_after(self.wait_s) as waited:
                await self._semaphore.acquire()
            if waited.cancelled_caught:
                raise TooCostly(f"{self.turns} costly searches (many values, :contains, chains) are running on this "
                                f"worker and none ended within {self.wait_s:g} s; try again later, or narrow the search",
                                headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        try:
            yield
        finally:
            self._semaphore.release()
