"""What a Location search matches, as an interaction (no HTTP), on both backends: one table of query -> ids per
parameter type (string, token, reference and its hierarchy modifiers, the common _id and _lastUpdated, near, _sort,
and how parameters combine), one table of the queries refused with a 400; then lenient and strict handling, the
links a search answers with, paging, and $children. What a search returns besides its matches (_total, _summary,
_elements, _include): test_results.py."""
from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from server.engine import reads, searches
from server.engine.caller import TRUSTED
from server.engine.context import ServerContext
from server.declare.rendered import materialized
from server.errors import FhirError, InvalidRequest, InvalidValue, ResourceNotFound, UnsupportedParameter
from tests.support.data import UUID_1
from tests.support.searching import BASE, matches, search, self_query

NS = "https://orgunit-fhir.example.org"
SOURCE_SYSTEM = f"{NS}/fhir/sid/ministere-de-la-sante"
ALL = [1, 2, 3, 10, 11, 20, 30, 31, 32]


def assert_matches(ctx: ServerContext, query: str, expected: list[int], shown: bool = True) -> None:
    """The matches in order, their total, and (`shown`) a self link that shows the query as sent."""
    bundle = search(ctx, "Location", query if "_count" in query else f"{query}&_count=100")
    assert matches(bundle) == expected and bundle["total"] == len(expected)
    if shown:
        assert self_query(bundle) == [p for p in parse_qsl(query) if p[0] != "_count"]


def cases(*rows: tuple[Any, ...]) -> list[Any]:
    return [pytest.param(*row[1:], id=row[0]) for row in rows]


STRING = cases(  # name
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
    ("name-missing-false", "name:missing=false", ALL),
    ("name-missing-true", "name:missing=true", []),
)

TOKEN = cases(  # status, identifier, type
    ("status-active", "status=active", [1, 2, 3, 10, 20, 30]),
    ("status-suspended", "status=suspended", [11, 32]),
    ("status-inactive", "status=inactive", [31]),
    ("status-system", "status=http://hl7.org/fhir/location-status|inactive", [31]),
    ("status-wrong-system", "status=http://example.org|inactive", []),
    ("status-or", "status=inactive,suspended", [11, 31, 32]),
    ("status-not", "status:not=active", [11, 31, 32]),
    ("status-not-or", "status:not=inactive,suspended", [1, 2, 3, 10, 20, 30]),
    ("status-not-and", "status:not=active&status:not=inactive", [11, 32]),
    ("identifier-value", "identifier=KvNOePwHFyH", [30]),
    ("identifier-system-value", f"identifier={SOURCE_SYSTEM}|KvNOePwHFyH", [30]),
    ("identifier-wrong-system", "identifier=http://other.org|KvNOePwHFyH", []),
    ("identifier-no-system", "identifier=|KvNOePwHFyH", []),
    ("identifier-system-only", f"identifier={SOURCE_SYSTEM}|", ALL),
    ("identifier-uuid-bare", f"identifier={UUID_1}", [1]),
    ("identifier-uuid-urn", f"identifier=urn:uuid:{UUID_1}", [1]),
    ("identifier-uuid-system", f"identifier=urn:ietf:rfc:3986|urn:uuid:{UUID_1}", [1]),
    ("identifier-alias", "identifier=ASN-20", [20]),
    ("identifier-alias-system", f"identifier={NS}/fhir/sid/alias|HBS", [3]),
    ("identifier-name-is-not-alias", "identifier=Burkina Faso", []),
    ("identifier-case-sensitive", "identifier=kvnoepwhfyh", []),
    ("identifier-text", "identifier:text=kvno", [30]),
    ("identifier-text-alias", "identifier:text=asn", [20]),
    ("identifier-not", "identifier:not=KvNOePwHFyH", [1, 2, 3, 10, 11, 20, 31, 32]),
    ("identifier-missing", "identifier:missing=true", []),
    ("type-code", "type=CSPS", [30, 32]),
    ("type-system-code", f"type={NS}/fhir/CodeSystem/org-unit-type|CHR", [31]),
    ("type-or", "type=REGION,COUNTRY", [1, 2, 3]),
    ("type-unknown", "type=NOPE", []),
    ("type-text", "type:text=centre", [30, 32]),
    ("type-text-accented", "type:text=Hôp", [31]),
    ("type-not", "type:not=CSPS", [1, 2, 3, 10, 11, 20, 31]),
    ("type-missing", "type:missing=true", []),
)

REFERENCE = cases(  # partof, and the hierarchy it makes (:below, :above, :missing)
    ("partof-id", "partof=20", [30, 31]),
    ("partof-typed", "partof=Location/10", [20, 32]),
    ("partof-absolute", f"partof={BASE}/Location/2", [10, 11]),
    ("partof-non-numeric-id", "partof=abc", []),
    ("roots", "partof:missing=true", [1]),
    ("not-roots", "partof:missing=false", [2, 3, 10, 11, 20, 30, 31, 32]),
    ("below-region", "partof:below=2", [10, 11, 20, 30, 31, 32]),
    ("below-typed", "partof:below=Location/10", [20, 30, 31, 32]),
    ("below-absolute", f"partof:below={BASE}/Location/20", [30, 31]),
    ("below-leaf", "partof:below=30", []),
    ("below-unknown", "partof:below=999", []),
    ("below-or", "partof:below=20,3", [30, 31]),
    ("below-and-status", "partof:below=2&status=active", [10, 20, 30]),
    ("above-facility", "partof:above=30", [1, 2, 10, 20]),
    ("above-root", "partof:above=1", []),
)

COMMON = cases(  # _id, _lastUpdated
    ("id", "_id=30", [30]),
    ("id-or", "_id=31,30,999", [30, 31]),
    ("id-not-numeric", "_id=abc", []),
    ("id-not", "_id:not=30", [1, 2, 3, 10, 11, 20, 31, 32]),
    ("last-updated-missing", "_lastUpdated:missing=false", ALL),
)

NEAR = cases(  # special: by distance from a point, nearest first
    ("near-1km", "near=11.716788|-3.339844|1|km", [30]),
    ("near-10km-by-distance", "near=11.7|-3.3|10|km", [31, 30]),
    ("near-default-units", "near=11.7|-3.3|10", [31, 30]),
    ("near-metres", "near=11.716788|-3.339844|100|m", [30]),
    ("near-miles", "near=11.7|-3.3|5|mi", [31, 30]),
    ("near-far-away", "near=-33.9|18.4|100|km", []),
    ("near-and-status", "near=11.7|-3.3|10|km&status=active", [30]),
    ("near-sorted-by-id", "near=11.7|-3.3|10|km&_sort=_id", [30, 31]),
)

SORT = cases(
    ("sort-name", "_sort=name", [20, 2, 1, 31, 30, 32, 10, 11, 3]),
    ("sort-id-desc", "_sort=-_id", [32, 31, 30, 20, 11, 10, 3, 2, 1]),
    ("sort-status-then-id-desc", "_sort=status,-_id", [30, 20, 10, 3, 2, 1, 31, 32, 11]),
    ("sort-last-updated", "_sort=-_lastUpdated", ALL),
)

COMBINED = cases(  # no parameter, several, and what is not a condition (the self link shows what was applied:
    ("no-params", "", ALL),  # test_self_link_shows_exactly_what_was_applied)
    ("combined", "name=csps&status=active&type=CSPS&_count=5", [30]),
    ("empty-value-ignored", "name=&status=suspended", [11, 32]),
    ("unknown-param-ignored", "colour=blue&status=inactive", [31]),
)


@pytest.mark.parametrize("query, expected", STRING)
def test_string(small_ctx: ServerContext, query: str, expected: list[int]) -> None:
    assert_matches(small_ctx, query, expected)


@pytest.mark.parametrize("query, expected", TOKEN)
def test_token(small_ctx: ServerContext, query: str, expected: list[int]) -> None:
    assert_matches(small_ctx, query, expected)


@pytest.mark.parametrize("query, expected", REFERENCE)
def test_reference(small_ctx: ServerContext, query: str, expected: list[int]) -> None:
    assert_matches(small_ctx, query, expected)


@pytest.mark.parametrize("query, expected", COMMON)
def test_common_parameters(small_ctx: ServerContext, query: str, expected: list[int]) -> None:
    assert_matches(small_ctx, query, expected)


@pytest.mark.parametrize("query, expected", NEAR)
def test_near(small_ctx: ServerContext, query: str, expected: list[int]) -> None:
    assert_matches(small_ctx, query, expected)


@pytest.mark.parametrize("query, expected", SORT)
def test_sort(small_ctx: ServerContext, query: str, expected: list[int]) -> None:
    assert_matches(small_ctx, query, expected)


@pytest.mark.parametrize("query, expected", COMBINED)
def test_parameters_combined(small_ctx: ServerContext, query: str, expected: list[int]) -> None:
    assert_matches(small_ctx, query, expected, shown=False)


REFUSED = cases(  # each with the words its diagnostics must hold
    ("status-unknown-code", "status=open", InvalidValue, "active, inactive, suspended"),
    ("missing-not-boolean", "name:missing=yes", InvalidValue, "takes true or false"),
    ("modifier-unsupported-string", "name:below=x", UnsupportedParameter, ":below"),
    ("below-on-name", "name:below=x", UnsupportedParameter, "not supported on name (string)"),
    ("not-on-string", "name:not=x", UnsupportedParameter, ":not is not supported on name"),
    ("modifier-unsupported-token", "status:text=active", UnsupportedParameter, ":text"),
    ("text-on-status", "status:text=act", UnsupportedParameter, "not supported on status (token)"),
    ("token-bar-alone", "identifier=|", InvalidValue, "'|'"),
    ("partof-other-type", "partof=Organization/1", InvalidValue, "Location"),
    ("partof-not-an-id", "partof=Location/a b", InvalidValue, "not a FHIR id"),
    ("near-one-part", "near=11.7", InvalidValue, "latitude|longitude|distance|units"),
    ("near-latitude-range", "near=100|-3.3|10|km", InvalidValue, "latitude 100.0 is outside -90..90"),
    ("near-longitude-range", "near=11|-300|10|km", InvalidValue, "longitude -300.0 is outside -180..180"),
    ("near-not-a-number", "near=abc|-3.3|10|km", InvalidValue, "is not a number"),
    ("near-nan", "near=nan|-3.3|10|km", InvalidValue, "is not a finite number"),
    ("near-units", "near=11.7|-3.3|10|ft", InvalidValue, "use km, m or mi"),
    ("near-negative", "near=11.7|-3.3|-1|km", InvalidValue, "distance must be positive"),
    ("count-negative", "_count=-1", InvalidValue, "_count"),
    ("count-not-integer", "_count=ten", InvalidValue, "_count"),
    ("skip-negative", "_skip=-5", InvalidValue, "_skip"),
    ("skip-float", "_skip=1.5", InvalidValue, "_skip"),
    ("sort-unknown", "_sort=colour", UnsupportedParameter, "cannot sort Location by 'colour'"),
    ("sort-not-sortable", "_sort=identifier", UnsupportedParameter, "cannot sort Location by 'identifier'"),
    ("total-bad", "_total=some", InvalidValue, "_total must be one of"),
    ("summary-bad", "_summary=yes", InvalidValue, "_summary must be one of"),
    ("summary-text", "_summary=text", UnsupportedParameter, "_summary=text is not supported"),
    ("include-unknown-param", "_include=Location:colour", UnsupportedParameter, "'Location:colour' is not supported"),
    ("include-not-reference", "_include=Location:name", UnsupportedParameter, "with a reference parameter"),
    ("include-other-type", "_include=Organization:partof", UnsupportedParameter,
     "'Organization:partof' is not supported"),
    ("include-wrong-target", "_include=Location:partof:Organization", UnsupportedParameter,
     "'Location:partof:Organization' is not supported"),
    ("revinclude-unknown", "_revinclude=Location:colour", UnsupportedParameter, "_revinclude='Location:colour'"),
    ("iterate-not-reference", "_revinclude:iterate=Location:name", UnsupportedParameter,
     "_revinclude:iterate='Location:name' is not supported"),
    ("include-unknown-modifier", "_include:recurse=Location:partof", UnsupportedParameter,
     "the only modifier of _include and _revinclude is :iterate"),
    ("too-many-values", "_id=" + ",".join(str(i) for i in range(101)), InvalidRequest, "too many values (101)"),
    ("too-many-parameters", "&".join(f"name:contains={i}" for i in range(41)), InvalidRequest,
     "too many search parameters (41)"),
)


@pytest.mark.parametrize("query, error, words", REFUSED)
def test_refused_with_a_400(small_ctx: ServerContext, query: str, error: type[FhirError], words: str) -> None:
    with pytest.raises(error) as info:
        search(small_ctx, "Location", query)
    assert info.value.status == 400
    assert words in info.value.diagnostics


def test_strict_handling_rejects_unknown_parameters(small_ctx: ServerContext) -> None:
    with pytest.raises(UnsupportedParameter, match="colour"):
        search(small_ctx, "Location", "colour=blue", strict=True)
    assert matches(search(small_ctx, "Location", "status=inactive", strict=True)) == [31]


@pytest.mark.parametrize("query, named, found", [
    pytest.param("nme=dine", "parameter nme ignored", 9, id="misspelt-name"),
    pytest.param("nme=dine&colour:exact=blue&status=inactive", "parameters nme, colour:exact ignored", 1, id="two"),
    pytest.param("nme=dine&_summary=count", "parameter nme ignored", 0, id="count-only"),
])
def test_an_ignored_parameter_is_a_warning_in_the_bundle(small_ctx: ServerContext, query: str, named: str,
                                                         found: int) -> None:
    """A misspelt parameter returns everything (lenient handling), and an outcome entry says so."""
    bundle = search(small_ctx, "Location", query)
    outcomes = [e for e in bundle["entry"] if e["search"]["mode"] == "outcome"]
    assert len(matches(bundle)) == found and len(outcomes) == 1 and "fullUrl" not in outcomes[0]
    issue = outcomes[0]["resource"]["issue"][0]
    assert (issue["severity"], issue["code"]) == ("warning", "not-supported") and named in issue["diagnostics"]
    assert "Prefer: handling=strict" in issue["diagnostics"] and "nme" not in link(bundle, "self")
    assert "entry" not in search(small_ctx, "Location", "name=zzz")  # nothing ignored, nothing found: no entry at all


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
    self_url = link(search(small_ctx, "Location", query), "self")
    assert self_url is not None and self_url.startswith(f"{BASE}/Location?")
    assert query_of(self_url) == expected


def test_paging_links_walk_every_match_once(small_ctx: ServerContext) -> None:
    first = search(small_ctx, "Location", "_count=2")
    assert first["total"] == 9
    assert link(first, "previous") is None
    assert query_of(link(first, "last") or "") == [("_count", "2"), ("_skip", "8")]
    seen, page = [], first
    while True:
        seen += matches(page)
        nxt = link(page, "next")
        if nxt is None:
            break
        page = search(small_ctx, "Location", urlsplit(nxt).query)
        assert link(page, "previous") is not None
    assert seen == sorted(seen) == [1, 2, 3, 10, 11, 20, 30, 31, 32]


@pytest.mark.parametrize("query, expected", [
    pytest.param("_count=2", [1, 2, 3, 10, 11, 20, 30, 31, 32], id="id-order"),
    pytest.param("_count=2&_sort=-_id", [32, 31, 30, 20, 11, 10, 3, 2, 1], id="descending-id"),
    pytest.param("_count=2&status=active", [1, 2, 3, 10, 20, 30], id="filtered"),
])
def test_next_links_continue_after_the_last_id(small_ctx: ServerContext, query: str, expected: list[int]) -> None:
    """Keyset paging: a next link names the page's last id, so a deep page costs what the first does."""
    seen, page, skip = [], search(small_ctx, "Location", query), 0
    while True:
        seen += matches(page)
        nxt = link(page, "next")
        if nxt is None:
            break
        skip += 2
        assert dict(query_of(nxt))["_after"] == str(seen[-1]) and dict(query_of(nxt))["_skip"] == str(skip)
        page = search(small_ctx, "Location", urlsplit(nxt).query)
        assert link(page, "self") == nxt  # the self link shows the _after it applied
    assert seen == expected


def test_next_links_of_other_orders_go_by_offset(small_ctx: ServerContext) -> None:
    nxt = link(search(small_ctx, "Location", "_count=2&_sort=name"), "next")
    assert nxt is not None and "_after" not in nxt and dict(query_of(nxt))["_skip"] == "2"


def test_after_is_a_position_not_a_filter_on_total(small_ctx: ServerContext) -> None:
    page = search(small_ctx, "Location", "_count=2&_skip=4&_after=10")
    assert matches(page) == [11, 20] and page["total"] == 9


@pytest.mark.parametrize("query, words", [
    pytest.param("_after=abc", "_after must be a Location id", id="not-an-id"),
    pytest.param("_after=10&_sort=name", "_id order only", id="other-order"),
    pytest.param("_after=10&near=11.7|-3.3|10|km", "_id order only", id="near-order"),
])
def test_after_errors(small_ctx: ServerContext, query: str, words: str) -> None:
    with pytest.raises(FhirError) as info:
        search(small_ctx, "Location", query)
    assert info.value.status == 400 and words in info.value.diagnostics


def test_count_zero_gives_total_only(small_ctx: ServerContext) -> None:
    bundle = search(small_ctx, "Location", "status=active&_count=0")
    assert bundle["total"] == 6 and "entry" not in bundle
    assert [l["relation"] for l in bundle["link"]] == ["self"]


def test_skip_past_the_end_is_an_empty_page(small_ctx: ServerContext) -> None:
    bundle = search(small_ctx, "Location", "_skip=50")
    assert bundle["total"] == 9 and "entry" not in bundle and link(bundle, "next") is None


def test_default_and_maximum_page_size(small_ctx: ServerContext) -> None:
    assert search(small_ctx, "Location", "")["link"][0]["url"].endswith("_count=20")
    assert query_of(link(search(small_ctx, "Location", "_count=1000"), "self") or "")[-1] == ("_count", "100")


def test_entries_carry_full_url_and_match_mode(small_ctx: ServerContext) -> None:
    for entry in search(small_ctx, "Location", "")["entry"]:
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
    assert matches(bundle) == expected and bundle["total"] == len(expected)
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


@pytest.mark.parametrize("query", [
    pytest.param("name=%20", id="a-space"),
    pytest.param("name=%09", id="a-tab"),
    pytest.param("name:contains=%20", id="contains-a-space"),
    pytest.param("name=%2C", id="nothing-between-commas"),
    pytest.param("name=Boromo,", id="a-trailing-comma"),
    pytest.param("name=%CC%81", id="an-accent-alone"),
    pytest.param("identifier=%20", id="a-blank-token"),
])
def test_a_blank_value_is_refused_not_a_match_of_everything(small_ctx: ServerContext, query: str) -> None:
    with pytest.raises(InvalidValue):
        search(small_ctx, "Location", query)
