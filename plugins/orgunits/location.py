"""The Location provider: each organization unit as a FHIR R4 Location.

Plugin settings (`plugins.orgunits.location.config` in settings.yaml):
  status_map:      validation status -> Location.status  (default NEW: suspended, VALID: active, REJECTED: inactive)
  physical_types:  org-unit type category -> location-physical-type code
                   (default COUNTRY/REGION/DISTRICT: jdn, HF: bu)
  default_physical_type: code for any other category (default si)
  boundaries_in_search: include GeoJSON boundaries in search results too (default false: they are large;
                   a read, vread and _history always carry them)
"""
from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from types import MappingProxyType
from typing import Any

import orjson
from sqlalchemy import ColumnElement, String, case, cast, func, literal, or_, select
from sqlalchemy.engine import RowMapping

from plugins.orgunits.counts import counter
from plugins.orgunits.exports import CSV, GEOJSON, exporter
from plugins.orgunits.tables import (
    MIGRATIONS,
    VALIDATION_STATUSES,
    data_source,
    org_unit,
    org_unit_body,
    org_unit_history,
    org_unit_name,
    org_unit_type,
    source_version,
)
from plugins.orgunits.views import (
    FIRST_ACCOUNT,
    FORMER_ACCOUNTS,
    PUBLISHED_COLUMNS,
    PUBLISHED_FROM,
    PURGED,
    SOURCE_SYSTEM,
    VERSION_PARTITIONS,
)
from server import (
    ConfigError,
    CurrentBodies,
    Migrations,
    NearTarget,
    Operation,
    Prerendered,
    ReferenceTarget,
    ResourceProvider,
    SearchParam,
    Settings,
    StringTarget,
    Subtree,
    Tenancy,
    Through,
    TokenTarget,
    VersionScope,
    Versioning,
    hookimpl,
    instant,
)

PLUGIN = "location"
HL7_SP = "http://hl7.org/fhir/SearchParameter/Location-"
LOCATION_STATUS = "http://hl7.org/fhir/location-status"
PHYSICAL_TYPE = "http://terminology.hl7.org/CodeSystem/location-physical-type"
PHYSICAL_TYPE_DISPLAY = {
    "si": "Site", "bu": "Building", "wi": "Wing", "wa": "Ward", "lvl": "Level", "co": "Corridor", "ro": "Room",
    "bd": "Bed", "ve": "Vehicle", "ho": "House", "ca": "Cabinet", "rd": "Road", "area": "Area", "jdn": "Jurisdiction",
}
CLOSED = {"system": "http://terminology.hl7.org/CodeSystem/v2-0116", "code": "C", "display": "Closed"}
UUID_SYSTEM = "urn:ietf:rfc:3986"
BOUNDARY = "http://hl7.org/fhir/StructureDefinition/location-boundary-geojson"


@dataclass(frozen=True)
class LocationConfig:
    namespace: str
    status_map: Mapping[str, str]
    physical_types: Mapping[str, str]
    default_physical_type: str
    boundaries_in_search: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> LocationConfig:
        raw = dict(settings.plugin_config(PLUGIN))
        unknown = set(raw) - {"status_map", "physical_types", "default_physical_type", "boundaries_in_search"}
        if unknown:
            raise ConfigError(f"plugins.orgunits.location.config: unknown key(s) {', '.join(sorted(unknown))}")
        status_map = {"NEW": "suspended", "VALID": "active", "REJECTED": "inactive", **(raw.get("status_map") or {})}
        if set(status_map) != set(VALIDATION_STATUSES) or not set(status_map.values()) <= {"active", "suspended", "inactive"}:
            raise ConfigError("plugins.orgunits.location.config.status_map: map NEW, VALID and REJECTED "
                              "to active, suspended or inactive")
        physical = {"COUNTRY": "jdn", "REGION": "jdn", "DISTRICT": "jdn", "HF": "bu", **(raw.get("physical_types") or {})}
        default = raw.get("default_physical_type", "si")
        bad = sorted({str(v) for v in [*physical.values(), default]} - set(PHYSICAL_TYPE_DISPLAY))
        if bad:
            raise ConfigError(f"plugins.orgunits.location.config: {', '.join(bad)} not in {PHYSICAL_TYPE} "
                              f"({', '.join(PHYSICAL_TYPE_DISPLAY)})")
        boundaries = raw.get("boundaries_in_search", False)
        if not isinstance(boundaries, bool):
            raise ConfigError("plugins.orgunits.location.config.boundaries_in_search must be true or false")
        return cls(settings.fhir.extension_namespace, MappingProxyType(status_map), MappingProxyType(physical), default,
                   boundaries)

    def url(self, kind: str, name: str) -> str:
        return f"{self.namespace}/fhir/{kind}/{name}"

    @property
    def fingerprint(self) -> str:
        """What the stored bodies depend on besides the data: these settings and this module's code."""
        settings = orjson.dumps([self.namespace, dict(self.status_map), dict(self.physical_types),
                                 self.default_physical_type], option=orjson.OPT_SORT_KEYS)
        with open(__file__, "rb") as source:
            code = source.read()
        return "location:" + hashlib.sha256(settings + code).hexdigest()[:32]


def _date(value: date | str) -> str:
    return value if isinstance(value, str) else value.isoformat()


class LocationMapper:
    def __init__(self, config: LocationConfig) -> None:
        self.config = config
        self.ext = {name: config.url("StructureDefinition", name) for name in
                    ("org-unit-validation-status", "org-unit-type-depth", "source-version", "opening-date", "closing-date")}
        self.type_system = config.url("CodeSystem", "org-unit-type")
        self.alias_system = config.url("sid", "alias")
        self.data_source_system = config.url("sid", "data-source")

    def source_system(self, row: RowMapping) -> str:
        return row["source_system"] or self.config.url("sid", row["source_slug"])

    def __call__(self, row: RowMapping) -> dict[str, Any]:
        cfg, ext = self.config, self.ext
        extensions: list[dict[str, Any]] = [
            {"url": ext["org-unit-validation-status"], "valueCode": row["validation_status"]}]
        if row["type_depth"] is not None:
            extensions.append({"url": ext["org-unit-type-depth"], "valueInteger": row["type_depth"]})
        extensions.append({"url": ext["source-version"], "valueInteger": row["source_version"]})
        if row["opening_date"]:
            extensions.append({"url": ext["opening-date"], "valueDate": _date(row["opening_date"])})
        if row["closing_date"]:
            extensions.append({"url": ext["closing-date"], "valueDate": _date(row["closing_date"])})
        if "geometry" in row and row["geometry"]:  # search pages leave the column out (RowMapping.get is slow)
            extensions.append({"url": BOUNDARY, "valueAttachment": {
                "contentType": "application/geo+json",
                "data": base64.b64encode(orjson.dumps(row["geometry"])).decode("ascii")}})

        aliases = [a for a in (row["aliases"] or ()) if a and a.strip()]
        identifiers: list[dict[str, Any]] = []
        if row["source_ref"]:
            identifiers.append({"use": "official", "system": self.source_system(row), "value": row["source_ref"]})
        if row["uuid"]:
            identifiers.append({"use": "secondary", "system": UUID_SYSTEM, "value": f"urn:uuid:{row['uuid']}"})
        identifiers += [{"use": "secondary", "system": self.alias_system, "value": a} for a in aliases]

        resource: dict[str, Any] = {
            "resourceType": "Location",
            "id": str(row["id"]),
            "meta": {"versionId": str(row["version_id"]), "lastUpdated": instant(row["updated_at"])},
            "extension": extensions,
        }
        if identifiers:
            resource["identifier"] = identifiers
        resource["status"] = cfg.status_map[row["validation_status"]]
        closing = row["closing_date"]
        if closing and _date(closing) <= date.today().isoformat():
            resource["operationalStatus"] = CLOSED
        resource["name"] = row["name"]
        if aliases:
            resource["alias"] = aliases
        resource["mode"] = "instance"
        resource["type"] = [{"coding": [{"system": self.type_system, "code": row["type_code"],
                                         "display": row["type_name"]}], "text": row["type_name"]}]
        physical = cfg.physical_types.get(row["type_category"], cfg.default_physical_type)
        resource["physicalType"] = {"coding": [{"system": PHYSICAL_TYPE, "code": physical,
                                                "display": PHYSICAL_TYPE_DISPLAY[physical]}]}
        if row["latitude"] is not None and row["longitude"] is not None:
            position = {"longitude": row["longitude"], "latitude": row["latitude"]}
            if row["altitude"] is not None:
                position["altitude"] = row["altitude"]
            resource["position"] = position
        resource["managingOrganization"] = {
            "reference": f"Organization/{row['data_source_id']}",  # left out when no Organization provider
            "identifier": {"system": self.data_source_system, "value": row["source_slug"]},
            "display": row["source_name"],
        }
        if row["parent_id"] is not None:
            part_of = {"reference": f"Location/{row['parent_id']}"}
            if row["parent_name"]:
                part_of["display"] = row["parent_name"]
            resource["partOf"] = part_of
        return resource


def _stays_right(snapshot: Mapping[str, Any]) -> bool:
    """A rendering stays right unless the unit closes later (operationalStatus changes that day)."""
    closing = snapshot.get("closing_date")
    return not closing or _date(closing) <= date.today().isoformat()


NO_BOUNDARY = or_(org_unit.c.geometry.is_(None), cast(org_unit.c.geometry, String) == "null")
# closed today (operationalStatus C, as LocationMapper writes it): what `operational-status` matches and the explorer's
# operations count
CLOSED_NOW: ColumnElement[bool] = org_unit.c.closing_date <= func.current_date()
# the name as name search folds it (accents and case: server.normalize), stored with the unit's names: one collation
# for `_sort=name`, the name search and the explorer's tree
NAME_ORDER: ColumnElement[str] = (select(org_unit_name.c.norm)
                                  .where(org_unit_name.c.org_unit_id == org_unit.c.id, org_unit_name.c.position == 0)
                                  .scalar_subquery())


def location_provider(config: LocationConfig) -> ResourceProvider:
    names = Through(org_unit_name, org_unit_name.c.org_unit_id)
    aliases = Through(org_unit_name, org_unit_name.c.org_unit_id, org_unit_name.c.position > 0)
    source_system = func.coalesce(SOURCE_SYSTEM, literal(config.url("sid", "")) + data_source.c.slug)
    statuses = {code: tuple(s for s, c in config.status_map.items() if c == code)
                for code in ("active", "suspended", "inactive")}
    params = (
        SearchParam("name", "string", (StringTarget(org_unit_name.c.norm, org_unit_name.c.text, names),),
                    "Name or alias starts with the value, ignoring case and accents; :exact (whole name, case- and "
                    "accent-sensitive), :contains, :missing; _sort=name ignores accents and case too",
                    HL7_SP + "name", sort=NAME_ORDER),
        SearchParam("status", "token",
                    (TokenTarget(org_unit.c.validation_status, LOCATION_STATUS, MappingProxyType(statuses)),),
                    "active (VALID), suspended (NEW) or inactive (REJECTED); :not, :missing", HL7_SP + "status",
                    sort=case(dict(config.status_map), value=org_unit.c.validation_status)),
        SearchParam("identifier", "token", (
            TokenTarget(org_unit.c.source_ref, source_system, text=org_unit.c.source_ref),
            TokenTarget(org_unit.c.uuid, UUID_SYSTEM, prefix="urn:uuid:"),
            TokenTarget(org_unit_name.c.text, config.url("sid", "alias"), through=aliases, text=org_unit_name.c.text),
        ), "The source reference, the uuid (bare or urn:uuid:) or an alias; value, system|value, |value or system|; "
           ":not, :missing, :text (source reference or alias starts with, ignoring case)", HL7_SP + "identifier"),
        SearchParam("type", "token", (TokenTarget(org_unit_type.c.short_name, config.url("CodeSystem", "org-unit-type"),
                                                  text=org_unit_type.c.name),),
                    "Org unit type short name (code) or system|code; :not, :missing, :text (type name starts with, "
                    "ignoring case)", HL7_SP + "type"),
        SearchParam("partof", "reference", (ReferenceTarget(org_unit.c.parent_id, "Location", path=org_unit.c.path),),
                    "The parent Location: id, Location/id or absolute URL; :missing=true gives the roots (the "
                    "subtree roots of a token limited to subtrees), :below every descendant, :above every ancestor", HL7_SP + "partof"),
        SearchParam("organization", "reference", (ReferenceTarget(source_version.c.data_source_id, "Organization"),),
                    "The managing Organization (the data source): id, Organization/id or absolute URL",
                    HL7_SP + "organization"),
        SearchParam("operational-status", "token",
                    (TokenTarget(case((CLOSED_NOW, literal("C")), else_=None), CLOSED["system"],
                                 MappingProxyType({"C": ("C",)})),),
                    "C (closed: its closing date has passed) or system|C; :not=C and :missing=true: the units not "
                    "closed", HL7_SP + "operational-status"),
        SearchParam("near", "special", (NearTarget(org_unit.c.latitude, org_unit.c.longitude),),
                    "latitude|longitude|distance|units (km default; m, mi): within that great-circle distance, "
                    "sorted by distance unless _sort is given; the distance is in entry.search.extension",
                    HL7_SP + "near"),
    )
    children = Operation(
        "children", "partof",
        "GET [base]/Location/[id]/$children (also /children/): the direct children of a Location as a searchset "
        "Bundle, paged like search and filtered by the same parameters; 404 if the Location does not exist",
        config.url("OperationDefinition", "Location-children"),
    )
    status_map = dict(config.status_map)
    both = frozenset({"instance", "type"})
    counts = Operation(
        "counts", None,
        "GET [base]/Location/$counts?by=type|parent|below&<search>: exact counts of the Locations the search matches "
        "(as the token sees them): per type with its level, closed and status counts; per parent in name order "
        "(_count, _skip); or, for at most 100 matches, the units below each (a Parameters resource)",
        config.url("OperationDefinition", "Location-counts"),
        handler=counter(config.url("CodeSystem", "org-unit-type"), status_map, CLOSED_NOW), levels=frozenset({"type"}))
    exports = tuple(Operation(
        kind, None,
        f"GET [base]/Location/${kind}?<search> (every match) or [base]/Location/[id]/${kind} (the unit and every "
        f"unit below it): {what}, streamed in path order (parents first), as the token sees them; properties=<names> "
        "keeps those, positioned=true the units with a position",
        config.url("OperationDefinition", f"Location-{kind}"),
        handler=exporter(status_map, CLOSED_NOW, kind), levels=both, media_types=frozenset({media}))
        for kind, media, what in (("geojson", GEOJSON, "a GeoJSON FeatureCollection, a Point per positioned unit"),
                                  ("csv", CSV, "CSV, a line per unit with its position")))
    return ResourceProvider(
        resource_type="Location",
        table=org_unit,
        id_column=org_unit.c.id,
        columns=PUBLISHED_COLUMNS,
        search_columns=None if config.boundaries_in_search else
        tuple(c for c in PUBLISHED_COLUMNS if c.key != "geometry"),
        from_clause=PUBLISHED_FROM,
        to_resource=LocationMapper(config),
        search_params=params,
        operations=(children, counts, *exports),
        references={"managingOrganization": "Organization"},
        # callers see their account's served source versions, within their subtree roots (Location/id or identifiers)
        tenancy=Tenancy(org_unit.c.source_version_id, VERSION_PARTITIONS,
                        subtree=Subtree(org_unit.c.path, roots_by="identifier"), first_account=FIRST_ACCOUNT,
                        former_accounts=FORMER_ACCOUNTS,
                        # each kept version by the source version and the place it had while current
                        versions=VersionScope(org_unit_history.c.source_version_id, org_unit_history.c.path)),
        prerendered=Prerendered(org_unit_history.c.body, config.fingerprint, _stays_right,
                                None if config.boundaries_in_search else NO_BOUNDARY,
                                CurrentBodies(org_unit_body.c.org_unit_id, org_unit_body.c.version_id,
                                              org_unit_body.c.body)),
        versioning=Versioning(
            version=org_unit.c.version_id, last_updated=org_unit.c.updated_at, deleted=org_unit.c.deleted,
            history=org_unit_history, history_id=org_unit_history.c.org_unit_id,
            history_version=org_unit_history.c.version_id, history_updated=org_unit_history.c.updated_at,
            history_deleted=org_unit_history.c.deleted, history_snapshot=org_unit_history.c.snapshot,
            high_water=PURGED,
        ),
        documentation="Organization units (country, region, district, health area, facility) as Locations",
    )


@hookimpl
def register_resource_providers(settings: Settings) -> list[ResourceProvider]:
    return [location_provider(LocationConfig.from_settings(settings))]


@hookimpl
def register_migrations(settings: Settings) -> list[Migrations]:
    return [MIGRATIONS]
