"""What a Location search returns besides its matches (interaction tests, both backends): the order of _sort=name,
near's distance, _total, _summary, _elements, _include and _revinclude. Which units a query matches, and which
queries are refused: test_search.py."""
from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from server.engine import reads
from server.engine.caller import TRUSTED
from server.engine.context import ServerContext
from server.errors import UnsupportedParameter
from tests.support.searching import matches, search, self_query
from tests.support.validators import assert_valid

SUBSETTED = {"system": "http://terminology.hl7.org/CodeSystem/v3-ObservationValue", "code": "SUBSETTED",
             "display": "subsetted"}


def included(bundle: dict[str, Any]) -> list[int]:
    return [int(e["resource"]["id"]) for e in bundle.get("entry", []) if e["search"]["mode"] == "include"]


def test_sort_by_name_is_the_stored_name_order(small_ctx: ServerContext) -> None:
    names = [e["resource"]["name"].lower() for e in search(small_ctx, "Location", "_sort=name&_count=100")["entry"]]
    assert names == sorted(names)


def test_near_carries_the_distance(small_ctx: ServerContext) -> None:
    bundle = search(small_ctx, "Location", "near=11.7|-3.3|10|km")
    assert_valid(bundle)
    ext = [e["search"]["extension"][0] for e in bundle["entry"]]
    assert all(x["url"] == "http://hl7.org/fhir/StructureDefinition/location-distance" for x in ext)
    distances = [x["valueDistance"]["value"] for x in ext]
    assert distances[0] == 0.0 and 4.6 < distances[1] < 4.8 and distances == sorted(distances)
    assert ext[0]["valueDistance"]["code"] == "km"


def test_total_modes(small_ctx: ServerContext) -> None:
    none = search(small_ctx, "Location", "_total=none&_count=4")
    assert "total" not in none and matches(none) == [1, 2, 3, 10]
    assert {l["relation"] for l in none["link"]} == {"self", "first", "next"}
    last_page = search(small_ctx, "Location", "_total=none&_count=4&_skip=8")
    assert matches(last_page) == [32] and "next" not in {l["relation"] for l in last_page["link"]}
    exact = search(small_ctx, "Location", "_total=none&_count=9")
    assert "next" not in {l["relation"] for l in exact["link"]}
    assert search(small_ctx, "Location", "_total=estimate")["total"] == 9
    assert search(small_ctx, "Location", "_total=accurate")["total"] == 9
    assert ("_total", "none") in self_query(none)


def test_summary_count(small_ctx: ServerContext) -> None:
    bundle = search(small_ctx, "Location", "status=active&_summary=count")
    assert bundle["total"] == 6 and "entry" not in bundle
    assert [link["relation"] for link in bundle["link"]] == ["self"]
    assert_valid(bundle)


def test_summary_true_keeps_the_summary_elements_and_tags(small_ctx: ServerContext) -> None:
    bundle = search(small_ctx, "Location", "_id=30&_summary=true")
    assert_valid(bundle)
    resource = bundle["entry"][0]["resource"]
    assert set(resource) == {"resourceType", "id", "meta", "identifier", "status", "name", "mode", "type",
                             "physicalType", "managingOrganization"}
    assert resource["meta"]["tag"] == [SUBSETTED]
    full = search(small_ctx, "Location", "_id=30&_summary=false")["entry"][0]["resource"]
    assert "position" in full and "tag" not in full["meta"]
    assert search(small_ctx, "Location", "_id=30&_summary=data")["entry"][0]["resource"] == full


@pytest.mark.parametrize("elements, keys", [
    pytest.param("name,status", {"resourceType", "id", "meta", "name", "status"}, id="two"),
    pytest.param("resourceType,name", {"resourceType", "id", "meta", "name"}, id="fhirpy-style"),
    pytest.param("partOf, position", {"resourceType", "id", "meta", "partOf", "position"}, id="spaces"),
    pytest.param("nosuch", {"resourceType", "id", "meta"}, id="unknown-element"),
])
def test_elements(small_ctx: ServerContext, elements: str, keys: set[str]) -> None:
    bundle = search(small_ctx, "Location", f"_id=30&_elements={elements}")
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
    bundle = search(small_ctx, "Location", query)
    assert_valid(bundle)
    assert matches(bundle) == match and sorted(included(bundle)) == sorted(include)
    assert bundle["total"] == len(match) or "_summary=count" in query
    assert len({e["fullUrl"] for e in bundle.get("entry", [])}) == len(bundle.get("entry", []))


def test_include_is_per_page_and_in_links(small_ctx: ServerContext) -> None:
    page = search(small_ctx, "Location", "partof=20&_include=Location:partof&_count=1")
    assert matches(page) == [30] and included(page) == [20] and page["total"] == 2
    nxt = next(l["url"] for l in page["link"] if l["relation"] == "next")
    second = search(small_ctx, "Location", urlsplit(nxt).query)
    assert matches(second) == [31] and included(second) == [20]


def test_empty_elements_is_ignored(small_ctx: ServerContext) -> None:
    bundle = search(small_ctx, "Location", "_id=30&_elements=")
    assert "position" in bundle["entry"][0]["resource"] and "_elements" not in bundle["link"][0]["url"]
