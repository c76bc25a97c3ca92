"""Import of a FHIR R4 Bundle of Location resources, all or nothing.

Any Bundle type (transaction, collection, searchset, ...). Entries that are not Locations (Organizations, ...)
or have no resource are ignored.

- source_ref = Location.id; integer ids are allocated by source_ref (`allocate_ids`), so re-importing maps
  every Location to the same id;
- identifiers: the one whose value is the id is the source_ref (when every Location has one and they all share
  one system, that system becomes the data source's identifier system); a urn:ietf:rfc:3986 'urn:uuid:...'
  identifier gives the uuid; the others (e.g. DHIS2 codes 'OU_651071') and Location.alias become aliases;
- status active/suspended/inactive (absent: active) -> VALID/NEW/REJECTED; an extension whose URL ends with
  '/org-unit-validation-status' (valueCode NEW/VALID/REJECTED, whatever its namespace) takes precedence;
  likewise '/opening-date' and '/closing-date' (valueDate);
- partOf 'Location/<id>' (also an absolute URL, a versioned reference, or an entry's fullUrl) -> parent, looked up
  in the bundle, then among the stored units of the data source; Locations may come before their parents;
- position -> latitude/longitude/altitude; the extension
  http://hl7.org/fhir/StructureDefinition/location-boundary-geojson (valueAttachment.data: base64 GeoJSON
  Polygon or MultiPolygon, or a Feature of one) -> geometry;
- types: one per depth computed from partOf ('Level N', short name '<data source slug>-l<N>', category 1 COUNTRY,
  2 REGION, 3 DISTRICT, the deepest HF, others 'LEVEL-N'); Location.type and physicalType are not used.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import Connection, Engine

from plugins.orgunits.importers.common import Hierarchy, level_types, resolve_hierarchy
from plugins.orgunits.importers.declaration import ImportFormat
from plugins.orgunits.importers.transaction import Progress, import_units
from plugins.orgunits.importers.parsers import FHIR_STATUSES, aliases, read_json
from plugins.orgunits.importers.fhir_elements import (
    BOUNDARY_URL,
    boundary,
    code,
    date_of,
    extensions,
    identifiers,
    parent_of,
    position,
)
from plugins.orgunits.changes import Allowed
from plugins.orgunits.records import TypeRecord, UnitRecord, WriteReport
from plugins.orgunits.tables import DEFAULT_ACCOUNT
from server import LoadError

_ID = re.compile(r"[A-Za-z0-9\-.]{1,64}")


@dataclass(frozen=True, slots=True)
class _Location:
    index: int
    id: str
    name: str
    system: str | None  # of the identifier whose value is the id
    uuid: str | None
    aliases: tuple[str, ...]
    status: str
    parent: str | None  # a Location id
    latitude: float | None
    longitude: float | None
    altitude: float | None
    opening: date | None
    closing: date | None
    geometry: dict[str, Any] | None

    def label(self) -> str:
        return f"entry[{self.index}] (Location/{self.id}, {self.name!r})"


def load_fhir_bundle(engine: Engine, path: str | os.PathLike[str], data_source: str | None = None,
                     version: int = 1, *, delete_missing: bool = False, now: datetime | None = None,
                     progress: Progress | None = None, account: str = DEFAULT_ACCOUNT,
                     dry_run: bool = False,
                     allow: Allowed = Allowed()) -> WriteReport:
    """Load a FHIR Bundle JSON file of Locations into `data_source` (default 'FHIR') / `version`."""
    return import_fhir_bundle(engine, read_json(path), data_source=data_source, version=version,
                              delete_missing=delete_missing, now=now, progress=progress, account=account,
                              dry_run=dry_run,
                              allow=allow)


def import_fhir_bundle(engine: Engine, bundle: Any, *, data_source: str | None = None, version: int = 1,
                       delete_missing: bool = False, now: datetime | None = None,
                       progress: Progress | None = None, account: str = DEFAULT_ACCOUNT,
                       dry_run: bool = False,
                       allow: Allowed = Allowed()) -> WriteReport:
    """Load a parsed Bundle in one transaction; raises LoadError and writes nothing if any Location is wrong."""
    locations = read_locations(bundle)
    plan = _Plan(locations, FORMAT.data_source(data_source))
    return import_units(engine, data_source=plan.source, version=version, types=plan.types, records=plan.records,
                        delete_missing=delete_missing, identifier_system=identifier_system(locations), now=now,
                        progress=progress, account=account, fmt=FORMAT.name, dry_run=dry_run,
                        allow=allow)


def identifier_system(locations: list[_Location]) -> str | None:
    """The system of the source_ref identifiers, when every Location has one and they all share it."""
    systems = {location.system for location in locations}
    return systems.pop() if len(systems) == 1 else None


def read_locations(bundle: Any) -> list[_Location]:
    """The checked Locations of the bundle (in entry order), without touching the database."""
    if not isinstance(bundle, dict) or bundle.get("resourceType") != "Bundle":
        kind = bundle.get("resourceType") if isinstance(bundle, dict) else type(bundle).__name__
        raise LoadError(f"not a FHIR Bundle (resourceType {kind!r})")
    entries = bundle.get("entry") or []
    if not isinstance(entries, list):
        raise LoadError("Bundle.entry is not a list")
    full_urls: dict[str, str] = {}
    raw_locations: list[tuple[int, dict[str, Any]]] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise LoadError(f"entry[{index}] is not an object")
        resource = entry.get("resource")
        if resource is None:
            continue
        if not isinstance(resource, dict):
            raise LoadError(f"entry[{index}]: resource is not an object")
        if resource.get("resourceType") != "Location":
            continue
        location_id = resource.get("id")
        if not isinstance(location_id, str) or not _ID.fullmatch(location_id):
            raise LoadError(f"entry[{index}] (Location, {resource.get('name')!r}): id {location_id!r} is missing "
                            f"or not a FHIR id")
        if isinstance(entry.get("fullUrl"), str):
            full_urls[entry["fullUrl"]] = location_id
        raw_locations.append((index, resource))
    locations: list[_Location] = []
    first: dict[str, _Location] = {}
    for index, resource in raw_locations:
        location = _location(index, resource, full_urls)
        if location.id in first:
            raise LoadError(f"{location.label()}: id {location.id!r} is already used by {first[location.id].label()}")
        first[location.id] = location
        locations.append(location)
    return locations


def _location(index: int, resource: dict[str, Any], full_urls: dict[str, str]) -> _Location:
    location_id = resource["id"]
    name = resource.get("name")
    if not isinstance(name, str) or not name.strip():
        raise LoadError(f"entry[{index}] (Location/{location_id}): the name is empty")
    name = name.strip()
    label = f"entry[{index}] (Location/{location_id}, {name!r})"
    system, uuid, identifier_aliases = identifiers(resource.get("identifier"), location_id, label)
    extra_aliases = resource.get("alias") or []
    if not isinstance(extra_aliases, list) or not all(isinstance(item, str) for item in extra_aliases):
        raise LoadError(f"{label}: alias is not a list of strings")
    found = extensions(resource.get("extension"), label)
    status = resource.get("status")
    if status is not None and status not in FHIR_STATUSES:
        raise LoadError(f"{label}: status {status!r} is not one of {', '.join(FHIR_STATUSES)}")
    validation_status = FHIR_STATUSES[status or "active"]
    if "org-unit-validation-status" in found:
        validation_status = code(found["org-unit-validation-status"], label)
    latitude, longitude, altitude = position(resource.get("position"), label)
    return _Location(
        index=index, id=location_id, name=name, system=system, uuid=uuid,
        aliases=aliases(name, *identifier_aliases, *extra_aliases), status=validation_status,
        parent=parent_of(resource.get("partOf"), full_urls, label),
        latitude=latitude, longitude=longitude, altitude=altitude,
        opening=date_of(found.get("opening-date"), "opening-date", label),
        closing=date_of(found.get("closing-date"), "closing-date", label),
        geometry=boundary(found.get(BOUNDARY_URL), label),
    )


class _Plan:
    """What needs the database: integer ids, parents among stored units, depths, types. Computed once, by
    `types` (called first by import_units), then used by `records`."""

    def __init__(self, locations: list[_Location], source: str) -> None:
        self.locations = locations
        self.source = source
        self.hierarchy = Hierarchy({}, {}, {})
        self.by_depth: dict[int, TypeRecord] = {}

    def types(self, conn: Connection, source_id: int) -> list[TypeRecord]:
        by_id = {location.id: location for location in self.locations}
        self.hierarchy = resolve_hierarchy(
            conn, source_id, {location.id: location.parent for location in self.locations},
            label=lambda key: by_id[key].label(), reference=lambda parent: f"partOf Location/{parent}",
            not_found=f"no Location in the bundle nor any stored unit of data source {self.source!r}",
            source_name=self.source)
        self.by_depth = level_types(conn, source_id, self.hierarchy.depths.values())
        return list(self.by_depth.values())

    def records(self, conn: Connection, source_id: int) -> list[UnitRecord]:
        return [UnitRecord(
            id=self.hierarchy.ids[location.id],
            name=location.name,
            type_short_name=self.by_depth[self.hierarchy.depths[location.id]].short_name,
            validation_status=location.status,
            uuid=location.uuid,
            source_ref=location.id,
            aliases=location.aliases,
            parent_id=self.hierarchy.parent_ids[location.id],
            latitude=location.latitude,
            longitude=location.longitude,
            altitude=location.altitude,
            opening_date=location.opening,
            closing_date=location.closing,
            geometry=location.geometry,
        ) for location in self.locations]


FORMAT = ImportFormat("fhir-bundle", "a FHIR Bundle (any type) of Location resources; ids allocated, the Location "
                      "id is the source reference", load_fhir_bundle, "FHIR")
