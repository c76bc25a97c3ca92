"""Search depth (interaction tests, both backends): _id, modifiers, hierarchy, near, _sort, _total,
_summary, _elements, _include and _revinclude, each with its bad inputs and the self link it yields."""
from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from sqlalchemy.sql.util import find_tables

from server.engine import reads, searches
from server.engine.caller import TRUSTED
from server.engine.context import ServerContext
from server.declare.rendered import materialized
from server.errors import FhirError, InvalidRequest, InvalidValue, UnsupportedParameter
from server.search.request import parse_search
from server.search.bodies import body_page_query
from server.search.sql import count_query
from tests.support.validators import assert_valid

BASE = "http://fhir.test/fhir"
ALL = [1, 2, 3, 10, 11, 20, 30, 31, 32]
SUBSETTED = {"system": "http://terminology.hl7.org/CodeSystem/v3-ObservationValue", "code": "SUBSETTED",
             "display": "subsetted"}


def search(ctx: ServerContext, query: str) -> dict[str, Any]:
    return materialized(searches.search_type(ctx, TRUSTED, BASE, "Location", parse_qsl(query, keep_blank_values=True)))


def matches(bundle: dict[str, Any]) -> list[int]:
    return [int(e["resource"]["id"]) for e in bundle.get("entry", []) if e["search"]["mode"] == "match"]


def included(bundle: dict[str, Any]) -> list[int]:
    return [int(e["resource"]["id"]) for e in bundle.get("entry", []) if e["search"]["mode"] == "include"]


def self_query(bundle: dict[str, Any]) -> list[tuple[str, str]]:
    return [p for p in parse_qsl(urlsplit(bundle["link"][0]["url"]).query) if p[0] != "_count"]


CASES = [
    ("id", "_id=30", [30]),
    ("id-or", "_id=31,30,999", [30, 31]),
    ("id-not-numeric", "_id=abc", []),
    ("id-not", "_id:not=30", [1, 2, 3, 10, 11, 20, 31, 32]),
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
    ("name-missing-false", "name:missing=false", ALL),
    ("name-missing-true", "name:missing=true", []),
    ("status-not", "status:not=active", [11, 31, 32]),
    ("status-not-or", "status:not=inactive,suspended", [1, 2, 3, 10, 20, 30]),
    ("status-not-and", "status:not=active&status:not=inactive", [11, 32]),
    ("type-text", "type:text=centre", [30, 32]),
    ("type-text-accented", "type:text=Hôp", [31]),
    ("type-not", "type:not=CSPS", [1, 2, 3, 10, 11, 20, 31]),
    ("type-missing", "type:missing=true", []),
    ("identifier-text", "identifier:text=kvno", [30]),
    ("identifier-text-alias", "identifier:text=asn", [20]),
    ("identifier-not", "identifier:not=KvNOePwHFyH", [1, 2, 3, 10, 11, 20, 31, 32]),
    ("identifier-missing", "identifier:missing=true", []),
    ("last-updated-missing", "_lastUpdated:missing=false", ALL),
    ("near-1km", "near=11.716788|-3.339844|1|km", [30]),
    ("near-10km-by-distance", "near=11.7|-3.3|10|km", [31, 30]),
    ("near-default-units", "near=11.7|-3.3|10", [31, 30]),
    ("near-metres", "near=11.716788|-3.339844|100|m", [30]),
    ("near-miles", "near=11.7|-3.3|5|mi", [31, 30]),
    ("near-far-away", "near=-33.9|18.4|100|km", []),
    ("near-and-status", "near=11.7|-3.3|10|km&status=active", [30]),
    ("near-sorted-by-id", "near=11.7|-3.3|10|km&_sort=_id", [30, 31]),
    ("sort-name", "_sort=name", [20, 2, 1, 31, 30, 32, 10, 11, 3]),
    ("sort-id-desc", "_sort=-_id", [32, 31, 30, 20, 11, 10, 3, 2, 1]),
    ("sort-status-then-id-desc", "_sort=status,-_id", [30, 20, 10, 3, 2, 1, 31, 32, 11]),
    ("sort-last-updated", "_sort=-_lastUpdated", ALL),
]


@pytest.mark.parametrize("query, expected", [pytest.param(q, e, id=i) for i, q, e in CASES])
def test_search_depth(small_ctx: ServerContext, query: str, expected: list[int]) -> None:
    bundle = search(small_ctx, query + "&_count=100")
    assert matches(bundle) == expected and bundle["total"] == len(expected)
    assert self_query(bundle) == parse_qsl(query)


def test_sort_by_name_is_the_stored_name_order(small_ctx: ServerContext) -> None:
    names = [e["resource"]["name"].lower() for e in search(small_ctx, "_sort=name&_count=100")["entry"]]
    assert names == sorted(names)


def test_near_carries_the_distance(small_ctx: ServerContext) -> None:
    bundle = search(small_ctx, "near=11.7|-3.3|10|km")
    assert_valid(bundle)
    ext = [e["search"]["extension"][0] for e in bundle["entry"]]
    assert all(x["url"] == "http://hl7.org/fhir/StructureDefinition/location-distance" for x in ext)
    distances = [x["valueDistance"]["value"] for x in ext]
    assert distances[0] == 0.0 and 4.6 < distances[1] < 4.8 and distances == sorted(distances)
    assert ext[0]["valueDistance"]["code"] == "km"


BAD = [
    ("missing-not-boolean", "name:missing=yes", InvalidValue),
    ("below-on-name", "name:below=x", UnsupportedParameter),
    ("text-on-status", "status:text=act", UnsupportedParameter),
    ("not-on-string", "name:not=x", UnsupportedParameter),
    ("near-one-part", "near=11.7", InvalidValue),
    ("near-latitude-range", "near=100|-3.3|10|km", InvalidValue),
    ("near-longitude-range", "near=11|-300|10|km", InvalidValue),
    ("near-not-a-number", "near=abc|-3.3|10|km", InvalidValue),
    ("near-nan", "near=nan|-3.3|10|km", InvalidValue),
    ("near-units", "near=11.7|-3.3|10|ft", InvalidValue),
    ("near-negative", "near=11.7|-3.3|-1|km", InvalidValue),
    ("sort-unknown", "_sort=colour", UnsupportedParameter),
    ("sort-not-sortable", "_sort=identifier", UnsupportedParameter),
    ("total-bad", "_total=some", InvalidValue),
    ("summary-bad", "_summary=yes", InvalidValue),
    ("summary-text", "_summary=text", UnsupportedParameter),
    ("include-unknown-param", "_include=Location:colour", UnsupportedParameter),
    ("include-not-reference", "_include=Location:name", UnsupportedParameter),
    ("include-other-type", "_include=Organization:partof", UnsupportedParameter),
    ("include-wrong-target", "_include=Location:partof:Organization", UnsupportedParameter),
    ("revinclude-unknown", "_revinclude=Location:colour", UnsupportedParameter),
    ("revinclude-iterate", "_revinclude:iterate=Location:partof", UnsupportedParameter),
    ("include-unknown-modifier", "_include:recurse=Location:partof", UnsupportedParameter),
    ("too-many-values", "_id=" + ",".join(str(i) for i in range(101)), InvalidRequest),
    ("too-many-parameters", "&".join(f"name:contains={i}" for i in range(41)), InvalidRequest),
]


@pytest.mark.parametrize("query, error", [pytest.param(q, e, id=i) for i, q, e in BAD])
def test_bad_inputs_are_400(small_ctx: ServerContext, query: str, error: type[FhirError]) -> None:
    with pytest.raises(error) as info:
        search(small_ctx, query)
    assert info.value.status == 400


def test_total_modes(small_ctx: ServerContext) -> None:
    none = search(small_ctx, "_total=none&_count=4")
    assert "total" not in none and matches(none) == [1, 2, 3, 10]
    assert {l["relation"] for l in none["link"]} == {"self", "first", "next"}
    last_page = search(small_ctx, "_total=none&_count=4&_skip=8")
    assert matches(last_page) == [32] and "next" not in {l["relation"] for l in last_page["link"]}
    exact = search(small_ctx, "_total=none&_count=9")
    assert "next" not in {l["relation"] for l in exact["link"]}
    assert search(small_ctx, "_total=estimate")["total"] == 9
    assert search(small_ctx, "_total=accurate")["total"] == 9
    assert ("_total", "none") in self_query(none)


def test_summary_count(small_ctx: ServerContext) -> None:
    bundle = search(small_ctx, "status=active&_summary=count")
    assert bundle["total"] == 6 and "entry" not in bundle
    assert [link["relation"] for link in bundle["link"]] == ["self"]
    assert_valid(bundle)


def test_summary_true_keeps_the_summary_elements_and_tags(small_ctx: ServerContext) -> None:
    bundle = search(small_ctx, "_id=30&_summary=true")
    assert_valid(bundle)
    resource = bundle["entry"][0]["resource"]
    assert set(resource) == {"resourceType", "id", "meta", "identifier", "status", "name", "mode", "type",
                             "physicalType", "managingOrganization"}
    assert resource["meta"]["tag"] == [SUBSETTED]
    full = search(small_ctx, "_id=30&_summary=false")["entry"][0]["resource"]
    assert "position" in full and "tag" not in full["meta"]
    assert search(small_ctx, "_id=30&_summary=data")["entry"][0]["resource"] == full


@pytest.mark.parametrize("elements, keys", [
    pytest.param("name,status", {"resourceType", "id", "meta", "name", "status"}, id="two"),
    pytest.param("resourceType,name", {"resourceType", "id", "meta", "name"}, id="fhirpy-style"),
    pytest.param("partOf, position", {"resourceType", "id", "meta", "partOf", "position"}, id="spaces"),
    pytest.param("nosuch", {"resourceType", "id", "meta"}, id="unknown-element"),
])
def test_elements(small_ctx: ServerContext, elements: str, keys: set[str]) -> None:
    bundle = search(small_ctx, f"_id=30&_elements={elements}")
    assert_valid(bundle)
    resource = bundle["entry"][0]["resource"]
    assert set(resource) == keys and SUBSETTED in resource["meta"]["tag"]


def test_summary_and_elements_on_read(small_ctx: ServerContext) -> None:
    read = reads.read(small_ctx, TRUSTED, "Location", "30", [("_elements", "name")])
    assert set(read) == {"resourceType", "id", "meta", "name"}
    with pytest.raises(UnsupportedParameter):
        reads.read(small_ctx, TRUSTED, "Location", "30", [("_summary", "count")])


@pytest.mark.parametrize("query, match, include", [
    pytest.param("_id=30&_include=Location:partof", [30], [20], id="include"),
    pytest.param("_id=30&_include=Location:partof:Location", [30], [20], id="include-typed"),
    pytest.param("_id=30&_include:iterate=Location:partof", [30], [20, 10, 2, 1], id="iterate-to-root"),
    pytest.param("_id=30,31&_include=Location:partof", [30, 31], [20], id="included-once"),
    pytest.param("_id=20,30&_include=Location:partof", [20, 30], [10], id="not-when-a-match"),
    pytest.param("_id=1&_include=Location:partof", [1], [], id="root-has-none"),
    pytest.param("_id=20&_revinclude=Location:partof", [20], [30, 31], id="revinclude"),
    pytest.param("_id=10&_revinclude=Location:partof&_include=Location:partof", [10], [20, 32, 2], id="both"),
    pytest.param("_id=30&_include=Location:partof&_summary=count", [], [], id="count-only"),
])
def test_include_and_revinclude(small_ctx: ServerContext, query: str, match: list[int], include: list[int]) -> None:
    bundle = search(small_ctx, query)
    assert_valid(bundle)
    assert matches(bundle) == match and sorted(included(bundle)) == sorted(include)
    assert bundle["total"] == len(match) or "_summary=count" in query
    assert len({e["fullUrl"] for e in bundle.get("entry", [])}) == len(bundle.get("entry", []))


def test_include_is_per_page_and_in_links(small_ctx: ServerContext) -> None:
    page = search(small_ctx, "partof=20&_include=Location:partof&_count=1")
    assert matches(page) == [30] and included(page) == [20] and page["total"] == 2
    nxt = next(l["url"] for l in page["link"] if l["relation"] == "next")
    second = search(small_ctx, urlsplit(nxt).query)
    assert matches(second) == [31] and included(second) == [20]


def test_empty_elements_is_ignored(small_ctx: ServerContext) -> None:
    bundle = search(small_ctx, "_id=30&_elements=")
    assert "position" in bundle["entry"][0]["resource"] and "_elements" not in bundle["link"][0]["url"]


@pytest.mark.parametrize("query, joined", [
    pytest.param("status=active", False, id="own-column"),
    pytest.param("name=ko&identifier=x", False, id="side-tables-in-subqueries"),
    pytest.param("type=CSPS", False, id="type-column-by-its-foreign-key"),
    pytest.param("organization=1", False, id="source-column-by-its-foreign-key"),
    pytest.param("identifier=https://orgunit-fhir.example.org/fhir/sid/x|y", False, id="joins-in-subqueries"),
    pytest.param("_sort=-name", False, id="sort-own-column"),
])
def test_counts_and_body_pages_join_only_the_tables_they_use(small_ctx: ServerContext, query: str,
                                                            joined: bool) -> None:
    """Fewer joins to plan: a count or a page of stored bodies reads the org unit table alone when it can (a
    condition on a table it refers to by a foreign key goes by that key)."""
    provider = small_ctx.registry.get("Location")
    request = parse_search(provider, parse_qsl(query), default_count=20, max_count=100)  # type: ignore[arg-type]
    page = body_page_query(provider, request, {}).get_final_froms()[0].element  # type: ignore[arg-type, attr-defined]
    for statement in (count_query(provider, request, {}), page):  # type: ignore[arg-type]
        tables = {t.name for f in statement.get_final_froms() for t in find_tables(f, include_joins=False,
                                                                                  include_selects=False)}
        assert ("org_unit_type" in tables) == joined and "org_unit" in tables, tables
