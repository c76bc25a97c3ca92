"""What the explorer asks the server for at national scale (issue 40), on the small pyramid and each backend:
`$counts` (exact counts by type, by parent, below each unit), `$geojson` and `$csv` (a subtree or a search,
streamed, in path order), `operational-status` (closed units), `_sort=name` folding accents; every answer scoped by
the caller (a district token, query-scoped tokens, a full token), every error an OperationOutcome.

The small pyramid: Burkina Faso 1 > regions 2, 3 > districts 10 (DS Boromo), 11 (DS Dédougou, suspended) > area 20
> facilities 30 (CSPS Ségou, a point), 31 (closed in 2020, inactive, a point), 32 (Dispensaire Kéré under 10,
closing in 2999: open)."""
from __future__ import annotations

import csv
import io
import json
from typing import Any

from types import SimpleNamespace

import pytest
from starlette.testclient import TestClient

from plugins.orgunits.exports import POSITION, chosen, csv_lines, properties
from server import normalize
from server.engine.context import ServerContext
from tests.support.contexts import bearer
from tests.support.validators import assert_valid

FULL: dict[str, Any] = {}
DISTRICT = {"org_unit_roots": ["Location/10"]}
BELOW_2 = {"scope": "system/Location.rs?partof:below=Location/2"}
CSPS = {"scope": "system/Location.rs?type=CSPS&status=active"}


def _get(client: TestClient, ctx: ServerContext, url: str, claims: dict[str, Any], **headers: str) -> Any:
    return client.get(url, headers={**bearer(ctx.settings, **claims), **headers})


def _counts(answer: Any) -> dict[str, Any]:
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert_valid(body)
    found: dict[str, Any] = {"group": []}
    for p in body["parameter"]:
        if p["name"] == "group":
            found["group"].append({part["name"]: next(v for k, v in part.items() if k.startswith("value"))
                                    for part in p["part"]})
        else:
            found[p["name"]] = p["valueInteger"]
    return found


def _by_type(found: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    return {g["type"]["code"]: (g["count"], g["closed"], g["active"], g["suspended"], g["inactive"])
            for g in found["group"]}


@pytest.mark.parametrize(("claims", "query", "total", "types"), [
    pytest.param(FULL, "", 9, {"COUNTRY": (1, 0, 1, 0, 0), "REGION": (2, 0, 2, 0, 0), "DISTRICT": (2, 0, 1, 1, 0),
                               "AREA": (1, 0, 1, 0, 0), "CSPS": (2, 0, 1, 1, 0), "CHR": (1, 1, 0, 0, 1)}, id="full"),
    pytest.param(FULL, "&partof:below=10", 4, {"AREA": (1, 0, 1, 0, 0), "CSPS": (2, 0, 1, 1, 0),
                                               "CHR": (1, 1, 0, 0, 1)}, id="below-a-district"),
    pytest.param(FULL, "&partof=20", 2, {"CSPS": (1, 0, 1, 0, 0), "CHR": (1, 1, 0, 0, 1)}, id="children"),
    pytest.param(FULL, "&operational-status=C", 1, {"CHR": (1, 1, 0, 0, 1)}, id="closed"),
    pytest.param(DISTRICT, "", 5, {"DISTRICT": (1, 0, 1, 0, 0), "AREA": (1, 0, 1, 0, 0), "CSPS": (2, 0, 1, 1, 0),
                                   "CHR": (1, 1, 0, 0, 1)}, id="district-token"),
    pytest.param(DISTRICT, "&partof:below=2", 0, {}, id="district-token-below-a-region-it-cannot-see"),
    pytest.param(BELOW_2, "", 6, {"DISTRICT": (2, 0, 1, 1, 0), "AREA": (1, 0, 1, 0, 0), "CSPS": (2, 0, 1, 1, 0),
                                  "CHR": (1, 1, 0, 0, 1)}, id="scope-below-2"),
    pytest.param(CSPS, "", 1, {"CSPS": (1, 0, 1, 0, 0)}, id="scope-csps-active"),
])
def test_counts_by_type_are_exact_and_scoped(client: TestClient, small_ctx: ServerContext, claims: dict[str, Any],
                                             query: str, total: int, types: dict[str, tuple[int, ...]]) -> None:
    found = _counts(_get(client, small_ctx, f"/fhir/Location/$counts?by=type{query}", claims))
    assert found["total"] == total
    assert _by_type(found) == types
    levels = {g["type"]["code"]: g.get("level") for g in found["group"]}
    assert all(levels[code] == {"COUNTRY": 1, "REGION": 2, "DISTRICT": 3, "AREA": 4}.get(code, 5) for code in levels)


@pytest.mark.parametrize(("claims", "query", "groups", "total", "count"), [
    pytest.param(FULL, "partof:missing=true", [(None, None, 1)], 1, 1, id="full-one-root"),
    pytest.param(DISTRICT, "partof:missing=true", [("Location/2", "Boucle du Mouhoun", 1)], 1, 1, id="district-root"),
    pytest.param(BELOW_2, "partof:missing=true", [("Location/2", "Boucle du Mouhoun", 2)], 2, 1, id="below-2-roots"),
    pytest.param(FULL, "type=CSPS,CHR", [("Location/20", "Aire de Ségou", 2), ("Location/10", "DS Boromo", 1)], 3, 2,
                 id="grouped-in-name-order"),
    pytest.param(FULL, "type=CSPS,CHR&_count=1&_skip=1", [("Location/10", "DS Boromo", 1)], 3, 2, id="paged"),
])
def test_counts_by_parent_group_what_the_token_sees(client: TestClient, small_ctx: ServerContext,
                                                    claims: dict[str, Any], query: str,
                                                    groups: list[tuple[Any, ...]], total: int, count: int) -> None:
    found = _counts(_get(client, small_ctx, f"/fhir/Location/$counts?by=parent&{query}", claims))
    shown = [((g.get("parent") or {}).get("reference"), (g.get("parent") or {}).get("display"), g["count"])
             for g in found["group"]]
    assert shown == groups
    assert (found["total"], found["groups"]) == (total, count)  # every match, every group (all pages)


@pytest.mark.parametrize(("claims", "query", "below"), [
    pytest.param(FULL, "partof=1", {"Location/2": 6, "Location/3": 0}, id="regions"),
    pytest.param(FULL, "_id=10,20,30", {"Location/10": 4, "Location/20": 2, "Location/30": 0}, id="named"),
    pytest.param(CSPS, "_id=30", {"Location/30": 0}, id="csps-scope"),
    pytest.param(BELOW_2, "partof=2", {"Location/10": 4, "Location/11": 0}, id="below-2-scope"),
    pytest.param(DISTRICT, "_id=2,10", {"Location/10": 4}, id="district-token-sees-not-its-region"),
])
def test_counts_below_each_unit(client: TestClient, small_ctx: ServerContext, claims: dict[str, Any], query: str,
                                below: dict[str, int]) -> None:
    found = _counts(_get(client, small_ctx, f"/fhir/Location/$counts?by=below&{query}", claims))
    assert {g["unit"]["reference"]: g["below"] for g in found["group"]} == below


@pytest.mark.parametrize(("url", "status", "says"), [
    pytest.param("/fhir/Location/$counts?by=level", 400, "by: type, parent, below", id="unknown-grouping"),
    pytest.param("/fhir/Location/$counts?by=type&_count=5", 400, "by=parent only", id="count-without-parent"),
    pytest.param("/fhir/Location/$counts?by=parent&_count=0", 400, "_count: a whole number from 1", id="zero-groups"),
    pytest.param("/fhir/Location/$counts?nme=x", 400, "nme", id="unknown-parameter-never-ignored"),
    pytest.param("/fhir/Location/$counts?_sort=name", 400, "_sort", id="result-parameter"),
    pytest.param("/fhir/Location/1/$counts", 404, "$counts is answered at", id="no-instance-level"),
    pytest.param("/fhir/Location/$csv?properties=name,colour", 400, "colour", id="unknown-property"),
    pytest.param("/fhir/Location/$geojson?positioned=yes", 400, "positioned: true or false", id="bad-flag"),
    pytest.param("/fhir/Location/999/$csv", 404, "", id="unknown-unit"),
    pytest.param("/fhir/Location/$csv?status=open", 400, "status", id="bad-search-value"),
])
def test_bad_requests_are_operation_outcomes(client: TestClient, small_ctx: ServerContext, url: str, status: int,
                                             says: str) -> None:
    answer = _get(client, small_ctx, url, FULL)
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["resourceType"] == "OperationOutcome" and says in body["issue"][0]["diagnostics"], body


def _csv(answer: Any) -> list[dict[str, str]]:
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/csv; charset=utf-8")
    assert answer.headers["cache-control"] == "private, no-store"
    text = answer.content.decode("utf-8")
    assert text.startswith("\ufeff") and "\r\n" in text
    return list(csv.DictReader(io.StringIO(text.lstrip("\ufeff"))))


@pytest.mark.parametrize(("claims", "url", "ids"), [
    pytest.param(FULL, "/fhir/Location/10/$csv", ["10", "20", "30", "31", "32"], id="a-subtree-parents-first"),
    pytest.param(FULL, "/fhir/Location/10/$csv?operational-status:missing=true", ["10", "20", "30", "32"],
                 id="a-subtree-open-units"),
    pytest.param(FULL, "/fhir/Location/$csv?type=CSPS", ["30", "32"], id="a-search"),
    pytest.param(DISTRICT, "/fhir/Location/$csv", ["10", "20", "30", "31", "32"], id="district-token-everything"),
    pytest.param(DISTRICT, "/fhir/Location/$csv?partof:below=1", [], id="district-token-below-what-it-cannot-see"),
    pytest.param(BELOW_2, "/fhir/Location/$csv?partof=10", ["20", "32"], id="scope-below-2"),
    pytest.param(CSPS, "/fhir/Location/$csv", ["30"], id="scope-csps-active"),
])
def test_csv_exports_what_the_token_sees(client: TestClient, small_ctx: ServerContext, claims: dict[str, Any],
                                         url: str, ids: list[str]) -> None:
    assert [row["id"] for row in _csv(_get(client, small_ctx, url, claims))] == ids


def test_csv_lines_hold_the_published_values(client: TestClient, small_ctx: ServerContext) -> None:
    rows = {row["id"]: row for row in _csv(_get(client, small_ctx, "/fhir/Location/20/$csv", FULL))}
    assert rows["31"] == {"id": "31", "name": "CMA Boromo 50%_x", "type": "CHR", "type_name": "Hôpital", "level": "5",
                          "status": "inactive", "closed": "true", "opening_date": "", "closing_date": "2020-01-01",
                          "code": "CM0000000031", "uuid": "", "parent": "Location/20", "parent_name": "Aire de Ségou",
                          "last_updated": "2025-03-04T10:20:30Z", "version": "1", "latitude": "11.7",
                          "longitude": "-3.3", "altitude": ""}
    assert rows["30"]["altitude"] == "300.0" and rows["30"]["opening_date"] == "2001-01-01"


@pytest.mark.parametrize(("claims", "url", "features"), [
    pytest.param(FULL, "/fhir/Location/2/$geojson?positioned=true&properties=name,closed",
                 {"30": ({"name": "CSPS Ségou", "closed": False}, [-3.339844, 11.716788, 300.0]),
                  "31": ({"name": "CMA Boromo 50%_x", "closed": True}, [-3.3, 11.7])}, id="points-of-a-region"),
    pytest.param(FULL, "/fhir/Location/$geojson?_id=32&properties=name,parent", {
        "32": ({"name": "Dispensaire Kéré", "parent": "Location/10"}, None)}, id="no-position-no-geometry"),
    pytest.param(CSPS, "/fhir/Location/$geojson?positioned=true&properties=status",
                 {"30": ({"status": "active"}, [-3.339844, 11.716788, 300.0])}, id="scope-csps-active"),
    pytest.param(DISTRICT, "/fhir/Location/$geojson?near=11.7|-3.3|50&properties=type",
                 {"30": ({"type": "CSPS"}, [-3.339844, 11.716788, 300.0]), "31": ({"type": "CHR"}, [-3.3, 11.7])},
                 id="district-token-near"),
])
def test_geojson_streams_a_feature_collection(client: TestClient, small_ctx: ServerContext, claims: dict[str, Any],
                                              url: str, features: dict[str, Any]) -> None:
    answer = _get(client, small_ctx, url, claims, Accept="application/geo+json")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/geo+json"
    body = json.loads(answer.content)
    assert body["type"] == "FeatureCollection"
    got = {f["id"]: (f["properties"], f["geometry"] and f["geometry"]["coordinates"]) for f in body["features"]}
    assert got == features
    assert all(f["type"] == "Feature" and (f["geometry"] is None or f["geometry"]["type"] == "Point")
               for f in body["features"])


@pytest.mark.parametrize(("claims", "url", "status"), [
    pytest.param(DISTRICT, "/fhir/Location/2/$csv", 404, id="district-token-outside-its-subtree"),
    pytest.param(CSPS, "/fhir/Location/10/$geojson", 404, id="csps-scope-a-district"),
    pytest.param({"scope": "system/Location.r"}, "/fhir/Location/$csv", 403, id="read-only-scope"),
    pytest.param({"scope": "system/Organization.rs"}, "/fhir/Location/$counts", 403, id="another-type"),
])
def test_exports_and_counts_are_refused_outside_the_scope(client: TestClient, small_ctx: ServerContext,
                                                          claims: dict[str, Any], url: str, status: int) -> None:
    answer = _get(client, small_ctx, url, claims)
    assert answer.status_code == status and answer.json()["resourceType"] == "OperationOutcome", answer.text


@pytest.mark.parametrize(("accept", "status"), [
    pytest.param("application/geo+json", 200, id="geojson"),
    pytest.param("*/*", 200, id="anything"),
    pytest.param("application/fhir+json", 200, id="fhir-json-errors-in-json"),
    pytest.param("image/png", 406, id="not-served"),
])
def test_the_accept_header_is_negotiated(client: TestClient, small_ctx: ServerContext, accept: str,
                                         status: int) -> None:
    assert _get(client, small_ctx, "/fhir/Location/$geojson", FULL, Accept=accept).status_code == status


def test_head_reads_nothing(client: TestClient, small_ctx: ServerContext) -> None:
    answer = client.head("/fhir/Location/1/$csv", headers=bearer(small_ctx.settings))
    assert answer.status_code == 200 and answer.content == b""
    assert answer.headers["content-disposition"] == 'attachment; filename="locations-1.csv"'


@pytest.mark.parametrize(("query", "ids"), [
    pytest.param("operational-status=C", ["31"], id="closed"),
    pytest.param("operational-status=http://terminology.hl7.org/CodeSystem/v2-0116|C", ["31"], id="system-code"),
    pytest.param("operational-status:missing=true&type=CSPS,CHR", ["30", "32"], id="open"),
    pytest.param("operational-status:not=C&partof=20", ["30"], id="not-closed"),
])
def test_closed_units_are_found_by_operational_status(client: TestClient, small_ctx: ServerContext, query: str,
                                                      ids: list[str]) -> None:
    bundle = _get(client, small_ctx, f"/fhir/Location?{query}&_elements=id", FULL).json()
    assert sorted(e["resource"]["id"] for e in bundle.get("entry", [])) == ids, bundle


def test_an_unknown_operational_status_is_refused(client: TestClient, small_ctx: ServerContext) -> None:
    answer = _get(client, small_ctx, "/fhir/Location?operational-status=O", FULL)
    assert answer.status_code == 400 and "C" in answer.json()["issue"][0]["diagnostics"]


@pytest.mark.parametrize("path", [
    pytest.param("/fhir/Location?_sort=name&_count=20&_elements=name", id="search"),
    pytest.param("/fhir/Location/2/$children?_sort=name&_elements=name", id="children"),
])
def test_sort_by_name_folds_accents_and_case(client: TestClient, small_ctx: ServerContext, path: str) -> None:
    names = [e["resource"]["name"] for e in _get(client, small_ctx, path, FULL).json()["entry"]]
    assert names == sorted(names, key=normalize)
    if "children" in path:
        assert names == ["DS Boromo", "DS Dédougou"]  # é as e, not after z


@pytest.mark.parametrize("definition", ["Location-counts", "Location-geojson", "Location-csv"])
def test_the_operations_are_defined(client: TestClient, small_ctx: ServerContext, definition: str) -> None:
    found = _get(client, small_ctx, f"/fhir/OperationDefinition/{definition}", FULL)
    assert found.status_code == 200
    assert_valid(found.json())
    statement = client.get("/fhir/metadata").json()
    location = next(r for r in statement["rest"][0]["resource"] if r["type"] == "Location")
    assert found.json()["url"] in {o["definition"] for o in location["operation"]}


@pytest.mark.parametrize(("name", "cell"), [
    pytest.param("=HYPERLINK(\"http://x\")", "'=HYPERLINK(\"http://x\")", id="formula"),
    pytest.param("+33 CSPS", "'+33 CSPS", id="plus"),
    pytest.param("-Sud", "'-Sud", id="minus"),
    pytest.param("@SUM(A1)", "'@SUM(A1)", id="at"),
    pytest.param("CSPS Ségou", "CSPS Ségou", id="a-name"),
])
def test_a_csv_cell_a_spreadsheet_would_run_is_escaped(name: str, cell: str) -> None:
    """Names come from the data: a cell starting =, +, -, @ is no formula when the CSV is opened; numbers (a
    negative longitude) stay numbers."""
    shown = chosen(properties({"VALID": "active"}), "name,code")
    export = SimpleNamespace(shown=shown, plan=[(p.name, len(POSITION) + i, p.value) for i, p in enumerate(shown)],
                             each=lambda: iter([[(7, "/7/", 11.5, -3.25, None, name, "-C1")]]))
    lines = b"".join(csv_lines(export)).decode("utf-8").lstrip("\ufeff").splitlines()  # type: ignore[arg-type]
    row = next(csv.reader(io.StringIO(lines[1])))
    assert lines[0] == "id,name,code,latitude,longitude,altitude"
    assert row == ["7", cell, "'-C1", "11.5", "-3.25", ""]
