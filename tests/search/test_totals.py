"""Totals are counted once per filter and data generation: how a page is reached or shown (_after, _skip, _count,
_sort, _elements, _summary, _format) never counts again; another filter, another caller's scope or a new version
does."""
from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import event

from server.declare.rendered import materialized
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

    def put(self, key: Hashable, value: int) -> None:
        self.counted.append(key)
        super().put(key, value)


def _search(ctx: ServerContext, query: str) -> dict[str, Any]:
    items = [tuple(p.split("=", 1)) for p in query.split("&") if p]
    return materialized(search_type(ctx, TRUSTED, BASE, "Location", items))  # type: ignore[arg-type,no-any-return]


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


def _with_threshold(ctx: ServerContext, threshold: int) -> ServerContext:
    fhir = replace(ctx.settings.fhir, total_threshold=threshold)
    return replace(ctx, settings=replace(ctx.settings, fhir=fhir), counts=CountingCache())


def _relations(bundle: dict[str, Any]) -> list[str]:
    return [link["relation"] for link in bundle["link"]]


# status=active matches 6 units of the small pyramid; the threshold is 3 (counted up to 4)
THRESHOLD = [
    pytest.param("status=active&_count=2", None, ["self", "first", "next"], 1, id="past-it-no-total-no-last"),
    pytest.param("status=active&_count=2&_total=estimate", None, ["self", "first", "next"], 1, id="estimate"),
    pytest.param("status=active&_count=2&_total=accurate", 6, ["self", "first", "next", "last"], 2,
                 id="accurate-counts-all"),
    pytest.param("status=active&_summary=count", 6, ["self"], 2, id="summary-count-counts-all"),
    pytest.param("_id=10,20,30", 3, ["self", "first", "last"], 1, id="at-it-exact"),
    pytest.param("_id=10,20,30&_total=accurate", 3, ["self", "first", "last"], 1,
                 id="accurate-under-it-counted-once"),
    pytest.param("status=active&_count=2&_total=none", None, ["self", "first", "next"], 0, id="none"),
]


@pytest.mark.parametrize("query, total, relations, counts", THRESHOLD)
def test_a_total_past_the_threshold_is_left_out(small_ctx: ServerContext, query: str, total: int | None,
                                                relations: list[str], counts: int) -> None:
    ctx = _with_threshold(small_ctx, 3)
    bundle = _search(ctx, query)
    assert bundle.get("total") == total
    assert _relations(bundle) == relations
    assert len(ctx.counts.counted) == counts  # type: ignore[attr-defined]


def test_every_match_is_reached_past_the_threshold(small_ctx: ServerContext) -> None:
    """Without a total, `next` links still lead through every match, once each."""
    ctx = _with_threshold(small_ctx, 3)
    seen: list[str] = []
    query = "status=active&_count=2"
    while query:
        bundle = _search(ctx, query)
        assert "total" not in bundle
        seen += [e["fullUrl"].rsplit("/", 1)[1] for e in bundle.get("entry", [])]
        following = next((link["url"] for link in bundle["link"] if link["relation"] == "next"), None)
        query = following.split("?", 1)[1] if following else ""
    assert len(seen) == len(set(seen)) == 6


def test_a_page_of_no_entries_counts_all(small_ctx: ServerContext) -> None:
    """_count=0 asks for the total alone (fhirpy's count(), and others): counted exactly past the threshold."""
    ctx = _with_threshold(small_ctx, 3)
    bundle = _search(ctx, "status=active&_count=0")
    assert bundle["total"] == 6 and "entry" not in bundle
    assert len(ctx.counts.counted) == 2  # type: ignore[attr-defined]


def _walked(ctx: ServerContext, query: str) -> list[str]:
    seen: list[str] = []
    while query:
        bundle = _search(ctx, query)
        seen += [e["fullUrl"].rsplit("/", 1)[1] for e in bundle.get("entry", [])]
        following = next((link["url"] for link in bundle["link"] if link["relation"] == "next"), None)
        query = following.split("?", 1)[1] if following else ""
    return seen


def test_a_name_prefix_is_counted_as_its_pages_walk_the_names(small_ctx: ServerContext) -> None:
    """The bounded count of a name prefix walks the name index as its page does (each unit once, at its first
    matching name, aliases too): the same number as the units its pages reach, every prefix of every name."""
    ctx = _with_threshold(small_ctx, 10_000)
    names = {e["resource"]["name"] for e in _search(ctx, "_count=100")["entry"]}
    aliases = {a for e in _search(ctx, "_count=100")["entry"] for a in e["resource"].get("alias", [])}
    prefixes = sorted({n[:k].lower() for n in names | aliases for k in (1, 2, 4) if len(n) >= k})
    assert len(prefixes) > 20
    for prefix in prefixes:
        seen = _walked(ctx, f"name={prefix}&_count=3")
        assert len(seen) == len(set(seen)), prefix
        assert _search(ctx, f"name={prefix}&_count=3")["total"] == len(seen), prefix
        assert _search(ctx, f"name={prefix}&_total=accurate&_count=3")["total"] == len(seen), prefix


@pytest.mark.parametrize("threshold, counted", [pytest.param(2, False, id="past-it"),
                                                pytest.param(50, True, id="under-it")])
def test_a_name_prefix_past_the_threshold_is_left_out(small_ctx: ServerContext, threshold: int,
                                                      counted: bool) -> None:
    ctx = _with_threshold(small_ctx, threshold)
    firsts = [e["resource"]["name"][:1].lower() for e in _search(ctx, "_count=100")["entry"]]
    common = max(set(firsts), key=firsts.count)
    accurate = _search(ctx, f"name={common}&_total=accurate")["total"]
    assert accurate > 2
    bundle = _search(ctx, f"name={common}")
    assert bundle.get("total") == (accurate if counted else None)


def _counts_run(ctx: ServerContext, query: str) -> tuple[dict[str, Any], int]:
    """The bundle, and how many count statements the search ran."""
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        statements.append(statement)

    event.listen(ctx.db, "before_cursor_execute", seen)
    try:
        bundle = _search(ctx, query)
    finally:
        event.remove(ctx.db, "before_cursor_execute", seen)
    return bundle, sum("count(" in s.lower() for s in statements)


@pytest.mark.parametrize("count, counted", [pytest.param(100, 0, id="page-holds-every-match"),
                                            pytest.param(1, 1, id="full-page-counted")])
def test_a_first_name_page_that_holds_every_match_is_its_total(small_ctx: ServerContext, count: int,
                                                               counted: int) -> None:
    """A name prefix's first page is read before its count: when it holds every match, no count is run."""
    ctx = _with_threshold(small_ctx, 1000)
    firsts = [e["resource"]["name"][:1].lower() for e in _search(ctx, "_count=100")["entry"]]
    common = max(set(firsts), key=firsts.count)
    bundle, runs = _counts_run(ctx, f"name={common}&_count={count}")
    assert runs == counted
    assert bundle["total"] == _search(ctx, f"name={common}&_total=accurate&_count=0")["total"] > 1
    again, runs = _counts_run(ctx, f"name={common}&_count=1&_after={_walked(ctx, f'name={common}&_count=1')[0]}")
    assert runs == 0 and again["total"] == bundle["total"]  # kept: the next pages count nothing


@pytest.mark.parametrize("query, counted", [
    pytest.param("_id={a}", 0, id="one-id"),
    pytest.param("_id={a},{b},999999", 0, id="ids-one-unknown"),
    pytest.param("_id={a}&name=zzzz-no-such-name", 0, id="ids-and-another-clause"),
    pytest.param("_id={a},{b}&_count=1", 1, id="more-ids-than-the-page-counted"),
    pytest.param("_id:not={a}", 1, id="a-modifier-counted"),
    pytest.param("_id={a}&_skip=1", 1, id="a-later-page-counted"),
])
def test_a_first_page_of_a_few_ids_is_its_total(small_ctx: ServerContext, query: str, counted: int) -> None:
    """A search of no more ids than its page holds reads its first page before its count: the page holds every
    match, so no count is run, and its total is the accurate one."""
    ctx = _with_threshold(small_ctx, 1000)
    a, b = (e["resource"]["id"] for e in _search(ctx, "_count=2")["entry"])
    query = query.format(a=a, b=b)
    bundle, runs = _counts_run(ctx, query)
    assert runs == counted
    assert bundle["total"] == _search(ctx, f"{query}&_total=accurate&_count=0")["total"]
