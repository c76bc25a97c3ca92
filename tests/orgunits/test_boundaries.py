"""GeoJSON boundaries: on read (and vread/_history) always, in search results only when configured."""
from __future__ import annotations

import base64
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.access.mint import mint_token
from server.storage.db import create_db_engine
from plugins.orgunits.writer import ensure_data_source, ensure_source_version, ensure_types, write_units
from tests.support.contexts import SECRET, make_settings
from tests.support.data import NOW, TYPES, UNITS
from tests.support.validators import assert_valid

BOUNDARY = "http://hl7.org/fhir/StructureDefinition/location-boundary-geojson"
SQUARE = {"type": "MultiPolygon", "coordinates": [[[[-5.5, 11.0], [-2.0, 11.0], [-2.0, 14.0], [-5.5, 11.0]]]]}


def boundary(resource: dict[str, Any]) -> dict[str, Any] | None:
    ext = next((e for e in resource.get("extension", []) if e["url"] == BOUNDARY), None)
    if ext is None:
        return None
    assert ext["valueAttachment"]["contentType"] == "application/geo+json"
    return json.loads(base64.b64decode(ext["valueAttachment"]["data"]))


@pytest.mark.parametrize("in_search", [False, True])
def test_boundaries(migrated_url: str, tmp_path: Path, in_search: bool) -> None:
    settings = make_settings(migrated_url, tmp_path, auth={"secret": SECRET},
                             plugins={"location": {"config": {"boundaries_in_search": in_search}}})
    engine = create_db_engine(settings)
    with engine.begin() as conn:
        version = ensure_source_version(conn, ensure_data_source(conn, "Ministère de la Santé"), 1)
        ensure_types(conn, TYPES)
        write_units(conn, [replace(u, geometry=SQUARE) if u.id == 2 else u for u in UNITS], version, NOW)
    client = TestClient(create_app(settings, db=engine))
    client.headers["Authorization"] = f"Bearer {mint_token(settings)}"
    read = client.get("/fhir/Location/2").json()
    assert_valid(read)
    assert boundary(read) == SQUARE
    assert boundary(client.get("/fhir/Location/2/_history/1").json()) == SQUARE
    assert boundary(client.get("/fhir/Location/3").json()) is None
    found = client.get("/fhir/Location?name=boucle").json()["entry"][0]["resource"]
    assert (boundary(found) == SQUARE) is in_search
    engine.dispose()
