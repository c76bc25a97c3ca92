"""The importers of plugins/orgunits/importers: Iaso GeoPackage, DHIS2 JSON, FHIR Bundle, and what they share."""
from __future__ import annotations

import base64
import copy
import json
import shutil
import sqlite3
import struct
from collections import Counter
from collections.abc import Callable
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from server.errors import LoadError
from plugins.orgunits.changes import Allowed
from plugins.orgunits.importers import formats
from plugins.orgunits.importers.common import allocate_ids
from plugins.orgunits.importers.transaction import import_units
from plugins.orgunits.importers.formats import FORMATS, load_file
from plugins.orgunits.importers.dhis2 import import_dhis2, load_dhis2
from plugins.orgunits.importers.fhir_bundle import import_fhir_bundle, load_fhir_bundle
from plugins.orgunits.importers.geometry import decode_gpkg
from plugins.orgunits.importers.iaso_csv import load_iaso_csv
from plugins.orgunits.importers.iaso_gpkg import load_iaso_gpkg
from plugins.orgunits.tables import data_source, org_unit, org_unit_type, source_version
from plugins.orgunits.writer import as_utc, ensure_data_source
from plugins.orgunits.records import TypeRecord, UnitRecord, WriteReport
from tests.support.contexts import IASO_CSV, REAL_DATA
from tests.support.data import counts, first_load
from tests.support.store_snapshot import TABLES, count, snapshot, units

IASO_GPKG = REAL_DATA / "iaso_burkina_faso" / "org_units.gpkg"
SL_BUNDLE = REAL_DATA / "dhis2_sierra_leone_fhir" / "orgUnits.bundle.json"
DHIS2_SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "dhis2_sierra_leone_sample.json"
DHIS2_SYSTEM = "https://play.dhis2.org/dev/api/organisationUnits"
HF_LAYER = "level-5-Health facility/Formation sanitaire - HF"
AREA_LAYER = "level-4-Health area/Aire de santé - AREA"
REGION_LAYER = "level-2-Region/Région - REG"


# --- helpers ----------------------------------------------------------------------------------------------------

def categories(engine: Engine) -> Counter[str]:
    with engine.connect() as conn:
        query = select(org_unit_type.c.category).join(org_unit, org_unit.c.org_unit_type_id == org_unit_type.c.id)
        return Counter(conn.execute(query).scalars())


def types(engine: Engine) -> dict[str, tuple[str, str, int | None]]:
    with engine.connect() as conn:
        return {row.short_name: (row.name, row.category, row.depth) for row in conn.execute(select(org_unit_type))}


def by_ref(engine: Engine) -> dict[str, Any]:
    return {row.source_ref: row for row in units(engine).values()}


def depths(engine: Engine) -> dict[int, int]:
    stored = units(engine)
    found: dict[int, int] = {}

    def depth(unit_id: int) -> int:
        if unit_id not in found:
            parent = stored[unit_id].parent_id
            found[unit_id] = 1 if parent is None else depth(parent) + 1
        return found[unit_id]

    for unit_id in stored:
        depth(unit_id)
    return found


def nothing_written(engine: Engine) -> bool:
    return all(count(engine, table) == 0 for table in TABLES)


def positions(geometry: dict[str, Any]) -> list[list[float]]:
    polygons = geometry["coordinates"] if geometry["type"] == "MultiPolygon" else [geometry["coordinates"]]
    return [point for polygon in polygons for ring in polygon for point in ring]


def check_error(engine: Engine, load: Callable[[], object], *fragments: str) -> None:
    before = snapshot(engine)
    with pytest.raises(LoadError) as error:
        load()
    for fragment in fragments:
        assert fragment in str(error.value)
    assert snapshot(engine) == before


# --- Iaso GeoPackage --------------------------------------------------------------------------------------------

def test_gpkg_sample_loads(engine: Engine) -> None:
    assert load_iaso_gpkg(engine, IASO_GPKG) == WriteReport(inserted=136, notes=first_load("Iaso"))
    assert categories(engine) == {"COUNTRY": 1, "REGION": 1, "DISTRICT": 6, "AREA": 45, "HF": 83}
    assert types(engine) == {
        "COUN": ("Country/Pays", "COUNTRY", 1),
        "REG": ("Region/Région", "REGION", 2),
        "DIST": ("District/Zone de santé", "DISTRICT", 3),
        "AREA": ("Health area/Aire de santé", "AREA", 4),
        "HF": ("Health facility/Formation sanitaire", "HF", 5),
    }
    stored = units(engine)
    assert all(row.validation_status == "VALID" and row.uuid is None and row.altitude is None
               for row in stored.values())
    points = [row for row in stored.values() if row.latitude is not None]
    polygons = [row for row in stored.values() if row.geometry is not None]
    assert len(points) == 83 and all(row.longitude is not None and row.geometry is None for row in points)
    assert len(polygons) == 53 and all(row.latitude is None and row.longitude is None for row in polygons)
    assert {row.geometry["type"] for row in polygons} == {"MultiPolygon"}
    for row in polygons:
        for longitude, latitude in positions(row.geometry):
            assert -6 < longitude < 3 and 9 < latitude < 16, row.name
    assert [row.id for row in stored.values() if row.parent_id is None] == [2048976]
    facility = stored[2049032]
    assert (facility.name, facility.source_ref, facility.parent_id) == ("CMA Boromo 1", "KvNOePwHFyH", 2048986)
    assert facility.latitude == pytest.approx(11.716788) and facility.longitude == pytest.approx(-3.339844)


def test_gpkg_matches_csv_and_adds_no_duplicates(engine: Engine) -> None:
    """The CSV and the GeoPackage of one export describe the same units: loaded one after the other into the
    same data source, the GeoPackage only adds the boundaries."""
    load_iaso_csv(engine, IASO_CSV)
    csv_units = units(engine)
    csv_types = types(engine)
    report = load_iaso_gpkg(engine, IASO_GPKG)
    assert report.inserted == 0 and report.total == 136
    gpkg_units = units(engine)
    assert count(engine, org_unit) == 136 and count(engine, data_source) == 1 and types(engine) == csv_types
    assert set(gpkg_units) == set(csv_units)
    for unit_id, row in gpkg_units.items():
        before = csv_units[unit_id]
        assert (row.name, row.parent_id, row.source_ref) == (before.name, before.parent_id, before.source_ref)
        if before.latitude is None:
            assert row.latitude is None and row.geometry["type"] == "MultiPolygon"
        else:
            assert abs(row.latitude - before.latitude) < 1e-6 and abs(row.longitude - before.longitude) < 1e-6
    assert sum(row.latitude is not None for row in gpkg_units.values()) == 83


def test_gpkg_reimport_changes_nothing(engine: Engine) -> None:
    load_iaso_gpkg(engine, IASO_GPKG)
    before = snapshot(engine)
    assert load_iaso_gpkg(engine, IASO_GPKG) == WriteReport(unchanged=136)
    assert snapshot(engine) == before


def gpkg_copy(tmp_path: Path, *statements: str | tuple[str, tuple[Any, ...]]) -> Path:
    """A writable copy of the sample with `statements` run on it (the R-tree triggers, which need SpatiaLite
    functions, are dropped first)."""
    path = tmp_path / "edited.gpkg"
    shutil.copyfile(IASO_GPKG, path)
    path.chmod(0o644)
    db = sqlite3.connect(path)
    try:
        triggers = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' "
                                                     "AND name LIKE 'rtree_%'")]
        for name in triggers:
            db.execute(f'DROP TRIGGER "{name}"')
        for statement in statements:
            sql, params = statement if isinstance(statement, tuple) else (statement, ())
            db.execute(sql, params)
        db.commit()
    finally:
        db.close()
    return path


def gp_point(x: float, y: float, *, srs: int = 4326) -> bytes:
    return b"GP\x00\x01" + struct.pack("<i", srs) + struct.pack("<BIdd", 1, 1, x, y)


def _set(layer: str, fid: int, column: str, value: Any) -> tuple[str, tuple[Any, ...]]:
    return f'UPDATE "{layer}" SET "{column}" = ? WHERE fid = ?', (value, fid)


def _truncated_polygon(tmp_path: Path) -> Path:
    blob = sqlite3.connect(IASO_GPKG).execute(f'SELECT geom FROM "{AREA_LAYER}" WHERE fid = 1').fetchone()[0]
    return gpkg_copy(tmp_path, _set(AREA_LAYER, 1, "geom", blob[:-20]))


def _unclosed_polygon(tmp_path: Path) -> Path:
    ring = [(-4.0, 12.0), (-3.9, 12.0), (-3.9, 12.1), (-4.0, 12.1)]
    wkb = struct.pack("<BII", 1, 3, 1) + struct.pack("<I", len(ring)) + b"".join(struct.pack("<dd", *p) for p in ring)
    return gpkg_copy(tmp_path, _set(AREA_LAYER, 1, "geom", b"GP\x00\x01" + struct.pack("<i", 4326) + wkb))


def _line(tmp_path: Path) -> Path:
    wkb = struct.pack("<BII", 1, 2, 2) + struct.pack("<dddd", -3.3, 11.7, -3.2, 11.8)
    return gpkg_copy(tmp_path, _set(HF_LAYER, 1, "geom", b"GP\x00\x01" + struct.pack("<i", 4326) + wkb))


def _other_srs(tmp_path: Path) -> Path:
    return gpkg_copy(tmp_path,
                     "INSERT INTO gpkg_spatial_ref_sys (srs_name, srs_id, organization, organization_coordsys_id, "
                     "definition) VALUES ('WGS 84 / Pseudo-Mercator', 3857, 'EPSG', 3857, 'undefined')",
                     ("UPDATE gpkg_geometry_columns SET srs_id = 3857 WHERE table_name = ?", (HF_LAYER,)))


def _foreign_layer(tmp_path: Path) -> Path:
    return gpkg_copy(tmp_path, "CREATE TABLE roads (fid INTEGER PRIMARY KEY, geom BLOB)",
                     "INSERT INTO gpkg_contents (table_name, data_type, identifier, srs_id) "
                     "VALUES ('roads', 'features', 'roads', 4326)")


def _cycle(tmp_path: Path) -> Path:
    return gpkg_copy(tmp_path, _set(REGION_LAYER, 1, "parent_ref", "CTtB0TPRvWc"),
                     _set(REGION_LAYER, 1, "parent", "DS Boromo (District/Zone de santé - DIST)"))


def _not_sqlite(tmp_path: Path) -> Path:
    path = tmp_path / "org_units.gpkg"
    path.write_text("ID,Nom\n1,Burkina Faso\n")
    return path


BAD_GPKG = [
    pytest.param(lambda p: gpkg_copy(p, _set(HF_LAYER, 1, "geom", b"XX" + b"\x00" * 30)),
                 [f"layer '{HF_LAYER}' fid 1 (id 2049032, 'CMA Boromo 1'): malformed geometry",
                  "does not start with the GeoPackage 'GP' header"], id="bad-magic"),
    pytest.param(_truncated_polygon, [f"layer '{AREA_LAYER}' fid 1 (id 2049004, 'Balave'): malformed geometry",
                                      "truncated"], id="truncated-polygon"),
    pytest.param(_unclosed_polygon, [f"layer '{AREA_LAYER}' fid 1", "polygon ring is not closed"], id="unclosed-ring"),
    pytest.param(lambda p: gpkg_copy(p, _set(HF_LAYER, 1, "geom", gp_point(-3.3, 95.0))),
                 [f"layer '{HF_LAYER}' fid 1", "latitude 95.0 is outside -90..90"], id="latitude"),
    pytest.param(lambda p: gpkg_copy(p, _set(HF_LAYER, 1, "geom", gp_point(-3.3, 11.7, srs=3857))),
                 [f"layer '{HF_LAYER}' fid 1", "srs 3857"], id="point-srs"),
    pytest.param(_line, [f"layer '{HF_LAYER}' fid 1", "LineString is not supported"], id="linestring"),
    pytest.param(_other_srs, [f"layer '{HF_LAYER}'", "only EPSG:4326"], id="layer-srs"),
    pytest.param(lambda p: gpkg_copy(p, _set(HF_LAYER, 2, "id", 2049032)),
                 [f"layer '{HF_LAYER}' fid 2 (id 2049032, 'CMA Nouna'): id 2049032 is already used by "
                  f"layer '{HF_LAYER}' fid 1"], id="duplicate-id"),
    pytest.param(lambda p: gpkg_copy(p, _set(HF_LAYER, 1, "id", "20490x2")),
                 [f"layer '{HF_LAYER}' fid 1: id '20490x2' is not an integer"], id="bad-id"),
    pytest.param(lambda p: gpkg_copy(p, _set(HF_LAYER, 1, "name", " ")),
                 [f"layer '{HF_LAYER}' fid 1 (id 2049032): the name is empty"], id="empty-name"),
    pytest.param(lambda p: gpkg_copy(p, _set(HF_LAYER, 1, "parent_ref", "NoSuchRef00"),
                                     _set(HF_LAYER, 1, "parent", "Nowhere (Health area/Aire de santé - AREA)")),
                 ["(id 2049032, 'CMA Boromo 1'): parent reference 'NoSuchRef00' nor parent name 'Nowhere' "
                  "matches no org unit"], id="dangling-parent"),
    pytest.param(_cycle, ["is its own ancestor", f"layer '{REGION_LAYER}' fid 1 (id 2048977"], id="cycle"),
    pytest.param(lambda p: gpkg_copy(p, _set(HF_LAYER, 1, "parent_ref", "KvNOePwHFyH")),
                 [f"layer '{HF_LAYER}' fid 1 (id 2049032, 'CMA Boromo 1') is its own parent"], id="self-parent"),
    pytest.param(lambda p: gpkg_copy(p, f'ALTER TABLE "{HF_LAYER}" RENAME COLUMN ref TO reference'),
                 [f"layer '{HF_LAYER}': missing column(s) 'ref'"], id="missing-column"),
    pytest.param(_foreign_layer, ["layer 'roads' is not named like 'level-<N>-<type name> - <CODE>'"],
                 id="foreign-layer"),
    pytest.param(_not_sqlite, ["not a readable GeoPackage"], id="not-sqlite"),
    pytest.param(lambda p: p / "missing.gpkg", ["no such file"], id="missing-file"),
]


@pytest.mark.parametrize("make, fragments", BAD_GPKG)
def test_bad_gpkg_is_refused(engine: Engine, tmp_path: Path, make: Callable[[Path], Path],
                             fragments: list[str]) -> None:
    path = make(tmp_path)
    check_error(engine, lambda: load_iaso_gpkg(engine, path), *fragments)
    assert nothing_written(engine)


def test_gpkg_parent_by_name_when_reference_is_missing_or_unknown(engine: Engine, tmp_path: Path) -> None:
    path = gpkg_copy(tmp_path, _set(HF_LAYER, 1, "parent_ref", None), _set(HF_LAYER, 2, "parent_ref", "NoSuchRef00"))
    load_iaso_gpkg(engine, path)
    stored = units(engine)
    assert stored[2049032].parent_id == 2048986  # Boromo (Health area)
    assert stored[2049106].parent_id == by_ref(engine)["aYaJaRSRbtp"].id  # Nouna (Health area)


def test_gpkg_bad_reload_leaves_stored_data_untouched(engine: Engine, tmp_path: Path) -> None:
    load_iaso_gpkg(engine, IASO_GPKG)
    path = gpkg_copy(tmp_path, _set(AREA_LAYER, 2, "name", "Renamed before the bad feature"),
                     _set(HF_LAYER, 1, "geom", gp_point(-3.3, 95.0)))
    check_error(engine, lambda: load_iaso_gpkg(engine, path, version=2), "latitude 95.0")


def test_gpkg_uuid_and_altitude(engine: Engine, tmp_path: Path) -> None:
    point_z = b"GP\x00\x01" + struct.pack("<i", 4326) + struct.pack("<BIddd", 1, 1001, -3.34, 11.72, 312.5)
    path = gpkg_copy(tmp_path, _set(HF_LAYER, 1, "uuid", "8c2fe2c4-3a4e-4b36-9d0d-5b1b31c4e0a1"),
                     _set(HF_LAYER, 1, "geom", point_z))
    load_iaso_gpkg(engine, path)
    row = units(engine)[2049032]
    assert (row.uuid, row.latitude, row.longitude, row.altitude) == \
        ("8c2fe2c4-3a4e-4b36-9d0d-5b1b31c4e0a1", 11.72, -3.34, 312.5)


# --- GeoPackage / WKB decoding ----------------------------------------------------------------------------------

def _gp(wkb: bytes, *, flags: int = 1, envelope: bytes = b"") -> bytes:
    return b"GP\x00" + bytes([flags]) + struct.pack("<i", 4326) + envelope + wkb


SQUARE = [[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]


def _polygon_wkb(order: str = "<", code: int = 3) -> bytes:
    return (struct.pack(order + "BII", 1 if order == "<" else 0, code, 1) + struct.pack(order + "I", 5)
            + b"".join(struct.pack(order + "dd", *p) for p in SQUARE))


@pytest.mark.parametrize("blob, expected", [
    pytest.param(_gp(struct.pack("<BIdd", 1, 1, 2.5, 12.0)), {"type": "Point", "coordinates": [2.5, 12.0]}, id="point"),
    pytest.param(_gp(struct.pack(">BIdd", 0, 1, 2.5, 12.0)), {"type": "Point", "coordinates": [2.5, 12.0]},
                 id="big-endian"),
    pytest.param(_gp(struct.pack("<BIddd", 1, 1001, 2.5, 12.0, 7.0)),
                 {"type": "Point", "coordinates": [2.5, 12.0, 7.0]},
                 id="iso-z"),
    pytest.param(_gp(struct.pack("<BIidd", 1, 0x20000001, 4326, 2.5, 12.0)),
                 {"type": "Point", "coordinates": [2.5, 12.0]}, id="ewkb-srid"),
    pytest.param(_gp(struct.pack("<BIdd", 1, 1, float("nan"), float("nan"))), None, id="empty-point"),
    pytest.param(_gp(_polygon_wkb(), flags=3, envelope=struct.pack("<4d", 0, 1, 0, 1)),
                 {"type": "Polygon", "coordinates": [SQUARE]}, id="polygon-envelope"),
    pytest.param(_gp(struct.pack("<BII", 1, 6, 2) + _polygon_wkb(">") + _polygon_wkb()),
                 {"type": "MultiPolygon", "coordinates": [[SQUARE], [SQUARE]]}, id="multipolygon-mixed-order"),
])
def test_decode_gpkg(blob: bytes, expected: dict[str, Any] | None) -> None:
    assert decode_gpkg(blob).geometry == expected


@pytest.mark.parametrize("blob, message", [
    pytest.param(b"GP", "does not start", id="short"),
    pytest.param(_gp(struct.pack("<BIdd", 1, 1, 2.5, 12.0), flags=0b0010_0001), "extended", id="extended"),
    pytest.param(_gp(struct.pack("<BI", 1, 1)), "truncated", id="truncated"),
    pytest.param(_gp(struct.pack("<BIdd", 1, 1, 2.5, 12.0) + b"\x00"), "unexpected byte", id="trailing"),
    pytest.param(_gp(struct.pack("<BI", 1, 99)), "unknown WKB geometry type 99", id="type"),
    pytest.param(_gp(struct.pack("<BII", 1, 6, 1) + struct.pack("<BIdd", 1, 1, 0, 0)), "Point where a Polygon",
                 id="multi-member"),
    pytest.param(_gp(struct.pack("<BII", 1, 3, 4_000_000)), "truncated", id="huge-count"),
])
def test_decode_gpkg_refuses(blob: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_gpkg(blob)


# --- FHIR Bundle: the Sierra Leone sample ----------------------------------------------------------------------

def test_sierra_leone_bundle_loads(engine: Engine) -> None:
    assert load_fhir_bundle(engine, SL_BUNDLE) == WriteReport(inserted=1332, notes=first_load("FHIR"))
    stored = by_ref(engine)
    assert len(stored) == 1332
    assert [ref for ref, row in stored.items() if row.parent_id is None] == ["ImspTQPwCqd"]
    assert Counter(depths(engine).values()) == {1: 1, 2: 13, 3: 152, 4: 1166}
    assert categories(engine) == {"COUNTRY": 1, "REGION": 13, "DISTRICT": 152, "HF": 1166}
    assert types(engine) == {f"fhir-l{n}": (f"Level {n}", category, n)
                             for n, category in enumerate(("COUNTRY", "REGION", "DISTRICT", "HF"), 1)}
    adonkia = stored["Rp268JB6Ne4"]
    assert (adonkia.name, adonkia.aliases, adonkia.validation_status) == ("Adonkia CHP", ["OU_651071"], "VALID")
    assert adonkia.parent_id == stored["qtr8GGlm4gg"].id
    assert all(row.aliases and row.aliases[0].startswith("OU_") for row in stored.values())
    assert all(row.latitude is None and row.geometry is None for row in stored.values())
    with engine.connect() as conn:
        source = conn.execute(select(data_source)).one()
    assert (source.name, source.slug, source.identifier_system) == ("FHIR", "fhir", DHIS2_SYSTEM)


def test_sierra_leone_bundle_reimport_changes_nothing(engine: Engine) -> None:
    load_fhir_bundle(engine, SL_BUNDLE)
    before = snapshot(engine)
    assert load_fhir_bundle(engine, SL_BUNDLE) == WriteReport(unchanged=1332)
    assert snapshot(engine) == before


def test_ids_stay_stable_when_a_bundle_grows(engine: Engine) -> None:
    """The upper levels first, then the whole bundle: the units loaded first keep their ids."""
    bundle = json.loads(SL_BUNDLE.read_text())
    parents = {entry["resource"]["id"]: entry["resource"].get("partOf", {}).get("reference")
               for entry in bundle["entry"] if entry["resource"]["resourceType"] == "Location"}
    upper = {"ImspTQPwCqd"} | {key for key, ref in parents.items() if ref == "Location/ImspTQPwCqd"}
    small = {**bundle, "entry": [e for e in bundle["entry"] if e["resource"]["id"] in upper]}
    assert import_fhir_bundle(engine, small) == WriteReport(inserted=14, notes=first_load("FHIR"))
    first = {ref: row.id for ref, row in by_ref(engine).items()}
    assert sorted(first.values()) == list(range(1, 15))
    # level 2 was the deepest, facilities (HF): now districts (REGION), a reclassification the operator confirms
    with pytest.raises(LoadError, match=r"would reclassify 13 units of default/FHIR: type 'Level 2' from depth 2 "
                                        r"\(HF\) to depth 2 \(REGION\) \(13 units\).*--allow-reclassify"):
        import_fhir_bundle(engine, bundle)
    assert import_fhir_bundle(engine, bundle, allow=Allowed(reclassify=True)) == \
        WriteReport(inserted=1318, updated=13, unchanged=1)
    after = {ref: row.id for ref, row in by_ref(engine).items()}
    assert {ref: after[ref] for ref in first} == first
    assert min(unit_id for ref, unit_id in after.items() if ref not in first) == 15
    assert Counter(depths(engine).values()) == {1: 1, 2: 13, 3: 152, 4: 1166}


def test_partial_bundle_finds_parents_among_stored_units(engine: Engine) -> None:
    load_fhir_bundle(engine, SL_BUNDLE)
    before = snapshot(engine)
    bundle = json.loads(SL_BUNDLE.read_text())
    facilities = [e for e in bundle["entry"] if e["resource"]["resourceType"] == "Location"
                  and e["resource"].get("partOf", {}).get("reference") == "Location/qtr8GGlm4gg"]
    assert counts(import_fhir_bundle(engine, {**bundle, "entry": facilities})) == {
        "unchanged": len(facilities), "missing": 1332 - len(facilities)}
    assert snapshot(engine) == before


# --- FHIR Bundle: features and errors, on a small hand-made bundle --------------------------------------------------

def _boundary(geometry: Any) -> dict[str, Any]:
    data = base64.b64encode(json.dumps(geometry).encode()).decode()
    return {"url": "http://hl7.org/fhir/StructureDefinition/location-boundary-geojson",
            "valueAttachment": {"contentType": "application/geo+json", "data": data}}


COUNTRY_SHAPE = {"type": "Polygon", "coordinates": [[[-13.3, 6.9], [-10.3, 6.9], [-10.3, 10.0], [-13.3, 10.0],
                                                     [-13.3, 6.9]]]}


def small_bundle() -> dict[str, Any]:
    """A collection: a country with a boundary, a district referenced by fullUrl, two facilities (one before
    its parent), an Organization and a Patient that are ignored."""
    ns = "https://other-server.example.org/fhir/StructureDefinition/"
    return {"resourceType": "Bundle", "type": "collection", "entry": [
        {"fullUrl": "urn:uuid:0b7d6a3e-0000-4000-8000-000000000003",
         "resource": {"resourceType": "Location", "id": "fac-1", "name": "Ngelehun CHC", "status": "suspended",
                      "identifier": [{"system": "https://example.org/ids", "value": "fac-1"},
                                     {"system": "https://example.org/codes", "value": "OU_559"},
                                     {"system": "urn:ietf:rfc:3986",
                                      "value": "urn:uuid:6f1c1c3e-2b0a-4f55-9a34-1f2d4b5e6a70"}],
                      "alias": ["Ngelehun Community Health Centre"],
                      "position": {"longitude": -11.4197, "latitude": 8.1039, "altitude": 120},
                      "extension": [{"url": ns + "opening-date", "valueDate": "1994-03-01"},
                                    {"url": ns + "closing-date", "valueDate": "2021"}],
                      "partOf": {"reference": "urn:uuid:0b7d6a3e-0000-4000-8000-000000000002"}}},
        {"resource": {"resourceType": "Organization", "id": "org-1", "name": "Ministry of Health"}},
        {"fullUrl": "urn:uuid:0b7d6a3e-0000-4000-8000-000000000002",
         "resource": {"resourceType": "Location", "id": "dist-1", "name": "Bo", "status": "inactive",
                      "extension": [{"url": ns + "org-unit-validation-status", "valueCode": "VALID"}],
                      "partOf": {"reference": "https://example.org/fhir/Location/country/_history/3"}}},
        {"resource": {"resourceType": "Location", "id": "country", "name": "Sierra Leone",
                      "extension": [_boundary(COUNTRY_SHAPE)]}},
        {"resource": {"resourceType": "Patient", "id": "p1"}},
        {"resource": {"resourceType": "Location", "id": "fac-2", "name": "Njandama MCHP", "status": "active",
                      "partOf": {"reference": "Location/dist-1"}}},
        {"request": {"method": "DELETE", "url": "Location/gone"}},
    ]}


def test_small_bundle_features(engine: Engine) -> None:
    assert import_fhir_bundle(engine, small_bundle(), data_source="Partner") == \
        WriteReport(inserted=4, notes=first_load("Partner"))
    stored = by_ref(engine)
    country, district, facility = stored["country"], stored["dist-1"], stored["fac-1"]
    assert country.geometry == COUNTRY_SHAPE and country.validation_status == "VALID"
    assert district.parent_id == country.id and district.validation_status == "VALID"  # the extension wins
    assert facility.parent_id == district.id and stored["fac-2"].parent_id == district.id
    assert facility.validation_status == "NEW"
    assert facility.uuid == "6f1c1c3e-2b0a-4f55-9a34-1f2d4b5e6a70"
    assert facility.aliases == ["OU_559", "Ngelehun Community Health Centre"]
    assert (facility.latitude, facility.longitude, facility.altitude) == (8.1039, -11.4197, 120.0)
    assert (facility.opening_date, facility.closing_date) == (date(1994, 3, 1), date(2021, 1, 1))
    assert types(engine) == {"partner-l1": ("Level 1", "COUNTRY", 1), "partner-l2": ("Level 2", "REGION", 2),
                             "partner-l3": ("Level 3", "HF", 3)}
    with engine.connect() as conn:
        assert conn.execute(select(data_source.c.identifier_system)).scalar() is None  # not every Location has one
    assert import_fhir_bundle(engine, small_bundle(), data_source="Partner") == WriteReport(unchanged=4)


def _edit(path: list[Any], value: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Set (or, with value ..., delete) the item at `path` in the bundle."""
    def change(bundle: dict[str, Any]) -> dict[str, Any]:
        target = bundle
        for key in path[:-1]:
            target = target[key]
        if value is ...:
            del target[path[-1]]
        else:
            target[path[-1]] = value
        return bundle
    return change


def _res(index: int, *keys: Any) -> list[Any]:
    return ["entry", index, "resource", *keys]


BAD_BUNDLES = [
    pytest.param(_edit(_res(5, "id"), ...), "entry[5] (Location, 'Njandama MCHP'): id None is missing", id="no-id"),
    pytest.param(_edit(_res(5, "id"), "bad id!"), "entry[5] (Location, 'Njandama MCHP'): id 'bad id!'", id="bad-id"),
    pytest.param(_edit(_res(5, "name"), ...), "entry[5] (Location/fac-2): the name is empty", id="no-name"),
    pytest.param(_edit(_res(5, "partOf"), {"reference": "Location/nowhere"}),
                 "entry[5] (Location/fac-2, 'Njandama MCHP'): partOf Location/nowhere matches no Location",
                 id="dangling-partof"),
    pytest.param(_edit(_res(5, "partOf"), {"reference": "Organization/org-1"}),
                 "entry[5] (Location/fac-2, 'Njandama MCHP'): partOf reference 'Organization/org-1' is not a Location",
                 id="partof-organization"),
    pytest.param(_edit(_res(5, "partOf"), {"display": "Bo"}), "entry[5] (Location/fac-2, 'Njandama MCHP'): partOf "
                 "has no reference", id="partof-display"),
    pytest.param(_edit(_res(0, "position", "latitude"), 123.0),
                 "entry[0] (Location/fac-1, 'Ngelehun CHC'): position.latitude 123.0 is not a number in -90..90",
                 id="latitude"),
    pytest.param(_edit(_res(0, "position", "longitude"), "-11.4"), "position.longitude '-11.4' is not a number",
                 id="longitude-text"),
    pytest.param(_edit(_res(0, "position", "longitude"), ...), "position.longitude None", id="half-position"),
    pytest.param(_edit(_res(0, "status"), "retired"), "entry[0] (Location/fac-1, 'Ngelehun CHC'): status 'retired'",
                 id="status"),
    pytest.param(_edit(_res(2, "extension", 0, "valueCode"), "MAYBE"),
                 "entry[2] (Location/dist-1, 'Bo'): extension https://other-server.example.org/fhir/Structure"
                 "Definition/org-unit-validation-status: valueCode 'MAYBE'", id="validation-status"),
    pytest.param(_edit(_res(0, "extension", 0, "valueDate"), "1994-13-01"), "'1994-13-01' is not a date",
                 id="opening-date"),
    pytest.param(_edit(_res(5, "id"), "fac-1"),
                 "entry[5] (Location/fac-1, 'Njandama MCHP'): id 'fac-1' is already used by entry[0]",
                 id="duplicate-id"),
    pytest.param(_edit(_res(3, "partOf"), {"reference": "Location/fac-2"}), "is its own ancestor", id="cycle"),
    pytest.param(_edit(_res(5, "partOf"), {"reference": "Location/fac-2"}),
                 "entry[5] (Location/fac-2, 'Njandama MCHP') is its own parent", id="self-parent"),
    pytest.param(_edit(_res(3, "extension", 0, "valueAttachment", "data"), "not base64!"),
                 "entry[3] (Location/country, 'Sierra Leone'): the boundary is not base64-encoded GeoJSON",
                 id="boundary-base64"),
    pytest.param(_edit(_res(3, "extension", 0),
                       _boundary({"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1]]]})),
                 "entry[3] (Location/country, 'Sierra Leone'): malformed boundary: polygon ring", id="boundary-ring"),
    pytest.param(_edit(_res(3, "extension", 0), _boundary({"type": "Point", "coordinates": [0, 0]})),
                 "geometry type 'Point' is not one of Polygon, MultiPolygon", id="boundary-point"),
    pytest.param(_edit(_res(0, "identifier", 1, "value"), ""), "entry[0] (Location/fac-1, 'Ngelehun CHC'): "
                 "identifier[1] has no value", id="identifier"),
    pytest.param(_edit(["resourceType"], "Parameters"), "not a FHIR Bundle (resourceType 'Parameters')",
                 id="not-a-bundle"),
    pytest.param(_edit(["entry"], {"resource": {}}), "Bundle.entry is not a list", id="entry-object"),
]


@pytest.mark.parametrize("change, message", BAD_BUNDLES)
def test_bad_bundle_is_refused(engine: Engine, tmp_path: Path, change: Callable[[dict[str, Any]], dict[str, Any]],
                               message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(change(small_bundle())))
    check_error(engine, lambda: load_fhir_bundle(engine, path), message)
    assert nothing_written(engine)


@pytest.mark.parametrize("text, message", [
    pytest.param('{"resourceType": "Bundle", "entry": [', "not valid JSON (line 1, column", id="json"),
    pytest.param(b'{"name": "\xc3\x28"}', "not UTF-8 text", id="encoding"),
])
def test_unreadable_json_is_refused(engine: Engine, tmp_path: Path, text: str | bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    for load in (load_fhir_bundle, load_dhis2):
        check_error(engine, lambda: load(engine, path), str(path), message)


def test_bad_bundle_reload_leaves_stored_data_untouched(engine: Engine) -> None:
    import_fhir_bundle(engine, small_bundle())
    bundle = small_bundle()
    bundle["entry"][3]["resource"]["name"] = "Renamed before the bad entry"
    bundle["entry"][5]["resource"]["partOf"] = {"reference": "Location/nowhere"}
    check_error(engine, lambda: import_fhir_bundle(engine, bundle, version=2), "Location/nowhere")


# --- DHIS2 --------------------------------------------------------------------------------------------------------

def dhis2_sample() -> dict[str, Any]:
    return json.loads(DHIS2_SAMPLE.read_text())


def test_dhis2_sample_loads(engine: Engine) -> None:
    document = dhis2_sample()
    listed = [unit["id"] for unit in document["organisationUnits"]]
    assert listed.index("YuQRtpLP10I") > listed.index("DiszpKrYNg8")  # the file lists children first
    assert load_dhis2(engine, DHIS2_SAMPLE) == WriteReport(inserted=32, notes=first_load("DHIS2"))
    assert types(engine) == {"dhis2-l1": ("National", "COUNTRY", 1), "dhis2-l2": ("District", "REGION", 2),
                             "dhis2-l3": ("Chiefdom", "DISTRICT", 3), "dhis2-l4": ("Facility", "HF", 4)}
    assert categories(engine) == {"COUNTRY": 1, "REGION": 3, "DISTRICT": 7, "HF": 21}
    stored = by_ref(engine)
    ids = {ref: row.id for ref, row in stored.items()}
    for unit in document["organisationUnits"]:
        parent = unit.get("parent", {}).get("id") or (unit["path"].split("/")[-2] or None)
        assert stored[unit["id"]].parent_id == (ids[parent] if parent else None), unit["name"]
    assert Counter(depths(engine).values()) == {1: 1, 2: 3, 3: 7, 4: 21}
    ngelehun, njandama = stored["DiszpKrYNg8"], stored["g8upMTyEZGZ"]  # legacy and GeoJSON points
    assert (ngelehun.latitude, ngelehun.longitude, ngelehun.geometry) == (8.1039, -11.4197, None)
    assert (njandama.latitude, njandama.longitude, njandama.geometry) == (8.0583, -11.4063, None)
    assert sum(row.latitude is not None for row in stored.values()) == 20
    shapes = {ref: row.geometry["type"] for ref, row in stored.items() if row.geometry is not None}
    assert shapes == {"ImspTQPwCqd": "MultiPolygon", "O6uvpzGd5pu": "Polygon", "fdc6uOvgoji": "MultiPolygon",
                      "at6UHUQatSo": "Polygon", "YuQRtpLP10I": "Polygon", "vWbkYPRmKyS": "Polygon",
                      "fwH9ipvXde9": "MultiPolygon", "C9uduqDZr9d": "Polygon"}
    assert len(stored["ImspTQPwCqd"].geometry["coordinates"]) == 2
    for ref in shapes:
        for longitude, latitude in positions(stored[ref].geometry):
            assert -13.5 < longitude < -10 and 6.5 < latitude < 10.2, ref
    assert stored["kBP1UvZpsNj"].closing_date == date(2016, 6, 30)
    assert stored["ImspTQPwCqd"].opening_date == date(1994, 1, 1)
    assert sum(row.closing_date is not None for row in stored.values()) == 1
    assert stored["GQcsUZf81vP"].aliases == ["OU_193206", "Makeni Govt Hospital"]
    assert stored["DiszpKrYNg8"].aliases == ["OU_559"]
    assert as_utc(stored["GQcsUZf81vP"].created_at) == datetime(2012, 2, 17, 15, 54, 39, 987000, tzinfo=timezone.utc)
    assert {row.validation_status for row in stored.values()} == {"VALID"}
    with engine.connect() as conn:
        source = conn.execute(select(data_source)).one()
    assert (source.name, source.slug, source.identifier_system) == ("DHIS2", "dhis2", None)


def test_dhis2_reimport_changes_nothing(engine: Engine) -> None:
    load_dhis2(engine, DHIS2_SAMPLE)
    before = snapshot(engine)
    assert load_dhis2(engine, DHIS2_SAMPLE) == WriteReport(unchanged=32)
    assert snapshot(engine) == before


def test_dhis2_without_levels_or_level_numbers(engine: Engine) -> None:
    """No organisationUnitLevels: 'Level N'; no level and no path: one deeper than the parent."""
    document = dhis2_sample()
    del document["organisationUnitLevels"], document["organisationUnitGroups"]
    for unit in document["organisationUnits"]:
        unit.pop("level", None)
        if unit["id"] != "cDw53Ej8rju":  # keeps only its path, which gives its parent and its level
            del unit["path"]
    assert import_dhis2(engine, document["organisationUnits"]) == \
        WriteReport(inserted=32, notes=first_load("DHIS2"))  # a bare list
    assert types(engine) == {"dhis2-l1": ("Level 1", "COUNTRY", 1), "dhis2-l2": ("Level 2", "REGION", 2),
                             "dhis2-l3": ("Level 3", "DISTRICT", 3), "dhis2-l4": ("Level 4", "HF", 4)}
    assert categories(engine) == {"COUNTRY": 1, "REGION": 3, "DISTRICT": 7, "HF": 21}


def test_dhis2_partial_file_keeps_types_and_finds_stored_parents(engine: Engine) -> None:
    load_dhis2(engine, DHIS2_SAMPLE)
    before = snapshot(engine)
    document = dhis2_sample()
    document["organisationUnits"] = [unit for unit in document["organisationUnits"] if unit.get("level", 4) <= 2]
    del document["organisationUnitLevels"][3]  # the file alone would make level 2 the deepest (HF)
    assert counts(import_dhis2(engine, document)) == {"unchanged": 4, "missing": 28}
    assert snapshot(engine) == before
    document = dhis2_sample()
    document["organisationUnits"] = [unit for unit in document["organisationUnits"] if unit.get("level") == 4]
    del document["organisationUnitLevels"]
    assert counts(import_dhis2(engine, document)) == {"unchanged": 19, "missing": 13}
    assert snapshot(engine) == before  # the stored level names are kept


def _unit(uid: str, key: str, value: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(document: dict[str, Any]) -> dict[str, Any]:
        unit = next(item for item in document["organisationUnits"] if item["id"] == uid)
        if value is ...:
            del unit[key]
        else:
            unit[key] = value
        return document
    return change


def _index(uid: str) -> int:
    return [unit["id"] for unit in dhis2_sample()["organisationUnits"]].index(uid)


NGELEHUN = f"organisationUnits[{_index('DiszpKrYNg8')}] (id 'DiszpKrYNg8', 'Ngelehun CHC')"
BO = f"organisationUnits[{_index('O6uvpzGd5pu')}] (id 'O6uvpzGd5pu', 'Bo')"


def _duplicate(document: dict[str, Any]) -> dict[str, Any]:
    document["organisationUnits"].append(copy.deepcopy(document["organisationUnits"][0]))
    return document


BAD_DHIS2 = [
    pytest.param(_duplicate, f"organisationUnits[32] (id 'DiszpKrYNg8', 'Ngelehun CHC'): id 'DiszpKrYNg8' is "
                 f"already used by {NGELEHUN}", id="duplicate-uid"),
    pytest.param(_unit("DiszpKrYNg8", "parent", {"id": "NoSuchUid01"}),
                 f"{NGELEHUN}: parent 'NoSuchUid01' matches no org unit in the file nor in data source 'DHIS2'",
                 id="dangling-parent"),
    pytest.param(_unit("DiszpKrYNg8", "parent", "YuQRtpLP10I"), f"{NGELEHUN}: parent \"YuQRtpLP10I\" is not of "
                 "the form", id="parent-text"),
    pytest.param(_unit("ImspTQPwCqd", "parent", {"id": "DiszpKrYNg8"}), "is its own ancestor", id="cycle"),
    pytest.param(_unit("DiszpKrYNg8", "parent", {"id": "DiszpKrYNg8"}), f"{NGELEHUN} is its own parent",
                 id="self-parent"),
    pytest.param(_unit("DiszpKrYNg8", "coordinates", "[-11.4197;8.1039]"),
                 f"{NGELEHUN}: malformed geometry: coordinates '[-11.4197;8.1039]' are not a JSON array",
                 id="legacy-not-json"),
    pytest.param(_unit("DiszpKrYNg8", "coordinates", "[-191.4197,8.1039]"),
                 f"{NGELEHUN}: malformed geometry: longitude -191.4197 is outside -180..180", id="legacy-longitude"),
    pytest.param(_unit("DiszpKrYNg8", "coordinates", "[-11.4197]"), f"{NGELEHUN}: malformed geometry: position",
                 id="legacy-short"),
    pytest.param(_unit("DiszpKrYNg8", "featureType", "CIRCLE"), "featureType 'CIRCLE' is not one of",
                 id="feature-type"),
    pytest.param(_unit("O6uvpzGd5pu", "geometry", {"type": "Polygon", "coordinates": [[[-11.7, 7.8], [-11.6, 7.8],
                                                                                         [-11.6, 7.9]]]}),
                 f"{BO}: malformed geometry: polygon ring", id="short-ring"),
    pytest.param(_unit("O6uvpzGd5pu", "geometry", {"type": "LineString", "coordinates": [[-11.7, 7.8], [0, 0]]}),
                 f"{BO}: malformed geometry: geometry type 'LineString'", id="linestring"),
    pytest.param(_unit("O6uvpzGd5pu", "geometry", {"type": "Point", "coordinates": [-11.7, True]}),
                 f"{BO}: malformed geometry: position", id="boolean-coordinate"),
    pytest.param(_unit("kBP1UvZpsNj", "closedDate", "30/06/2016"), "closedDate '30/06/2016' is not an ISO date",
                 id="closed-date"),
    pytest.param(_unit("DiszpKrYNg8", "name", " "), f"organisationUnits[{_index('DiszpKrYNg8')}] (id 'DiszpKrYNg8'): "
                 "the name is empty", id="no-name"),
    pytest.param(_unit("DiszpKrYNg8", "id", ...), f"organisationUnits[{_index('DiszpKrYNg8')}]: id None is not a "
                 "DHIS2 UID", id="no-id"),
    pytest.param(_unit("cDw53Ej8rju", "path", "/ImspTQPwCqd/at6UHUQatSo/qtr8GGlm4gg"),
                 "path '/ImspTQPwCqd/at6UHUQatSo/qtr8GGlm4gg' is not of the form", id="path"),
    pytest.param(_unit("DiszpKrYNg8", "level", 0), f"{NGELEHUN}: level 0 is not a number from 1", id="level"),
    pytest.param(_unit("DiszpKrYNg8", "code", 559), f"{NGELEHUN}: code 559 is not text", id="code"),
    pytest.param(lambda document: {"organisationUnitGroups": []}, "no 'organisationUnits' list", id="no-units"),
    pytest.param(lambda document: {**document, "organisationUnitLevels": [{"level": "one", "name": "National"}]},
                 "organisationUnitLevels[0]: expected", id="levels"),
]


@pytest.mark.parametrize("change, message", BAD_DHIS2)
def test_bad_dhis2_is_refused(engine: Engine, tmp_path: Path, change: Callable[[dict[str, Any]], dict[str, Any]],
                              message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(change(dhis2_sample())))
    check_error(engine, lambda: load_dhis2(engine, path), message)
    assert nothing_written(engine)


def test_bad_dhis2_reload_leaves_stored_data_untouched(engine: Engine) -> None:
    load_dhis2(engine, DHIS2_SAMPLE)
    document = dhis2_sample()
    document["organisationUnits"][0]["name"] = "Renamed before the bad unit"
    document["organisationUnits"][-1]["parent"] = {"id": "DiszpKrYNg8"}
    check_error(engine, lambda: import_dhis2(engine, document, version=2), "is its own ancestor")


def test_cycle_through_stored_units_rolls_back(engine: Engine) -> None:
    """Only the writer sees this cycle: the district moves under a stored facility of its own subtree."""
    load_dhis2(engine, DHIS2_SAMPLE)
    document = dhis2_sample()
    bo = next(unit for unit in document["organisationUnits"] if unit["id"] == "O6uvpzGd5pu")
    bo["parent"] = {"id": "DiszpKrYNg8"}
    del bo["path"]
    document["organisationUnits"] = [bo]
    check_error(engine, lambda: import_dhis2(engine, document), "would become its own ancestor")


# --- shared: ids, data sources, formats, delete-missing -------------------------------------------------------------

def test_allocate_ids(engine: Engine) -> None:
    with engine.begin() as conn:
        source = ensure_data_source(conn, "S")
        other = ensure_data_source(conn, "T")
        assert allocate_ids(conn, source, ["b", "a", "b"]) == {"b": 1, "a": 2}
    with engine.begin() as conn:
        conn.execute(org_unit_type.insert().values(name="Level 1", short_name="s-l1", category="COUNTRY", depth=1))
    import_units(engine, data_source="S", version=1, types=[], records=[
        UnitRecord(id=7, name="Seven", type_short_name="s-l1", source_ref="a"),
        UnitRecord(id=40, name="Forty", type_short_name="s-l1", source_ref="x")])
    with engine.begin() as conn:
        assert allocate_ids(conn, source, ["z", "a", "x", "c"]) == {"z": 41, "a": 7, "x": 40, "c": 42}
        assert allocate_ids(conn, other, ["a"]) == {"a": 41}  # refs are per data source


def test_import_never_moves_units_between_data_sources(engine: Engine) -> None:
    load_iaso_csv(engine, IASO_CSV)
    check_error(engine, lambda: load_iaso_gpkg(engine, IASO_GPKG, data_source="Other"),
                "org unit 2048976 ('Burkina Faso'): id 2048976 is already used by a unit of data source 'Iaso'")


def test_import_units_is_one_transaction(engine: Engine) -> None:
    """Types, data source and version are rolled back with the units."""
    def records(conn: Any, source_id: int) -> list[UnitRecord]:
        return [UnitRecord(id=1, name="A", type_short_name="t"), UnitRecord(id=2, name="B", type_short_name="t",
                                                                           parent_id=99)]

    check_error(engine, lambda: import_units(engine, data_source="S", version=1,
                                             types=[TypeRecord("T", "t", "COUNTRY", 1)], records=records),
                "parent 99 does not exist")
    assert nothing_written(engine)


@pytest.mark.parametrize("fmt, path, source, total", [
    pytest.param("iaso-csv", IASO_CSV, "Iaso", 136, id="iaso-csv"),
    pytest.param("iaso-gpkg", IASO_GPKG, "Iaso", 136, id="iaso-gpkg"),
    pytest.param("dhis2", DHIS2_SAMPLE, "DHIS2", 32, id="dhis2"),
    pytest.param("fhir-bundle", SL_BUNDLE, "FHIR", 1332, id="fhir-bundle"),
])
def test_load_file(engine: Engine, fmt: str, path: Path, source: str, total: int) -> None:
    assert load_file(engine, fmt, path, data_source=None, version=1, delete_missing=False) == \
        WriteReport(inserted=total, notes=first_load(source))
    assert load_file(engine, fmt, path, data_source=source, version=1, delete_missing=False) == \
        WriteReport(unchanged=total)
    with engine.connect() as conn:
        assert conn.execute(select(data_source.c.name)).scalars().all() == [source]
        assert conn.execute(select(source_version.c.number)).scalars().all() == [1]


def test_formats_registry(engine: Engine) -> None:
    assert sorted(FORMATS) == ["dhis2", "fhir-bundle", "iaso-csv", "iaso-gpkg"]
    assert sorted(formats.DEFAULT_DATA_SOURCES) == sorted(FORMATS)
    with pytest.raises(LoadError, match="unknown format 'csv'; known formats: iaso-csv, iaso-gpkg, dhis2, fhir-bundle"):
        load_file(engine, "csv", IASO_CSV, data_source=None, version=1, delete_missing=False)


def test_delete_missing(engine: Engine) -> None:
    load_dhis2(engine, DHIS2_SAMPLE)
    before = by_ref(engine)
    document = dhis2_sample()
    document["organisationUnits"] = [unit for unit in document["organisationUnits"]
                                     if unit["id"] not in ("Rp268JB6Ne4", "cDw53Ej8rju")]
    report = import_dhis2(engine, document, delete_missing=True)
    assert counts(report) == {"unchanged": 30, "deleted": 2}
    assert sorted(report.deleted_ids) == sorted(before[ref].id for ref in ("Rp268JB6Ne4", "cDw53Ej8rju"))
    after = by_ref(engine)
    gone = {ref for ref, row in after.items() if row.deleted}
    assert gone == {"Rp268JB6Ne4", "cDw53Ej8rju"}
    assert all(after[ref].version_id == 2 for ref in gone)
    assert all(after[ref].version_id == before[ref].version_id for ref in after if ref not in gone)
    assert load_dhis2(engine, DHIS2_SAMPLE) == WriteReport(restored=2, unchanged=30)  # back, with the same ids
    assert {ref: row.id for ref, row in by_ref(engine).items()} == {ref: row.id for ref, row in before.items()}
    assert not any(row.deleted for row in by_ref(engine).values())


def test_delete_missing_refuses_to_orphan_a_kept_unit(engine: Engine) -> None:
    load_dhis2(engine, DHIS2_SAMPLE)
    document = dhis2_sample()
    document["organisationUnits"] = [unit for unit in document["organisationUnits"] if unit["id"] != "qtr8GGlm4gg"]
    check_error(engine, lambda: import_dhis2(engine, document, delete_missing=True), "deleted parent")


def test_delete_missing_without_the_flag_keeps_units(engine: Engine) -> None:
    load_dhis2(engine, DHIS2_SAMPLE)
    document = dhis2_sample()
    document["organisationUnits"] = document["organisationUnits"][1:]
    report = import_dhis2(engine, document)
    assert counts(report) == {"unchanged": 31, "missing": 1}
    assert report.missing_ids == (by_ref(engine)[dhis2_sample()["organisationUnits"][0]["id"]].id,)
    assert not any(row.deleted for row in units(engine).values())
