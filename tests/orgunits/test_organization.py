"""The second provider: data sources as Organization, resolvable references, toggled in settings."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.access.mint import mint_token
from server.engine.context import ServerContext
from tests.support.contexts import SECRET, make_settings
from tests.support.validators import assert_valid

NS = "https://orgunit-fhir.example.org"
ORG_TYPE = "http://terminology.hl7.org/CodeSystem/organization-type"
STRICT = {"Prefer": "handling=strict"}


def app_client(small_ctx: ServerContext, tmp_path: Path, organization: bool) -> TestClient:
    settings = make_settings(small_ctx.settings.database_url, tmp_path, auth={"secret": SECRET},
                             plugins={"organization": {"enabled": organization}})
    client = TestClient(create_app(settings, db=small_ctx.db))
    client.headers["Authorization"] = f"Bearer {mint_token(settings)}"
    return client


@pytest.fixture
def on(small_ctx: ServerContext, tmp_path: Path) -> TestClient:
    return app_client(small_ctx, tmp_path, True)


@pytest.fixture
def off(small_ctx: ServerContext, tmp_path: Path) -> TestClient:
    return app_client(small_ctx, tmp_path, False)


def test_organization_read(on: TestClient) -> None:
    org = on.get("/fhir/Organization/1").json()
    assert_valid(org)
    assert org == {
        "resourceType": "Organization", "id": "1", "meta": {"versionId": "1", "lastUpdated": "2025-03-04T10:20:30Z"},
        "extension": [{"url": f"{NS}/fhir/StructureDefinition/source-version", "valueInteger": 3}],
        "identifier": [{"use": "official", "system": f"{NS}/fhir/sid/data-source", "value": "ministere-de-la-sante"}],
        "active": True,
        "type": [{"coding": [{"system": "http://terminology.hl7.org/CodeSystem/organization-type", "code": "govt",
                              "display": "Government"}]}],
        "name": "Ministère de la Santé",
    }
    assert on.get("/fhir/Organization/2").status_code == 404


@pytest.mark.parametrize("query, total", [
    pytest.param("", 1, id="all"), pytest.param("_id=1", 1, id="id"), pytest.param("_id=9", 0, id="unknown-id"),
    pytest.param("name=ministere", 1, id="name-accents"), pytest.param("name=MINISTÈRE DE", 1, id="name-case"),
    pytest.param("name=sante", 0, id="name-not-prefix"), pytest.param("name:contains=santé", 1, id="contains"),
    pytest.param(f"identifier={NS}/fhir/sid/data-source|ministere-de-la-sante", 1, id="identifier"),
    pytest.param("identifier=other", 0, id="identifier-other"), pytest.param("active=true", 1, id="active"),
    pytest.param("active=false", 0, id="inactive"), pytest.param("_lastUpdated=ge2025-03-04", 1, id="last-updated"),
    pytest.param("_lastUpdated=gt2025-03-04", 0, id="last-updated-after"), pytest.param("_sort=-name", 1, id="sort"),
    # mCSD's type: every data source has the configured one (organization-type govt)
    pytest.param("type=govt", 1, id="type"), pytest.param(f"type={ORG_TYPE}|govt", 1, id="type-system-code"),
    pytest.param(f"type={ORG_TYPE}|", 1, id="type-system"), pytest.param("type=prov", 0, id="type-other-code"),
    pytest.param(f"type={NS}/other|govt", 0, id="type-other-system"), pytest.param("type:not=govt", 0, id="type-not"),
    pytest.param("type:text=gov", 1, id="type-text"), pytest.param("type:missing=true", 0, id="type-missing"),
    # mCSD's partof: a data source is part of no other Organization
    pytest.param("partof=1", 0, id="partof-id"), pytest.param("partof=Organization/1", 0, id="partof-reference"),
    pytest.param("partof:missing=true", 1, id="partof-missing"),
    pytest.param("partof:missing=false", 0, id="partof-present"),
    pytest.param("partof.name=minist", 0, id="partof-chained"),
    pytest.param("_id=1&_include=Organization:partof&_revinclude=Organization:partof", 1, id="partof-includes"),
])
def test_organization_search(on: TestClient, query: str, total: int) -> None:
    bundle = on.get(f"/fhir/Organization?{query}", headers=STRICT).json()  # strict: an unknown parameter is a 400
    assert_valid(bundle)
    assert bundle["total"] == total
    assert [e["resource"]["id"] for e in bundle.get("entry", ())] == ["1"] * total  # nothing included


@pytest.mark.parametrize("query", [
    pytest.param("active=maybe", id="active-not-a-code"),
    pytest.param("partof=Location/1", id="partof-another-type"),
    pytest.param("partof:below=1", id="partof-below"),  # a data source has no parent: no hierarchy to walk
    pytest.param("type:above=govt", id="type-modifier"),
])
def test_organization_bad_input(on: TestClient, query: str) -> None:
    assert on.get(f"/fhir/Organization?{query}").status_code == 400


def test_location_references_resolve_when_enabled(on: TestClient) -> None:
    location = on.get("/fhir/Location/30").json()
    assert location["managingOrganization"]["reference"] == "Organization/1"
    assert on.get(f"/fhir/{location['managingOrganization']['reference']}").status_code == 200
    assert on.get("/fhir/Location?organization=1&_count=0").json()["total"] == 9
    assert on.get("/fhir/Location?organization=Organization/1&_id=30").json()["total"] == 1
    assert on.get("/fhir/Location?organization=2").json()["total"] == 0
    bundle = on.get("/fhir/Location?_id=30,31&_include=Location:organization").json()
    assert_valid(bundle)
    included = [e for e in bundle["entry"] if e["search"]["mode"] == "include"]
    assert [e["fullUrl"] for e in included] == ["http://testserver/fhir/Organization/1"]
    assert bundle["total"] == 2
    location_entry = next(r for r in on.get("/fhir/metadata").json()["rest"][0]["resource"] if r["type"] == "Location")
    assert "Location:organization" in location_entry["searchInclude"]


def test_disabled_organization_changes_nothing_else(on: TestClient, off: TestClient) -> None:
    assert off.get("/fhir/Organization/1").json()["issue"][0]["code"] == "not-supported"
    assert off.get("/fhir/Organization").status_code == 404
    types = [r["type"] for r in off.get("/fhir/metadata").json()["rest"][0]["resource"]]
    assert "Organization" not in types
    location = next(r for r in off.get("/fhir/metadata").json()["rest"][0]["resource"] if r["type"] == "Location")
    assert "organization" not in [p["name"] for p in location["searchParam"]]
    assert location["searchInclude"] == ["Location:partof"]
    assert off.get("/fhir/Location?_include=Location:organization").status_code == 400
    assert off.get("/fhir/Location?organization=1", headers={"Prefer": "handling=strict"}).status_code == 400
    with_ref, without = on.get("/fhir/Location?_count=100").json(), off.get("/fhir/Location?_count=100").json()
    for a, b in zip(with_ref["entry"], without["entry"], strict=True):
        assert_valid(b["resource"])
        stripped: dict[str, Any] = dict(a["resource"])
        stripped["managingOrganization"] = {k: v for k, v in a["resource"]["managingOrganization"].items()
                                            if k != "reference"}
        assert stripped == b["resource"]
