"""Canonical resources: every URL the server publishes resolves on the server, and validates."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.access.mint import mint_token
from server.storage.db import create_db_engine
from plugins.orgunits.importers.formats import load_file
from tests.support.contexts import IASO_CSV, REAL_DATA, SECRET, make_settings
from tests.support.validators import assert_valid

NS = "https://orgunit-fhir.example.org"


@pytest.fixture
def real(migrated_url: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = make_settings(migrated_url, tmp_path, auth={"secret": SECRET})
    engine = create_db_engine(settings)
    load_file(engine, "iaso-csv", IASO_CSV)
    load_file(engine, "iaso-gpkg", IASO_CSV.with_suffix(".gpkg"))
    load_file(engine, "fhir-bundle", REAL_DATA / "dhis2_sierra_leone_fhir" / "orgUnits.bundle.json",
              data_source="Sierra Leone")
    with TestClient(create_app(settings, db=engine)) as client:
        client.headers["Authorization"] = f"Bearer {mint_token(settings)}"
        yield client


def walk(value: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from walk(v, k)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item, key)
    else:
        yield key, value


def pages(client: TestClient, url: str) -> Iterator[dict[str, Any]]:
    next_url: str | None = url
    while next_url:
        page = client.get(next_url).json()
        yield page
        next_url = next((l["url"] for l in page["link"] if l["relation"] == "next"), None)


def test_every_reference_and_canonical_resolves(real: TestClient) -> None:
    bodies = [real.get("/fhir/metadata").json()]
    for rtype in ("Location", "Organization", "OperationDefinition", "StructureDefinition", "CodeSystem"):
        bodies += list(pages(real, f"/fhir/{rtype}?_count=100"))
    bodies.append(real.get("/fhir/Location/_history?_count=100").json())
    references, canonicals = set(), set()
    for body in bodies:
        for key, value in walk(body):
            if key == "reference":
                references.add(value)
            elif key in ("url", "definition", "system", "instantiates") and isinstance(value, str) \
                    and value.startswith(f"{NS}/fhir/") and "/sid/" not in value:
                canonicals.add(value)
    assert {r.split("/")[0] for r in references} == {"Location", "Organization"}
    for reference in sorted(references):
        assert real.get(f"/fhir/{reference}").status_code == 200, reference
    assert canonicals >= {f"{NS}/fhir/OperationDefinition/Location-children",
                          f"{NS}/fhir/CodeSystem/org-unit-type",
                          f"{NS}/fhir/StructureDefinition/org-unit-validation-status"}
    for canonical in sorted(canonicals):
        rtype, rid = canonical.removeprefix(f"{NS}/fhir/").split("/")
        found = real.get(f"/fhir/{rtype}?url={quote(canonical, safe='')}").json()
        assert found["total"] == 1, canonical
        assert found["entry"][0]["resource"]["id"] == rid
        resource = real.get(f"/fhir/{rtype}/{rid}").json()
        assert resource["url"] == canonical
        assert_valid(resource)


def test_code_system_lists_the_types_in_the_database(real: TestClient) -> None:
    system = real.get("/fhir/CodeSystem/org-unit-type").json()
    codes = {c["code"] for c in system["concept"]}
    used = {e["resource"]["type"][0]["coding"][0]["code"] for page in pages(real, "/fhir/Location?_count=100")
            for e in page.get("entry", [])}
    assert used <= codes and system["count"] == len(codes)


@pytest.mark.parametrize("path, status", [
    pytest.param("/fhir/StructureDefinition/nope", 404, id="unknown-id"),
    pytest.param("/fhir/StructureDefinition?url=https://example.org/x", 200, id="unknown-url"),
    pytest.param("/fhir/StructureDefinition/source-version/_history", 404, id="no-history"),
    pytest.param("/fhir/OperationDefinition?_count=x", 400, id="bad-count"),
])
def test_canonical_edges(real: TestClient, path: str, status: int) -> None:
    response = real.get(path)
    assert response.status_code == status
    assert_valid(response.json())
