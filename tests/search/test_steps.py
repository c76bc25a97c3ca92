"""What the search layer asks the driver (issue 42: one step protocol): the steps it yields, and how each may run.
The keys of a condition on a referred table (an org-unit type, a source version) are read by a statement that may
read that whole table: it runs within the loop's budget, in a worker thread past it (`bounded=False`), chained or
not, as the chain's hops' keys do."""
from __future__ import annotations

from typing import Any

import pytest

from server.engine.context import ServerContext
from server.engine.parsing import parse
from server.params.types.base import EVERY_ROW
from server.search.sql import lookups
from server.storage.steps import Query


def _steps(ctx: ServerContext, query: list[tuple[str, str]]) -> list[Any]:
    provider = ctx.registry.providers["Location"]
    asked, sent = lookups(provider, parse(ctx, provider, query, True), sight=EVERY_ROW), None
    steps = []
    try:
        while True:
            steps.append(asked.send(sent))
            sent = []
    except StopIteration:
        return steps


@pytest.mark.parametrize("query, table", [
    pytest.param([("type", "CSPS")], "org_unit_type", id="a-unit-type"),
    pytest.param([("organization", "1")], "source_version", id="a-data-source"),
])
def test_the_keys_of_a_referred_table_are_not_bounded(small_ctx: ServerContext, query: list[tuple[str, str]],
                                                       table: str) -> None:
    steps = _steps(small_ctx, query)
    assert steps and all(isinstance(s, Query) for s in steps)
    assert [(s.bounded, table in str(s.statement)) for s in steps] == [(False, True)]


def test_a_search_of_the_units_own_columns_asks_nothing_first(small_ctx: ServerContext) -> None:
    assert _steps(small_ctx, [("name", "a"), ("status", "active")]) == []
