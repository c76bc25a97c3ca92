"""The coordinate range check, written once (plugins/orgunits/coordinates.py) and applied by every importer and by
the writer's record check: the same answer whichever format a position comes in."""
from __future__ import annotations

import ast
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from plugins.orgunits.coordinates import Axis, bounds, within
from plugins.orgunits.importers.dhis2 import read_units as read_dhis2
from plugins.orgunits.importers.fhir_bundle import read_locations
from plugins.orgunits.importers.geometry import position
from plugins.orgunits.importers.iaso_csv import read_rows
from plugins.orgunits.importers.mapped import read_units as read_mapped
from plugins.orgunits.importers.mapping import parse_mapping
from plugins.orgunits.validation import check
from plugins.orgunits.records import UnitRecord
from server import LoadError

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


@pytest.mark.parametrize("axis, value, expected", [
    pytest.param("latitude", 90.0, True, id="latitude-north-pole"),
    pytest.param("latitude", -90.0, True, id="latitude-south-pole"),
    pytest.param("latitude", 0.0, True, id="latitude-equator"),
    pytest.param("latitude", 90.000001, False, id="latitude-just-above"),
    pytest.param("latitude", -90.5, False, id="latitude-just-below"),
    pytest.param("latitude", 120.0, False, id="latitude-swapped-with-a-longitude"),
    pytest.param("longitude", 120.0, True, id="longitude-of-the-swap"),
    pytest.param("longitude", 180.0, True, id="longitude-antimeridian-east"),
    pytest.param("longitude", -180.0, True, id="longitude-antimeridian-west"),
    pytest.param("longitude", 180.5, False, id="longitude-above"),
    pytest.param("longitude", -183.0, False, id="longitude-below"),
    pytest.param("latitude", math.nan, False, id="latitude-nan"),
    pytest.param("longitude", math.inf, False, id="longitude-infinite"),
    pytest.param("altitude", 8848.0, True, id="altitude-any-number"),
    pytest.param("altitude", -430.0, True, id="altitude-below-sea-level"),
    pytest.param("altitude", math.inf, False, id="altitude-infinite"),
    pytest.param("altitude", math.nan, False, id="altitude-nan"),
])
def test_within(axis: Axis, value: float, expected: bool) -> None:
    assert within(axis, value) is expected


@pytest.mark.parametrize("axis, expected", [
    pytest.param("latitude", "-90..90", id="latitude"),
    pytest.param("longitude", "-180..180", id="longitude"),
])
def test_bounds(axis: Axis, expected: str) -> None:
    assert bounds(axis) == expected


def _iaso_csv(tmp_path: Path, latitude: str, longitude: str) -> Any:
    path = tmp_path / "units.csv"
    path.write_text(f"ID,Nom,Type,Latitude,Longitude,Validé\n1,One,Pays - COUN,{latitude},{longitude},VALID\n",
                    encoding="utf-8")
    return read_rows(path)


def _mapped(tmp_path: Path, latitude: str, longitude: str) -> Any:
    path = tmp_path / "units.csv"
    path.write_text(f"code,name,lat,lon\nF1,One,{latitude},{longitude}\n", encoding="utf-8")
    spec = parse_mapping({"units": {"id": "code", "name": "name", "type": {"value": "Facility"}, "latitude": "lat",
                                    "longitude": "lon"}}, tmp_path / "units.yaml")
    return read_mapped(spec, path)


def _dhis2(tmp_path: Path, latitude: str, longitude: str) -> Any:
    point = {"type": "Point", "coordinates": [float(longitude), float(latitude)]}
    return read_dhis2({"organisationUnits": [{"id": "a1", "name": "One", "geometry": point}]})


def _fhir(tmp_path: Path, latitude: str, longitude: str) -> Any:
    location = {"resourceType": "Location", "id": "a1", "name": "One",
                "position": {"latitude": float(latitude), "longitude": float(longitude)}}
    return read_locations({"resourceType": "Bundle", "entry": [{"resource": location}]})


def _geojson(tmp_path: Path, latitude: str, longitude: str) -> Any:  # the GeoPackage's and DHIS2 boundaries' check
    return position([float(longitude), float(latitude)])


def _writer(tmp_path: Path, latitude: str, longitude: str) -> Any:
    return check(UnitRecord(1, "One", "t", "VALID", latitude=float(latitude), longitude=float(longitude)))


READERS = [pytest.param(reader, id=name) for name, reader in (
    ("iaso-csv", _iaso_csv), ("mapped", _mapped), ("dhis2", _dhis2), ("fhir-bundle", _fhir),
    ("geojson-and-gpkg", _geojson), ("writer", _writer))]


@pytest.mark.parametrize("read", READERS)
@pytest.mark.parametrize("latitude, longitude, refused", [
    pytest.param("90", "180", None, id="the-corner"),
    pytest.param("-90", "-180", None, id="the-other-corner"),
    pytest.param("120", "45", "latitude", id="swapped"),
    pytest.param("12", "-190", "longitude", id="longitude-out"),
    pytest.param("-90.5", "0", "latitude", id="latitude-out"),
])
def test_every_importer_applies_the_same_check(tmp_path: Path, read: Callable[[Path, str, str], Any], latitude: str,
                                                longitude: str, refused: str | None) -> None:
    if refused is None:
        read(tmp_path, latitude, longitude)
        return
    with pytest.raises((LoadError, ValueError)) as error:
        read(tmp_path, latitude, longitude)
    assert refused.lower() in str(error.value).lower() and bounds(refused) in str(error.value)  # type: ignore[arg-type]


def test_the_range_is_written_in_one_module_only() -> None:
    """No other module of the plugins compares against 90 or 180 or checks finiteness itself."""
    found = []
    for path in sorted(PLUGINS.rglob("*.py")):
        if "migrations" in path.parts or path.name == "coordinates.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and not isinstance(node.value, bool) and node.value in (90, 180):
                found.append(f"{path.name}:{node.lineno} {node.value}")
            if isinstance(node, ast.Attribute) and node.attr == "isfinite":
                found.append(f"{path.name}:{node.lineno} isfinite")
    assert not found
