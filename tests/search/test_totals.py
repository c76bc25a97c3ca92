"""Totals are counted once per filter and data generation: how a page is reached or shown (_after, _skip, _count,
_sort, _elements, _summary, _format) never counts again; another filter, another caller's scope or a new version
does."""
from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import replace
from typing import Any

import pytest

from server.engine.context import ServerContext
from server.engine.caller import TRUSTED
from server.engine.searches import search_type
from server.storage.freshness import CountCache

BASE = "http://fhir.test/fhir"


class CountingCache(CountCache):
    """A count cache that tells how many totals it had to count."""

    def __init__(self) -> None:
        super().__init__()
        self.counted: list[Hashable] = []

    def get(self, key: Hashable, compute: Callable[[], int]) -> int:
        def counting() -> int:
            self.counted.append(key)
            return compute()
        return super().get(key, counting)


def _search(ctx: ServerContext, query: str) -> dict[str, Any]:
    items = [tuple(p.split("=", 1)) for p in query.split("&") if p]
    return search_type(ctx, TRUSTED, BASE, "Location", items)  # type: ignore[arg-type]


SAME_FILTER = [
    pytest.param("status=active&_count=2", id="count"),
    pytest.param("status=active&_count=2&_after=10", id="after"),
    pytest.param("status=active&_count=2&_after=30", id="after-another"),
    pytest.param("status=active&_count=3&_skip=1", id="skip"),
    pytest.param("status=active&_sort=-_id", id="sort"),
    pytest.param("status=active&_elements=name", id="elements"),
    pytest.param("status=active&_summary=true", id="summary"),
    pytest.param("status=active&_summary=count", id="summary-count"),
    pytest.param("status=active&_format=xml&_pretty=true", id="format"),
]


@pytest.mark.parametrize("query", SAME_FILTER)
def test_a_total_is_counted_once_per_filter(small_ctx: ServerContext, query: str) -> None:
    ctx = replace(small_ctx, counts=CountingCache())
    first = _search(ctx, "status=active")
    again = _search(ctx, query)
    assert again["total"] == first["total"] == 6
    assert len(ctx.counts.counted) == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("query", [
    pytest.param("status=suspended", id="another-value"),
    pytest.param("status=active&partof=20", id="another-clause"),
    pytest.param("status:not=active", id="a-modifier"),
])
def test_another_filter_counts_again(small_ctx: ServerContext, query: str) -> None:
    ctx = replace(small_ctx, counts=CountingCache())
    _search(ctx, "status=active")
    _search(ctx, query)
    assert len(ctx.counts.counted) == 2  # type: ignore[attr-defined]


def test_no_total_counts_nothing(small_ctx: ServerContext) -> None:
    ctx = replace(small_ctx, counts=CountingCache())
    assert "total" not in _search(ctx, "status=active&_total=none")
    assert ctx.counts.counted == []  # type: ignore[attr-defined]
