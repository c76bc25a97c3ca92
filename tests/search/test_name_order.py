"""Searches led by a name prefix go in the name index's order (the unit's first matching name or alias, then the
id), paged by a keyset on that order: `_after` resumes after the last unit's first matching name; `_sort` and
`near` still decide when given; an `_after` that is not a visible match of the search is refused. Both backends."""
from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qsl, urlsplit

import pytest
from sqlalchemy import Engine

from plugins.orgunits.records import UnitRecord
from plugins.orgunits.writer import ensure_data_source, ensure_source_version, write_units
from server.engine.context import ServerContext
from server.engine.parsing import parse
from server.errors import InvalidRequest
from server.engine.caller import caller_of
from tests.support.contexts import bearer, pyramid_context
from tests.support.data import NOW
from tests.support.searching import matches, search

# ids out of name order; 44 matches by an alias only, 45 by its name and an alias, 42 and 46 share a name
ZADOU = (
    UnitRecord(40, "CSPS Zadoula", "CSPS", "VALID", source_ref="ZD0000000040", parent_id=20),
    UnitRecord(41, "CSPS Zadougou", "CSPS", "VALID", source_ref="ZD0000000041", parent_id=20),
    UnitRecord(42, "CSPS Zadouba", "CSPS", "VALID", source_ref="ZD0000000042", parent_id=20),
    UnitRecord(44, "Poste de Kaya", "CSPS", "VALID", source_ref="ZD0000000044", aliases=("CSPS Zadouaa",), parent_id=20),
    UnitRecord(45, "CSPS Zadoub", "CSPS", "VALID", source_ref="ZD0000000045", aliases=("CSPS Zadouz",), parent_id=20),
    UnitRecord(46, "CSPS Zadouba", "CSPS", "VALID", source_ref="ZD0000000046", parent_id=20),
)
IN_NAME_ORDER = [44, 45, 42, 46, 41, 40]


def _load(engine: Engine) -> None:
    with engine.begin() as conn:
        version = ensure_source_version(conn, ensure_data_source(conn, "Ministère de la Santé", now=NOW), 3, now=NOW)
        write_units(conn, ZADOU, version, NOW)


@pytest.fixture(scope="module")
def ctx(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerContext]:
    context = pyramid_context(backend_url, tmp_path_factory.mktemp("var"), _load)
    yield context
    context.db.dispose()


@pytest.mark.parametrize("query, expected", [
    pytest.param("name=csps zadou", IN_NAME_ORDER, id="by-name-then-id-an-alias-once"),
    pytest.param("name=csps zadouba", [42, 46], id="ties-by-id"),
    pytest.param("name=csps zadouz", [45], id="alias-only-match"),
    pytest.param("name=csps zadou&status=active", IN_NAME_ORDER, id="other-clauses-per-row"),
    pytest.param("status=active&name=csps zadou", IN_NAME_ORDER, id="led-by-the-first-string-clause"),
    pytest.param("name=csps zadou&_skip=2", IN_NAME_ORDER[2:], id="skip"),
    pytest.param("name=csps zadou&_sort=_id", sorted(IN_NAME_ORDER), id="sort-wins"),
    pytest.param("name=csps zadou&_sort=-_id", sorted(IN_NAME_ORDER, reverse=True), id="sort-desc-wins"),
    pytest.param("name=csps zadou,csps", sorted([*IN_NAME_ORDER, 30]), id="several-values-by-id"),
    pytest.param("name:contains=zadou", sorted(IN_NAME_ORDER), id="contains-by-id"),
    pytest.param("name=c&near=11.716788|-3.339844|200", [30, 31], id="near-wins"),  # by name: 31 (CMA), 30
])
def test_name_searches_go_in_name_order(ctx: ServerContext, query: str, expected: list[int]) -> None:
    bundle = search(ctx, "Location", query)
    assert matches(bundle) == expected
    assert bundle["total"] == len(expected) + (2 if "_skip" in query else 0)


def _next(bundle: dict) -> list[tuple[str, str]] | None:
    link = next((l["url"] for l in bundle["link"] if l["relation"] == "next"), None)
    return None if link is None else parse_qsl(urlsplit(link).query)


@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize("total", ["estimate", "none"])
def test_pages_visit_every_match_once_in_order(ctx: ServerContext, count: int, total: str) -> None:
    bundle = search(ctx, "Location", f"name=csps zadou&_count={count}&_total={total}")
    seen = matches(bundle)
    while (following := _next(bundle)) is not None:
        assert ("_after", str(seen[-1])) in following, following
        bundle = search(ctx, "Location", "", items=following)
        seen += matches(bundle)
    assert seen == IN_NAME_ORDER


@pytest.mark.parametrize("after", [
    pytest.param("30", id="another-search-s-match"),
    pytest.param("999", id="unknown"),
])
def test_an_after_that_is_not_a_match_is_refused(ctx: ServerContext, after: str) -> None:
    with pytest.raises(InvalidRequest, match="not a match of this search"):
        search(ctx, "Location", f"name=csps zadou&_after={after}")


def test_an_after_out_of_scope_is_refused_as_an_unknown_one(ctx: ServerContext) -> None:
    """A unit the caller may not see: its position is not told (refused as one that does not match)."""
    principal = ctx.authenticator.authenticate(bearer(ctx.settings, org_unit_roots=["Location/3"])["Authorization"])
    caller = caller_of(ctx, principal)
    assert matches(search(ctx, "Location", "name=csps zadou", caller)) == []
    with pytest.raises(InvalidRequest, match="not a match of this search"):
        search(ctx, "Location", "name=csps zadou&_after=45", caller)


@pytest.mark.parametrize("name, lower, upper", [
    pytest.param("csps zadou", "csps zadou", "csps zadov", id="a-prefix-and-its-successor"),
    pytest.param("Zadou\U0010ffff", "zadou\U0010ffff", "zadov", id="the-last-code-point-grows-the-one-before"),
    pytest.param("\U0010ffff", "\U0010ffff", None, id="no-successor-no-upper-bound"),
])
def test_a_led_search_holds_its_index_range_as_values_and_builds_its_sql_only_for_a_statement(
        ctx: ServerContext, name: str, lower: str, upper: str | None) -> None:
    """Deciding whether a search is led by the name index runs on every search (is its count needed before its
    page?), a kept page's included: it builds no SQL, which cost a fifth of a name search's CPU."""
    provider = ctx.registry.get("Location")
    led = parse(ctx, provider, [("name", name)], strict=True).led
    assert led is not None
    order = led[1]
    assert (order.lower, order.upper) == (lower, upper)
    assert "match" not in vars(order) and "earlier" not in vars(order)
    text = str(order.match.compile(compile_kwargs={"literal_binds": True}))
    assert f">= '{lower}'" in text and (upper is None) == ("<" not in text.replace("<=", ""))
    assert str(order.earlier.compile(compile_kwargs={"literal_binds": True})).count(f"'{lower}'") == 1
