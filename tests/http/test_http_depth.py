"""HTTP depth: ETag / Last-Modified / conditional GET, HEAD, XML, and a full hierarchy walk on real data."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.access.mint import mint_token
from server.storage.db import create_db_engine
from plugins.orgunits.importers.formats import load_file
from tests.support.contexts import REAL_DATA, SECRET, make_settings


def test_read_validators_and_304(client: TestClient) -> None:
    first = client.get("/fhir/Location/30")
    assert first.headers["etag"] == 'W/"1"'
    assert first.headers["last-modified"] == "Tue, 04 Mar 2025 10:20:30 GMT"
    for headers in ({"If-None-Match": 'W/"1"'}, {"If-None-Match": '"1"'}, {"If-None-Match": 'W/"9", W/"1"'},
                    {"If-None-Match": "*"}, {"If-Modified-Since": "Tue, 04 Mar 2025 10:20:30 GMT"},
                    {"If-Modified-Since": "Wed, 05 Mar 2025 00:00:00 GMT"}):
        response = client.get("/fhir/Location/30", headers=headers)
        assert response.status_code == 304 and response.content == b"", headers
        assert response.headers["etag"] == 'W/"1"'
    for headers in ({"If-None-Match": 'W/"2"'}, {"If-Modified-Since": "Mon, 03 Mar 2025 10:20:30 GMT"},
                    {"If-Modified-Since": "not a date"},
                    {"If-None-Match": 'W/"2"', "If-Modified-Since": "Wed, 05 Mar 2025 00:00:00 GMT"}):
        assert client.get("/fhir/Location/30", headers=headers).status_code == 200, headers


def test_vread_validators(client: TestClient) -> None:
    response = client.get("/fhir/Location/30/_history/1")
    assert response.headers["etag"] == 'W/"1"' and "last-modified" in response.headers


def test_search_bundle_etag(client: TestClient) -> None:
    first = client.get("/fhir/Location?status=active")
    etag = first.headers["etag"]
    assert etag.startswith('W/"') and "last-modified" not in first.headers
    assert client.get("/fhir/Location?status=active").headers["etag"] == etag
    assert client.get("/fhir/Location?status=active", headers={"If-None-Match": etag}).status_code == 304
    assert client.get("/fhir/Location?status=inactive").headers["etag"] != etag


def test_head(client: TestClient) -> None:
    for path in ("/fhir/Location/30", "/fhir/Location?status=active", "/fhir/metadata", "/fhir/Location/999"):
        head, get = client.head(path), client.get(path)
        assert head.status_code == get.status_code and head.content == b""
        assert head.headers.get("etag") == get.headers.get("etag")


def _xml_round_trip(client: TestClient, path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    from fhir.resources.R4B import get_fhir_model_class

    json_body = client.get(path).json()
    xml = client.get(path, headers={"Accept": "application/fhir+xml"})
    assert xml.headers["content-type"] == "application/fhir+xml;charset=utf-8"
    assert xml.content.startswith(b"<?xml")
    model = get_fhir_model_class(json_body["resourceType"]).model_validate_xml(xml.content)
    return json_body, model.model_dump(mode="json", by_alias=True, exclude_none=True)


@pytest.mark.parametrize("path", [
    "/fhir/Location/30", "/fhir/Location/20", "/fhir/Location?_count=3&_include=Location:partof",
    "/fhir/metadata", "/fhir/Location/30/_history", "/fhir/Location/404404", "/fhir/Location?status=nope",
])
def test_xml_round_trips_to_the_json(client: TestClient, path: str) -> None:
    from fhir.resources.R4B import get_fhir_model_class

    json_body, from_xml = _xml_round_trip(client, path)
    normalized = get_fhir_model_class(json_body["resourceType"]).model_validate(json_body)
    assert from_xml == normalized.model_dump(mode="json", by_alias=True, exclude_none=True)


def test_xml_errors_when_xml_was_asked(client: TestClient) -> None:
    response = client.get("/fhir/Location/999", headers={"Accept": "application/fhir+xml"})
    assert response.status_code == 404 and b"<OperationOutcome" in response.content
    unauthenticated = TestClient(client.app).get("/fhir/Location", params={"_format": "xml"})
    assert unauthenticated.status_code == 401 and b"<OperationOutcome" in unauthenticated.content


def test_partof_below_walks_the_largest_real_sample(migrated_url: str, tmp_path: Path) -> None:
    settings = make_settings(migrated_url, tmp_path, auth={"secret": SECRET})
    engine = create_db_engine(settings)
    load_file(engine, "fhir-bundle", REAL_DATA / "dhis2_sierra_leone_fhir" / "orgUnits.bundle.json",
              data_source="Sierra Leone")
    client = TestClient(create_app(settings, db=engine))
    client.headers["Authorization"] = f"Bearer {mint_token(settings)}"
    root = client.get("/fhir/Location?identifier=ImspTQPwCqd").json()["entry"][0]["resource"]["id"]
    seen: list[str] = []
    url: str | None = f"/fhir/Location?partof:below={root}&_count=100&_total=accurate"  # 1,331: past the threshold
    total = None
    while url:
        page = client.get(url).json()
        total = page["total"] if total is None else total
        assert page["total"] == total
        seen += [e["resource"]["id"] for e in page.get("entry", [])]
        url = next((l["url"] for l in page["link"] if l["relation"] == "next"), None)
    assert total == 1331 and len(seen) == len(set(seen)) == total and root not in seen
    district = client.get(f"/fhir/Location?partof={root}&_count=1").json()["entry"][0]["resource"]["id"]
    below = client.get(f"/fhir/Location?partof:below={district}&_count=0").json()["total"]
    children = client.get(f"/fhir/Location/{district}/$children?_count=100").json()
    grandchildren = sum(client.get(f"/fhir/Location/{e['resource']['id']}/$children?_count=0").json()["total"]
                        for e in children.get("entry", []))
    assert below == children["total"] + grandchildren
    facility = client.get(f"/fhir/Location?partof:below={district}&type:text=level 4&_count=1").json()
    leaf = facility["entry"][0]["resource"]["id"]
    above = client.get(f"/fhir/Location?partof:above={leaf}").json()
    assert {e["resource"]["id"] for e in above["entry"]} >= {root, district} and above["total"] == 3
    engine.dispose()
