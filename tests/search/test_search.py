"""Location search and $children as interactions (no HTTP): every row of the search table, both backends."""
from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from server.engine import reads, searches
from server.engine.caller import TRUSTED
from server.engine.context import ServerContext
from server.declare.rendered import materialized
from server.errors import (
    FhirError,
    InvalidValue,
    ResourceNotFound,
    UnsupportedParameter,
)
from tests.support.data import UUID_1

BASE = "http://fhir.test/fhir"
NS = "https://orgunit-fhir.example.org"
SOURCE_SYSTEM = f"{NS}/fhir/sid/ministere-de-la-sante"


def search(ctx: ServerContext, query: str, strict: bool = False) -> dict[str, Any]:
    return materialized(searches.search_type(ctx, TRUSTED, BASE, "Location",
                                             parse_qsl(query, keep_blank_values=True), strict=strict))


def ids(bundle: dict[str, Any]) -> list[int]:
    return [int(e["resource"]["id"]) for e in bundle.get("entry", []) if e["search"]["mode"] != "outcome"]


MATCHES = [
    ("no-params", "", [1, 2, 3, 10, 11, 20, 30, 31, 32]),
    ("name-prefix", "name=ds", [10, 11]),
    ("name-case-accent", "name=DS DEDOU", [11]),
    ("name-accented-value", "name=dispensaire kéré", [32]),
    ("name-alias", "name=segou", [20]),
    ("name-not-infix", "name=boromo", []),
    ("name-contains", "name:contains=boromo", [10, 31]),
    ("name-contains-accent", "name:contains=ségou", [20, 30]),
    ("name-exact", "name:exact=CSPS Ségou", [30]),
    ("name-exact-case", "name:exact=csps ségou", []),
    ("name-exact-alias", "name:exact=HBS", [3]),
    ("name-like-wildcards-literal", "name:contains=50%_x", [31]),
    ("name-percent-no-wildcard", "name:contains=%", [31]),
    ("name-or", "name=burkina,hauts", [1, 3]),
    ("name-and", "name=ds&name:contains=dedougou", [11]),
    ("status-active", "status=active", [1, 2, 3, 10, 20, 30]),
    ("status-suspended", "status=suspended", [11, 32]),
    ("status-inactive", "status=inactive", [31]),
    ("status-system", "status=http://hl7.org/fhir/location-status|inactive", [31]),
    ("status-wrong-system", "status=http://example.org|inactive", []),
    ("status-or", "status=inactive,suspended", [11, 31, 32]),
    ("identifier-value", "identifier=KvNOePwHFyH", [30]),
    ("identifier-system-value", f"identifier={SOURCE_SYSTEM}|KvNOePwHFyH", [30]),
    ("identifier-wrong-system", "identifier=http://other.org|KvNOePwHFyH", []),
    ("identifier-no-system", "identifier=|KvNOePwHFyH", []),
    ("identifier-system-only", f"identifier={SOURCE_SYSTEM}|", [1, 2, 3, 10, 11, 20, 30, 31, 32]),
    ("identifier-uuid-bare", f"identifier={UUID_1}", [1]),
    ("identifier-uuid-urn", f"identifier=urn:uuid:{UUID_1}", [1]),
    ("identifier-uuid-system", f"identifier=urn:ietf:rfc:3986|urn:uuid:{UUID_1}", [1]),
    ("identifier-alias", "identifier=ASN-20", [20]),
    ("identifier-alias-system", f"identifier={NS}/fhir/sid/alias|HBS", [3]),
    ("identifier-name-is-not-alias", "identifier=Burkina Faso", []),
    ("identifier-case-sensitive", "identifier=kvnoepwhfyh", []),
    ("type-code", "type=CSPS", [30, 32]),
    ("type-system-code", f"type={NS}/fhir/CodeSystem/org-unit-type|CHR", [31]),
    ("type-or", "type=REGION,COUNTRY", [1, 2, 3]),
    ("type-unknown", "type=NOPE", []),
    ("partof-id", "partof=20", [30, 31]),
    ("partof-typed", "partof=Location/10", [20, 32]),
    ("partof-absolute", f"partof={BASE}/Location/2", [10, 11]),
    ("partof-non-numeric-id", "partof=abc", []),
    ("combined", "name=csps&status=active&type=CSPS&_count=5", [30]),
    ("empty-value-ignored", "name=&status=suspended", [11, 32]),
    ("unknown-param-ignored", "colour=blue&status=inactive", [31]),
]


@pytest.mark.parametrize("query, expected", [pytest.param(q, e, id=i) for i, q, e in MATCHES])
def test_search_matches(small_ctx: ServerContext, query: str, expected: list[int]) -> None:
    bundle = search(small_ctx, query + "&_count=100" if "_count" not in query else query)
    assert ids(bundle) == expected
    assert bundle["total"] == len(expected)


ERRORS = [
    ("status-unknown-code", "status=open", InvalidValue, "active, inactive, suspended"),
    ("count-negative", "_count=-1", InvalidValue, "_count"),
    ("count-not-integer", "_count=ten", InvalidValue, "_count"),
    ("skip-negative", "_skip=-5", InvalidValue, "_skip"),
    ("skip-float", "_skip=1.5", InvalidValue, "_skip"),
    ("modifier-unsupported-string", "name:below=x", UnsupportedParameter, ":below"),
    ("modifier-unsupported-token", "status:text=active", UnsupportedParameter, ":text"),
    ("partof-other-type", "partof=Organization/1", InvalidValue, "Location"),
    ("partof-not-an-id", "partof=Location/a b", InvalidValue, "not a FHIR id"),
    ("token-bar-alone", "identifier=|", InvalidValue, "'|'"),
]


@pytest.mark.parametrize("query, error, words", [pytest.param(q, e, w, id=i) for i, q, e, w in ERRORS])
def test_search_errors(small_ctx: ServerContext, query: str, error: type[FhirError], words: str) -> None:
    with pytest.raises(error) as info:
        search(small_ctx, query)
    assert info.value.status == 400
    assert words in info.value.diagnostics


def test_strict_handling_rejects_unknown_parameters(small_ctx: ServerContext) -> None:
    with pytest.raises(UnsupportedParameter, match="colour"):
        search(small_ctx, "colour=blue", strict=True)
    assert ids(search(small_ctx, "status=inactive", strict=True)) == [31]


@pytest.mark.parametrize("query, named, matches", [
    pytest.param("nme=dine", "parameter nme ignored", 9, id="misspelt-name"),
    pytest.param("nme=dine&colour:exact=blue&status=inactive", "parameters nme, colour:exact ignored", 1, id="two"),
    pytest.param("nme=dine&_summary=count", "parameter nme ignored", 0, id="count-only"),
])
def test_an_ignored_parameter_is_a_warning_in_the_bundle(small_ctx: ServerContext, query: str, named: str,
                                                         matches: int) -> None:
    """A misspelt parameter returns everything (lenient handling), and an outcome entry says so."""
    bundle = search(small_ctx, query)
    outcomes = [e for e in bundle["entry"] if e["search"]["mode"] == "outcome"]
    assert len(ids(bundle)) == matches and len(outcomes) == 1 and "fullUrl" not in outcomes[0]
    issue = outcomes[0]["resource"]["issue"][0]
    assert (issue["severity"], issue["code"]) == ("warning", "not-supported") and named in issue["diagnostics"]
    assert "Prefer: handling=strict" in issue["diagnostics"] and "nme" not in link(bundle, "self")
    assert "entry" not in search(small_ctx, "name=zzz")  # nothing ignored, nothing found: no entry at all


def link(bundle: dict[str, Any], relation: str) -> str | None:
    return next((l["url"] for l in bundle["link"] if l["relation"] == relation), None)


def query_of(url: str) -> list[tuple[str, str]]:
    return parse_qsl(urlsplit(url).query)


@pytest.mark.parametrize("query, expected", [
    pytest.param("colour=blue&name=ds", [("name", "ds"), ("_count", "20")], id="unknown-dropped"),
    pytest.param("name=&status=active", [("status", "active"), ("_count", "20")], id="empty-dropped"),
    pytest.param("name:contains=a,b&name=c", [("name:contains", "a,b"), ("name", "c"), ("_count", "20")], id="or-and-kept"),
    pytest.param("_count=500", [("_count", "100")], id="count-clamped"),
    pytest.param("_count=2&_skip=2", [("_count", "2"), ("_skip", "2")], id="skip-shown"),
    pytest.param("identifier=a\\,b", [("identifier", "a\\,b"), ("_count", "20")], id="escaped-comma"),
])
def test_self_link_shows_exactly_what_was_applied(small_ctx: ServerContext, query: str,
                                                 expected: list[tuple[str, str]]) -> None:
    self_url = link(search(small_ctx, query), "self")
    assert self_url is not None and self_url.startswith(f"{BASE}/Location?")
    assert query_of(self_url) == expected


def test_paging_links_walk_every_match_once(small_ctx: ServerContext) -> None:
    first = search(small_ctx, "_count=2")
    assert first["total"] == 9
    assert link(first, "previous") is None
    assert query_of(link(first, "last") or "") == [("_count", "2"), ("_skip", "8")]
    seen, page = [], first
    while True:
        seen += ids(page)
        nxt = link(page, "next")
        if nxt is None:
            break
        page = search(small_ctx, urlsplit(nxt).query)
        assert link(page, "previous") is not None
    assert seen == sorted(seen) == [1, 2, 3, 10, 11, 20, 30, 31, 32]


@pytest.mark.parametrize("query, expected", [
    pytest.param("_count=2", [1, 2, 3, 10, 11, 20, 30, 31, 32], id="id-order"),
    pytest.param("_count=2&_sort=-_id", [32, 31, 30, 20, 11, 10, 3, 2, 1], id="descending-id"),
    pytest.param("_count=2&status=active", [1, 2, 3, 10, 20, 30], id="filtered"),
])
def test_next_links_continue_after_the_last_id(small_ctx: ServerContext, query: str, expected: list[int]) -> None:
    """Keyset paging: a next link names the page's last id, so a deep page costs what the first does."""
    seen, page, skip = [], search(small_ctx, query), 0
    while True:
        seen += ids(page)
        nxt = link(page, "next")
        if nxt is None:
            break
        skip += 2
        assert dict(query_of(nxt))["_after"] == str(seen[-1]) and dict(query_of(nxt))["_skip"] == str(skip)
        page = search(small_ctx, urlsplit(nxt).query)
        assert link(page, "self") == nxt  # the self link shows the _after it applied
    assert seen == expected


def test_next_links_of_other_orders_go_by_offset(small_ctx: ServerContext) -> None:
    nxt = link(search(small_ctx, "_count=2&_sort=name"), "next")
    assert nxt is not None and "_after" not in nxt and dict(query_of(nxt))["_skip"] == "2"


def test_after_is_a_position_not_a_filter_on_total(small_ctx: ServerContext) -> None:
    page = search(small_ctx, "_count=2&_skip=4&_after=10")
    assert ids(page) == [11, 20] and page["total"] == 9


@pytest.mark.parametrize("query, words", [
    pytest.param("_after=abc", "_after must be a Location id", id="not-an-id"),
    pytest.param("_after=10&_sort=name", "_id order only", id="other-order"),
    pytest.param("_after=10&near=11.7|-3.3|10|km", "_id order only", id="near-order"),
])
def test_after_errors(small_ctx: ServerContext, query: str, words: str) -> None:
    with pytest.raises(FhirError) as info:
        search(small_ctx, query)
    assert info.value.status == 400 and words in info.value.diagnostics


def test_count_zero_gives_total_only(small_ctx: ServerContext) -> None:
    bundle = search(small_ctx, "status=active&_count=0")
    assert bundle["total"] == 6 and "entry" not in bundle
    assert [l["relation"] for l in bundle["link"]] == ["self"]


def test_skip_past_the_end_is_an_empty_page(small_ctx: ServerContext) -> None:
    bundle = search(small_ctx, "_skip=50")
    assert bundle["total"] == 9 and "entry" not in bundle and link(bundle, "next") is None


def test_default_and_maximum_page_size(small_ctx: ServerContext) -> None:
    assert search(small_ctx, "")["link"][0]["url"].endswith("_count=20")
    assert query_of(link(search(small_ctx, "_count=1000"), "self") or "")[-1] == ("_count", "100")


def test_entries_carry_full_url_and_match_mode(small_ctx: ServerContext) -> None:
    for entry in search(small_ctx, "")["entry"]:
        assert entry["fullUrl"] == f"{BASE}/Location/{entry['resource']['id']}"
        assert entry["search"] == {"mode": "match"}


def children(ctx: ServerContext, rid: str, query: str = "") -> dict[str, Any]:
    return materialized(searches.run_operation(ctx, TRUSTED, BASE, "Location", rid, "children", parse_qsl(query)))


@pytest.mark.parametrize("rid, query, expected", [
    pytest.param("1", "", [2, 3], id="country"),
    pytest.param("20", "", [30, 31], id="area"),
    pytest.param("20", "status=active", [30], id="filtered"),
    pytest.param("10", "name=dispensaire", [32], id="filtered-by-name"),
    pytest.param("30", "", [], id="leaf"),
    pytest.param("20", "partof=10", [], id="and-with-partof"),
])
def test_children(small_ctx: ServerContext, rid: str, query: str, expected: list[int]) -> None:
    bundle = children(small_ctx, rid, query)
    assert ids(bundle) == expected and bundle["total"] == len(expected)
    for entry in bundle.get("entry", []):
        assert entry["resource"]["partOf"]["reference"] == f"Location/{rid}"


def test_children_links_page_under_the_operation(small_ctx: ServerContext) -> None:
    bundle = children(small_ctx, "20", "_count=1")
    assert link(bundle, "self") == f"{BASE}/Location/20/$children?_count=1"
    assert link(bundle, "next") == f"{BASE}/Location/20/$children?_count=1&_skip=1&_after=30"


@pytest.mark.parametrize("rid", ["999", "abc", "1.5", "x" * 65])
def test_children_of_unknown_parent_is_404(small_ctx: ServerContext, rid: str) -> None:
    with pytest.raises(ResourceNotFound):
        children(small_ctx, rid)


@pytest.mark.parametrize("rid", ["999", "abc", "-", "x" * 65, "1 2"])
def test_read_unknown_is_404(small_ctx: ServerContext, rid: str) -> None:
    with pytest.raises(ResourceNotFound):
        reads.read(small_ctx, TRUSTED, "Location", rid)
