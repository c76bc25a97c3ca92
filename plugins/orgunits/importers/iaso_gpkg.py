"""Import of Iaso's "export org units" GeoPackage, all or nothing.

The GeoPackage (a SQLite file, opened read-only) has one feature layer per level, named
'level-<N>-<type name> - <CODE>' (e.g. 'level-5-Health facility/Formation sanitaire - HF'), with the columns
fid, geom, id, name, ref, parent, parent_ref, group_refs, group_names, uuid; geometries are in EPSG:4326.

- id = the Iaso id (the same as in Iaso's CSV export of the same org units), source_ref = `ref`, uuid = `uuid`;
- parent: the unit whose `ref` is `parent_ref` (in the file, else among the stored units of the data source);
  failing that (no or unknown reference), the unique unit named like `parent` ('Name (Type - CODE)');
- type: from the layer name, with the conventions of the CSV importer (short name = the code), so that the CSV
  and the GeoPackage of one export give the same types;
- POINT -> latitude/longitude (the Z ordinate is the altitude, except 0, which Iaso writes when it is unknown);
  POLYGON/MULTIPOLYGON -> `geometry` as GeoJSON ([longitude, latitude]), without latitude/longitude;
- the GeoPackage has no validation status (a new unit is VALID) and no dates (opening, closing, creation,
  modification): a unit already stored (from Iaso's CSV export of the same pyramid) keeps its own, so the CSV and
  the GeoPackage combine in one data source; likewise a point keeps the stored boundary and a polygon the stored
  position. Groups (group_refs, group_names, the `groups` table) are not stored.
"""
from __future__ import annotations

import os
import re
import sqlite3
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine

from plugins.orgunits.importers.common import stored_by
from plugins.orgunits.importers.declaration import ImportFormat
from plugins.orgunits.importers.transaction import Progress, import_units
from plugins.orgunits.importers.geometry import (
    WGS84,
    check_boundary,
    decode_gpkg,
    position,
)
from plugins.orgunits.importers.iaso_csv import iaso_type
from plugins.orgunits.changes import Allowed
from plugins.orgunits.records import TypeRecord, UnitRecord, WriteReport, refuse_cycles
from plugins.orgunits.tables import DEFAULT_ACCOUNT, org_unit
from server import LoadError

REQUIRED = ("id", "name", "ref", "parent_ref")
KEPT = frozenset({"validation_status", "aliases", "opening_date", "closing_date"})  # what only the CSV carries
_POSITION = frozenset({"latitude", "longitude", "altitude"})
_LEVEL = re.compile(r"level-(\d+)-(.+)")
_PARENT = re.compile(r"(.+?) \((.+) - ([^()]+)\)")


@dataclass(frozen=True, slots=True)
class _Feature:
    layer: str
    fid: Any
    id: int
    name: str
    code: str
    ref: str | None
    uuid: str | None
    parent_ref: str | None
    parent_name: str | None
    parent_code: str | None
    latitude: float | None
    longitude: float | None
    altitude: float | None
    geometry: dict[str, Any] | None

    def label(self) -> str:
        return f"layer {self.layer!r} fid {self.fid} (id {self.id}, {self.name!r})"


def load_iaso_gpkg(engine: Engine, path: str | os.PathLike[str], data_source: str | None = None, version: int = 1,
                   *, delete_missing: bool = False, now: datetime | None = None, progress: Progress | None = None,
                   account: str = DEFAULT_ACCOUNT, dry_run: bool = False, allow: Allowed = Allowed()) -> WriteReport:
    """Load the GeoPackage into `data_source` (default 'Iaso', like the CSV) / `version` in one transaction;
    raises LoadError and writes nothing if any feature is wrong."""
    source = FORMAT.data_source(data_source)
    features, types = read_features(Path(path))

    def records(conn: Connection, source_id: int) -> list[UnitRecord]:
        parents = _resolve_parents(conn, features, source_id, source)
        by_id = {feature.id: feature for feature in features}
        refuse_cycles({unit_id: parent if parent in by_id else None for unit_id, parent in parents.items()},
                      lambda unit_id: by_id[unit_id].label())
        return [_record(feature, parents[feature.id]) for feature in features]

    return import_units(engine, data_source=source, version=version,
                        types=sorted(types.values(), key=lambda item: (item.depth or 0, item.short_name)),
                        records=records, delete_missing=delete_missing, now=now, progress=progress, account=account,
                        fmt=FORMAT.name, kept=KEPT, dry_run=dry_run, allow=allow)


def read_features(path: Path) -> tuple[list[_Feature], dict[str, TypeRecord]]:
    """Every feature of every level layer, checked, and the org unit types the layers name (by short name)."""
    if not path.is_file():
        raise LoadError(f"{path}: no such file")
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise LoadError(f"{path}: cannot open the file ({exc})") from None
    try:
        return _read(db, path)
    except sqlite3.DatabaseError as exc:
        raise LoadError(f"{path}: not a readable GeoPackage ({exc})") from None
    finally:
        db.close()


def _read(db: sqlite3.Connection, path: Path) -> tuple[list[_Feature], dict[str, TypeRecord]]:
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    if not {"gpkg_contents", "gpkg_geometry_columns"} <= tables:
        raise LoadError(f"{path}: not a GeoPackage (no gpkg_contents / gpkg_geometry_columns table)")
    layers = [name for (name,) in db.execute(
        "SELECT table_name FROM gpkg_contents WHERE data_type = 'features' ORDER BY table_name")]
    if not layers:
        raise LoadError(f"{path}: the GeoPackage has no feature layer; is this an Iaso org unit export?")
    features: list[_Feature] = []
    types: dict[str, tuple[TypeRecord, str]] = {}
    first: dict[int, _Feature] = {}
    for layer, depth, type_name, code in sorted((_parse_layer_name(layer) for layer in layers),
                                                key=lambda item: (item[1], item[0])):
        previous = types.get(code)
        if previous is not None and previous[0].name != type_name:
            raise LoadError(f"layer {layer!r}: type {type_name!r} has the code {code!r} already used by type "
                            f"{previous[0].name!r} (layer {previous[1]!r}); codes must be unique per type")
        if previous is None:
            types[code] = (iaso_type(type_name, code, depth), layer)
        for feature in _layer_features(db, layer, code):
            if feature.id in first:
                raise LoadError(f"{feature.label()}: id {feature.id} is already used by {first[feature.id].label()}")
            first[feature.id] = feature
            features.append(feature)
    return features, {code: item for code, (item, _) in types.items()}


def _parse_layer_name(layer: str) -> tuple[str, int, str, str]:
    prefix, separator, code = layer.rpartition(" - ")
    match = _LEVEL.fullmatch(prefix)
    if not separator or not code.strip() or match is None or not match.group(2).strip():
        raise LoadError(f"layer {layer!r} is not named like 'level-<N>-<type name> - <CODE>'; "
                        f"is this an Iaso org unit export?")
    return layer, int(match.group(1)), match.group(2).strip(), code.strip()


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _layer_features(db: sqlite3.Connection, layer: str, code: str) -> list[_Feature]:
    geometry_column = db.execute("SELECT column_name, srs_id FROM gpkg_geometry_columns WHERE table_name = ?",
                                 (layer,)).fetchone()
    if geometry_column is None:
        raise LoadError(f"layer {layer!r} has no entry in gpkg_geometry_columns")
    geom, srs_id = geometry_column
    _check_srs(db, layer, srs_id)
    info = db.execute(f"PRAGMA table_info({_quote(layer)})").fetchall()
    columns = {row[1] for row in info}
    missing = [name for name in REQUIRED if name not in columns]
    if missing:
        raise LoadError(f"layer {layer!r}: missing column(s) {', '.join(map(repr, missing))}; "
                        f"is this an Iaso org unit export?")
    fid = next((row[1] for row in info if row[5] == 1), "rowid")
    selected = [fid, geom, "id", "name", "ref", "parent_ref",
                "parent" if "parent" in columns else "NULL", "uuid" if "uuid" in columns else "NULL"]
    query = (f"SELECT {', '.join(name if name == 'NULL' else _quote(name) for name in selected)} "
             f"FROM {_quote(layer)} ORDER BY {_quote(fid)}")
    return [_feature(layer, code, srs_id, *row) for row in db.execute(query)]


def _check_srs(db: sqlite3.Connection, layer: str, srs_id: int) -> None:
    if srs_id == WGS84:
        return
    row = db.execute("SELECT organization, organization_coordsys_id FROM gpkg_spatial_ref_sys WHERE srs_id = ?",
                     (srs_id,)).fetchone()
    if row is None or str(row[0]).upper() != "EPSG" or row[1] != WGS84:
        described = f"{row[0]}:{row[1]}" if row is not None else "unknown"
        raise LoadError(f"layer {layer!r}: geometries are in srs {srs_id} ({described}); "
                        f"only EPSG:4326 (WGS 84 longitude/latitude) is supported")


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _feature(layer: str, code: str, srs_id: int, fid: Any, blob: Any, raw_id: Any, raw_name: Any, ref: Any,
             parent_ref: Any, parent: Any, uuid: Any) -> _Feature:
    where = f"layer {layer!r} fid {fid}"
    if isinstance(raw_id, float) and raw_id.is_integer():
        raw_id = int(raw_id)
    try:
        unit_id = raw_id if isinstance(raw_id, int) else int(str(raw_id).strip())
    except ValueError:
        raise LoadError(f"{where}: id {raw_id!r} is not an integer") from None
    name = _text(raw_name)
    if name is None:
        raise LoadError(f"{where} (id {unit_id}): the name is empty")
    parent_name = parent_code = None
    if (parent_text := _text(parent)) is not None:
        match = _PARENT.fullmatch(parent_text)
        parent_name, parent_code = (match.group(1), match.group(3).strip()) if match else (parent_text, None)
    feature = _Feature(layer, fid, unit_id, name, code, _text(ref), _text(uuid), _text(parent_ref), parent_name,
                       parent_code, None, None, None, None)
    if blob is None:
        return feature
    try:
        decoded = decode_gpkg(blob)
        if decoded.geometry is None:
            return feature
        if decoded.srs_id != srs_id and decoded.srs_id != WGS84:
            raise ValueError(f"the geometry is in srs {decoded.srs_id}, the layer in srs {srs_id}")
        kind = decoded.geometry["type"]
        if kind == "Point":
            coordinates = decoded.geometry["coordinates"]
            longitude, latitude = position(coordinates)
            altitude = coordinates[2] if len(coordinates) > 2 and coordinates[2] == coordinates[2] else None
            return replace(feature, latitude=latitude, longitude=longitude, altitude=altitude or None)
        if kind in ("Polygon", "MultiPolygon"):
            return replace(feature, geometry=check_boundary(decoded.geometry))
        raise ValueError(f"{kind} is not supported (only Point, Polygon and MultiPolygon)")
    except ValueError as exc:
        raise LoadError(f"{feature.label()}: malformed geometry: {exc}") from None


def _resolve_parents(conn: Connection, features: list[_Feature], source_id: int,
                     source: str) -> dict[int, int | None]:
    """Parent id per feature id: by `parent_ref` (in the file, then the stored units of the data source), else by
    the unique name in `parent` (restricted to the type code it gives)."""
    by_ref: dict[str, list[_Feature]] = defaultdict(list)
    by_name: dict[str, list[_Feature]] = defaultdict(list)
    for feature in features:
        if feature.ref:
            by_ref[feature.ref].append(feature)
        by_name[feature.name].append(feature)
    stored_refs = stored_by(conn, org_unit.c.source_ref,
                            {f.parent_ref for f in features if f.parent_ref} - set(by_ref), source_id)
    stored_names = stored_by(conn, org_unit.c.name,
                             {f.parent_name for f in features if f.parent_name} - set(by_name), source_id)
    parents: dict[int, int | None] = {}
    for feature in features:
        ref, name = feature.parent_ref, feature.parent_name
        if ref is None and name is None:
            parents[feature.id] = None
            continue
        found: int | None = None
        if ref is not None:
            found = _pick(feature, f"parent reference {ref!r}", by_ref.get(ref, []), stored_refs.get(ref, []), source)
        if found is None and name is not None:
            candidates = [match for match in by_name.get(name, [])
                          if feature.parent_code is None or match.code == feature.parent_code]
            found = _pick(feature, f"parent name {name!r}", candidates, stored_names.get(name, []), source)
        if found is None:
            wanted = " nor ".join(item for item in (ref and f"parent reference {ref!r}",
                                                     name and f"parent name {name!r}") if item)
            raise LoadError(f"{feature.label()}: {wanted} matches no org unit in the file "
                            f"nor in data source {source!r}")
        parents[feature.id] = found
    return parents


def _pick(feature: _Feature, what: str, in_file: list[_Feature], stored: list[int], source: str) -> int | None:
    if len(in_file) == 1:
        return in_file[0].id
    if len(in_file) > 1:
        raise LoadError(f"{feature.label()}: {what} is ambiguous, it matches "
                        f"{', '.join(match.label() for match in in_file)}")
    if len(stored) > 1:
        raise LoadError(f"{feature.label()}: {what} is ambiguous, it matches stored org units "
                        f"{', '.join(map(str, stored))} of data source {source!r}")
    return stored[0] if stored else None


def _record(feature: _Feature, parent_id: int | None) -> UnitRecord:
    return UnitRecord(
        id=feature.id,
        name=feature.name,
        type_short_name=feature.code,
        validation_status="VALID",
        uuid=feature.uuid,
        source_ref=feature.ref,
        parent_id=parent_id,
        latitude=feature.latitude,
        longitude=feature.longitude,
        altitude=feature.altitude,
        geometry=feature.geometry,
        # a point carries no boundary, a polygon no position, a feature without geometry neither: kept as stored
        kept=KEPT | (frozenset({"geometry"}) if feature.geometry is None else frozenset())
        | (_POSITION if feature.latitude is None else frozenset()),
    )


FORMAT = ImportFormat("iaso-gpkg", "Iaso's GeoPackage export (one layer per level; points for facilities, polygons for "
                      "areas); the validation status and dates loaded from the CSV are kept", load_iaso_gpkg, "Iaso")
