"""Import of DHIS2 organisation units (JSON), all or nothing.

Input: the response of `/api/organisationUnits?paging=false&fields=...` or a metadata export: an object with an
`organisationUnits` list (a bare list is accepted too), optionally `organisationUnitLevels` [{level, name}]
naming the levels. `organisationUnitGroups` are accepted and ignored (the store has no groups).

Per unit: id (the UID), name (or displayName), shortName, code, path ('/uid1/uid2/...'), parent {id}, level,
openingDate, closedDate, created, lastUpdated, and either `geometry` (GeoJSON Point/Polygon/MultiPolygon, DHIS2
2.32+) or the legacy `featureType` (POINT/SYMBOL/POLYGON/MULTI_POLYGON/NONE) + `coordinates` string.

- source_ref = the UID; the published identifier system is the data source's default (no identifier_system);
  integer ids are allocated by source_ref (`allocate_ids`), so re-importing maps every UID to the same id;
- aliases: code, and shortName when it differs from the name;
- parent: parent.id, else the next-to-last element of path; looked up in the file, then among the stored units
  of the data source; units may come before their parents;
- level: `level`, else the length of path, else one deeper than the parent;
- types: one per level, named from organisationUnitLevels (else 'Level N'), short name '<data source slug>-l<N>'
  (short names are unique across data sources), category 1 COUNTRY, 2 REGION, 3 DISTRICT, the deepest level HF,
  others the level name slugged and upper-cased;
- validation status: DHIS2 has none, every unit is VALID (a closed unit keeps VALID, with its closing date);
- Point -> latitude/longitude (and altitude if given); Polygon/MultiPolygon -> `geometry` (GeoJSON).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import Connection, Engine

from plugins.orgunits.importers.common import Hierarchy, level_types, resolve_hierarchy
from plugins.orgunits.importers.declaration import ImportFormat
from plugins.orgunits.importers.transaction import Progress, import_units
from plugins.orgunits.importers.parsers import aliases, parse_date, parse_timestamp, read_json
from plugins.orgunits.importers.geometry import (
    check_geometry,
    nesting,
    polygon,
    position,
)
from plugins.orgunits.changes import Allowed
from plugins.orgunits.records import TypeRecord, UnitRecord, WriteReport
from plugins.orgunits.tables import DEFAULT_ACCOUNT
from server import LoadError

KEPT = frozenset({"validation_status", "uuid"})  # DHIS2 has neither: a stored unit keeps them
_LEGACY_TYPES = {"POINT", "SYMBOL", "POLYGON", "MULTI_POLYGON", "NONE"}


@dataclass(frozen=True, slots=True)
class _Unit:
    index: int
    uid: str
    name: str
    aliases: tuple[str, ...]
    parent: str | None
    level: int | None
    opening: date | None
    closing: date | None
    created: datetime | None
    updated: datetime | None
    latitude: float | None
    longitude: float | None
    altitude: float | None
    geometry: dict[str, Any] | None

    def label(self) -> str:
        return f"organisationUnits[{self.index}] (id {self.uid!r}, {self.name!r})"


def load_dhis2(engine: Engine, path: str | os.PathLike[str], data_source: str | None = None, version: int = 1, *,
               delete_missing: bool = False, now: datetime | None = None,
               progress: Progress | None = None, account: str = DEFAULT_ACCOUNT, dry_run: bool = False,
               allow: Allowed = Allowed()) -> WriteReport:
    """Load a DHIS2 organisation units JSON file into `data_source` (default 'DHIS2') / `version`."""
    return import_dhis2(engine, read_json(path), data_source=data_source, version=version,
                        delete_missing=delete_missing, now=now, progress=progress, account=account, dry_run=dry_run,
                        allow=allow)


def import_dhis2(engine: Engine, document: Any, *, data_source: str | None = None, version: int = 1,
                 delete_missing: bool = False, now: datetime | None = None,
                 progress: Progress | None = None, account: str = DEFAULT_ACCOUNT,
                 dry_run: bool = False,
                 allow: Allowed = Allowed()) -> WriteReport:
    """Load parsed DHIS2 JSON in one transaction; raises LoadError and writes nothing if any unit is wrong."""
    units, level_names = read_units(document)
    plan = _Plan(units, level_names, FORMAT.data_source(data_source))
    return import_units(engine, data_source=plan.source, version=version, types=plan.types, records=plan.records,
                        delete_missing=delete_missing, now=now, progress=progress, account=account, fmt=FORMAT.name,
                        kept=KEPT, dry_run=dry_run,
                        allow=allow)


def read_units(document: Any) -> tuple[list[_Unit], dict[int, str]]:
    """The checked units (in file order) and the level names, without touching the database."""
    if isinstance(document, list):
        document = {"organisationUnits": document}
    if not isinstance(document, dict) or not isinstance(document.get("organisationUnits"), list):
        raise LoadError("no 'organisationUnits' list at the top level; is this a DHIS2 organisation units export?")
    level_names = _level_names(document.get("organisationUnitLevels"))
    units: list[_Unit] = []
    first: dict[str, _Unit] = {}
    for index, raw in enumerate(document["organisationUnits"]):
        unit = _unit(index, raw)
        if unit.uid in first:
            raise LoadError(f"{unit.label()}: id {unit.uid!r} is already used by {first[unit.uid].label()}")
        first[unit.uid] = unit
        units.append(unit)
    return units, level_names


def _level_names(raw: Any) -> dict[int, str]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise LoadError("organisationUnitLevels is not a list")
    names: dict[int, str] = {}
    for index, item in enumerate(raw):
        level = item.get("level") if isinstance(item, dict) else None
        name = item.get("name") or item.get("displayName") if isinstance(item, dict) else None
        if not _is_int(level) or level < 1 or not isinstance(name, str) or not name.strip():
            raise LoadError(f"organisationUnitLevels[{index}]: expected {{level: <number from 1>, name: <text>}}, "
                            f"got {json.dumps(item)[:120]}")
        if level in names and names[level] != name.strip():
            raise LoadError(f"organisationUnitLevels[{index}]: level {level} is named both {names[level]!r} "
                            f"and {name.strip()!r}")
        names[level] = name.strip()
    return names


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _unit(index: int, raw: Any) -> _Unit:
    where = f"organisationUnits[{index}]"
    if not isinstance(raw, dict):
        raise LoadError(f"{where} is not an object")
    uid = raw.get("id")
    if not isinstance(uid, str) or not uid.strip() or "/" in uid or uid != uid.strip():
        raise LoadError(f"{where}: id {uid!r} is not a DHIS2 UID")
    name = raw.get("name") or raw.get("displayName")
    if not isinstance(name, str) or not name.strip():
        raise LoadError(f"{where} (id {uid!r}): the name is empty")
    name = name.strip()
    label = f"{where} (id {uid!r}, {name!r})"
    for key in ("code", "shortName"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise LoadError(f"{label}: {key} {raw[key]!r} is not text")
    parent = _parent(raw, uid, label)
    level = raw.get("level")
    if level is not None and (not _is_int(level) or level < 1):
        raise LoadError(f"{label}: level {level!r} is not a number from 1")
    if level is None and isinstance(raw.get("path"), str):
        level = len(_path(raw["path"], uid, label))
    latitude = longitude = altitude = None
    geometry = _geometry(raw, label)
    if geometry is not None and geometry["type"] == "Point":
        longitude, latitude, *rest = geometry["coordinates"]
        altitude = rest[0] if rest else None
        geometry = None
    return _Unit(
        index=index, uid=uid, name=name, aliases=aliases(name, raw.get("code"), raw.get("shortName")),
        parent=parent, level=level,
        opening=_value(parse_date, raw, "openingDate", label), closing=_value(parse_date, raw, "closedDate", label),
        created=_value(parse_timestamp, raw, "created", label),
        updated=_value(parse_timestamp, raw, "lastUpdated", label),
        latitude=latitude, longitude=longitude, altitude=altitude, geometry=geometry,
    )


def _path(text: str, uid: str, label: str) -> list[str]:
    parts = text.strip("/").split("/")
    if not text.startswith("/") or not all(parts) or parts[-1] != uid:
        raise LoadError(f"{label}: path {text!r} is not of the form '/<root uid>/.../{uid}'")
    return parts


def _parent(raw: dict[str, Any], uid: str, label: str) -> str | None:
    parent = raw.get("parent")
    if parent is not None:
        parent_id = parent.get("id") if isinstance(parent, dict) else None
        if not isinstance(parent_id, str) or not parent_id.strip():
            raise LoadError(f"{label}: parent {json.dumps(parent)[:80]} is not of the form {{\"id\": <uid>}}")
        return parent_id.strip()
    path = raw.get("path")
    if path is None:
        return None
    if not isinstance(path, str):
        raise LoadError(f"{label}: path {path!r} is not text")
    parts = _path(path, uid, label)
    return parts[-2] if len(parts) > 1 else None


def _value(parse: Any, raw: dict[str, Any], key: str, label: str) -> Any:
    text = raw.get(key)
    if text is None or text == "":
        return None
    try:
        return parse(text)
    except ValueError:
        raise LoadError(f"{label}: {key} {text!r} is not an ISO date") from None


def _geometry(raw: dict[str, Any], label: str) -> dict[str, Any] | None:
    """The unit's checked GeoJSON geometry (Point, Polygon or MultiPolygon), from `geometry` or, for older
    DHIS2 versions, `featureType` + `coordinates`."""
    try:
        if raw.get("geometry") is not None:
            return check_geometry(raw["geometry"])
        coordinates = raw.get("coordinates")
        if coordinates is None or (isinstance(coordinates, str) and not coordinates.strip()):
            return None
        feature_type = raw.get("featureType")
        if feature_type is not None and feature_type not in _LEGACY_TYPES:
            raise ValueError(f"featureType {feature_type!r} is not one of {', '.join(sorted(_LEGACY_TYPES))}")
        if feature_type == "NONE":
            return None
        try:
            value = json.loads(coordinates) if isinstance(coordinates, str) else coordinates
        except json.JSONDecodeError:
            raise ValueError(f"coordinates {coordinates[:60]!r} are not a JSON array") from None
        depth = nesting(value)
        if feature_type in ("POINT", "SYMBOL") or (feature_type is None and depth == 1):
            return {"type": "Point", "coordinates": position(value, keep_altitude=True)}
        if depth == 3:
            return {"type": "Polygon", "coordinates": polygon(value)}
        if depth == 4:
            return check_geometry({"type": "MultiPolygon", "coordinates": value})
        raise ValueError(f"coordinates {str(coordinates)[:60]!r} are neither a point, a polygon nor a multipolygon")
    except ValueError as exc:
        raise LoadError(f"{label}: malformed geometry: {exc}") from None


class _Plan:
    """What needs the database: integer ids, parents among stored units, depths, types. Computed once, by
    `types` (called first by import_units), then used by `records`."""

    def __init__(self, units: list[_Unit], level_names: dict[int, str], source: str) -> None:
        self.units = units
        self.level_names = level_names
        self.source = source
        self.hierarchy = Hierarchy({}, {}, {})
        self.by_level: dict[int, TypeRecord] = {}

    def types(self, conn: Connection, source_id: int) -> list[TypeRecord]:
        by_uid = {unit.uid: unit for unit in self.units}
        self.hierarchy = resolve_hierarchy(
            conn, source_id, {unit.uid: unit.parent for unit in self.units},
            label=lambda uid: by_uid[uid].label(), reference=lambda parent: f"parent {parent!r}",
            not_found=f"no org unit in the file nor in data source {self.source!r}", source_name=self.source,
            known_depths={unit.uid: unit.level for unit in self.units if unit.level is not None})
        deepest = max(self.level_names, default=None)
        self.by_level = level_types(conn, source_id, self.hierarchy.depths.values(), self.level_names, deepest)
        return list(self.by_level.values())

    def records(self, conn: Connection, source_id: int) -> list[UnitRecord]:
        return [UnitRecord(
            id=self.hierarchy.ids[unit.uid],
            name=unit.name,
            type_short_name=self.by_level[self.hierarchy.depths[unit.uid]].short_name,
            validation_status="VALID",
            source_ref=unit.uid,
            aliases=unit.aliases,
            parent_id=self.hierarchy.parent_ids[unit.uid],
            latitude=unit.latitude,
            longitude=unit.longitude,
            altitude=unit.altitude,
            opening_date=unit.opening,
            closing_date=unit.closing,
            created_at=unit.created,
            updated_at=unit.updated,
            geometry=unit.geometry,
            kept=KEPT,
        ) for unit in self.units]


FORMAT = ImportFormat("dhis2", "DHIS2 organisationUnits JSON (API or metadata export); ids allocated, the UID is the "
                      "source reference", load_dhis2, "DHIS2")
