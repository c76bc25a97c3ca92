"""Everything the server emits passes the independent validators and strict R4 models."""
from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.support.validators import assert_valid

NS = "https://orgunit-fhir.example.org"

RESPONSES = [
    "/fhir/metadata",
    "/fhir/Location/metadata/",
    "/fhir/Location",
    "/fhir/Location?_count=3&_skip=3",
    "/fhir/Location?name=ds&status=active",
    "/fhir/Location?_count=0",
    "/fhir/Location?name=nothing-matches-this",
    "/fhir/Location/20/$children",
    "/fhir/Location/30/children/",
    *[f"/fhir/Location/{i}" for i in (1, 2, 3, 10, 11, 20, 30, 31, 32)],
    "/fhir/Location/404404",
    "/fhir/Location/_history",
    "/fhir/Location/_history?_count=2&_skip=2",
    "/fhir/Location/20/_history",
    "/fhir/Location/20/_history/1",
    "/fhir/Location?_lastUpdated=ge2025-03-04",
    "/fhir/Location?status=open",
    "/fhir/Patient",
]


@pytest.mark.parametrize("path", RESPONSES)
def test_responses_validate(client: TestClient, path: str) -> None:
    assert_valid(client.get(path).json())


def test_errors_validate(client: TestClient) -> None:
    assert_valid(client.post("/fhir/Location").json())
    assert_valid(TestClient(client.app).get("/fhir/Location").json())
    assert_valid(client.get("/fhir/Location", headers={"Accept": "text/turtle"}).json())


def test_capability_statement_parses_with_fhirclient(client: TestClient) -> None:
    from fhirclient.models.capabilitystatement import CapabilityStatement

    body = client.get("/fhir/metadata").json()
    statement = CapabilityStatement(body, strict=True)
    assert statement.fhirVersion == "4.0.1" and statement.kind == "instance"
    assert statement.implementation.url == "http://testserver/fhir"
    location = next(r for r in statement.rest[0].resource if r.type == "Location")
    assert [r.type for r in statement.rest[0].resource] == [
        "CodeSystem", "Location", "OperationDefinition", "Organization", "StructureDefinition"]
    assert {i.code for i in location.interaction} == {"read", "vread", "history-instance", "history-type", "search-type"}
    assert location.versioning == "versioned" and location.readHistory is True
    params = {p.name: p.type for p in location.searchParam}
    assert params == {"_id": "token", "name": "string", "status": "token", "identifier": "token", "type": "token",
                      "partof": "reference", "organization": "reference", "operational-status": "token",
                      "near": "special", "_lastUpdated": "date",
                      "_has": "special", "_count": "number", "_skip": "number"}
    assert location.searchInclude == ["Location:partof", "Location:organization"]
    assert location.searchRevInclude == ["Location:partof"]
    assert location.conditionalRead == "full-support"
    assert statement.instantiates == ["https://profiles.ihe.net/ITI/mCSD/CapabilityStatement/IHE.mCSD.Directory",
                                      "http://hl7.org/fhir/uv/bulkdata/CapabilityStatement/bulk-data"]
    assert set(statement.format) >= {"application/fhir+json", "application/fhir+xml"}
    assert location.operation[0].name == "children"
    assert location.operation[0].definition == f"{NS}/fhir/OperationDefinition/Location-children"
    assert statement.rest[0].security.service[0].coding[0].code == "OAuth"


def test_search_bundle_parses_with_fhirclient(client: TestClient) -> None:
    from fhirclient.models.bundle import Bundle

    bundle = Bundle(client.get("/fhir/Location?_count=100").json(), strict=True)
    assert bundle.total == len(bundle.entry) == 9


EXPECTED_30: dict[str, Any] = {
    "resourceType": "Location",
    "id": "30",
    "meta": {"versionId": "1", "lastUpdated": "2025-03-04T10:20:30Z"},
    "extension": [
        {"url": f"{NS}/fhir/StructureDefinition/org-unit-validation-status", "valueCode": "VALID"},
        {"url": f"{NS}/fhir/StructureDefinition/org-unit-type-depth", "valueInteger": 5},
        {"url": f"{NS}/fhir/StructureDefinition/source-version", "valueInteger": 3},
        {"url": f"{NS}/fhir/StructureDefinition/opening-date", "valueDate": "2001-01-01"},
    ],
    "identifier": [{"use": "official", "system": f"{NS}/fhir/sid/ministere-de-la-sante", "value": "KvNOePwHFyH"}],
    "status": "active",
    "name": "CSPS Ségou",
    "mode": "instance",
    "type": [{"coding": [{"system": f"{NS}/fhir/CodeSystem/org-unit-type", "code": "CSPS",
                          "display": "Centre de santé"}], "text": "Centre de santé"}],
    "physicalType": {"coding": [{"system": "http://terminology.hl7.org/CodeSystem/location-physical-type",
                                 "code": "bu", "display": "Building"}]},
    "position": {"longitude": -3.339844, "latitude": 11.716788, "altitude": 300.0},
    "managingOrganization": {"reference": "Organization/1",
                             "identifier": {"system": f"{NS}/fhir/sid/data-source", "value": "ministere-de-la-sante"},
                             "display": "Ministère de la Santé"},
    "partOf": {"reference": "Location/20", "display": "Aire de Ségou"},
}


def test_full_mapping_of_a_facility(client: TestClient) -> None:
    assert client.get("/fhir/Location/30").json() == EXPECTED_30


@pytest.mark.parametrize("rid, field, expected", [
    pytest.param("1", "identifier", [
        {"use": "official", "system": f"{NS}/fhir/sid/ministere-de-la-sante", "value": "zmSNCYjqQGj"},
        {"use": "secondary", "system": "urn:ietf:rfc:3986", "value": "urn:uuid:0b6f7c1e-4a47-4d7e-9a3e-000000000001"},
    ], id="uuid-identifier"),
    pytest.param("1", "partOf", None, id="root-has-no-partof"),
    pytest.param("1", "physicalType", "jdn", id="country-jurisdiction"),
    pytest.param("2", "physicalType", "jdn", id="region-jurisdiction"),
    pytest.param("10", "physicalType", "jdn", id="district-jurisdiction"),
    pytest.param("20", "physicalType", "si", id="area-site"),
    pytest.param("31", "physicalType", "bu", id="hospital-building"),
    pytest.param("20", "alias", ["Segou Nord", "ASN-20"], id="aliases"),
    pytest.param("3", "identifier", [
        {"use": "official", "system": f"{NS}/fhir/sid/ministere-de-la-sante", "value": "HB0000000003"},
        {"use": "secondary", "system": f"{NS}/fhir/sid/alias", "value": "HBS"},
    ], id="alias-identifier"),
    pytest.param("11", "status", "suspended", id="new-suspended"),
    pytest.param("31", "status", "inactive", id="rejected-inactive"),
    pytest.param("31", "operationalStatus", {"system": "http://terminology.hl7.org/CodeSystem/v2-0116",
                                             "code": "C", "display": "Closed"}, id="closed-in-the-past"),
    pytest.param("32", "operationalStatus", None, id="closing-in-the-future"),
    pytest.param("30", "operationalStatus", None, id="open"),
    pytest.param("31", "position", {"longitude": -3.3, "latitude": 11.7}, id="no-altitude"),
    pytest.param("20", "position", None, id="no-position"),
])
def test_mapping_rows(client: TestClient, rid: str, field: str, expected: Any) -> None:
    resource = client.get(f"/fhir/Location/{rid}").json()
    value = resource.get(field)
    if field == "physicalType":
        value = value["coding"][0]["code"]
    assert value == expected


def test_closing_date_extension(client: TestClient) -> None:
    ext = {e["url"].rsplit("/", 1)[1]: e for e in client.get("/fhir/Location/31").json()["extension"]}
    assert ext["closing-date"]["valueDate"] == "2020-01-01"
    assert ext["org-unit-validation-status"]["valueCode"] == "REJECTED"
