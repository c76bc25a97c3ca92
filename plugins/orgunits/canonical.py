"""Canonical resources behind the URLs the server publishes, served read-only from this server:
OperationDefinition/Location-children, -counts, -geojson and -csv (the explorer's), OperationDefinition/export (the
engine's Bulk Data $export), a StructureDefinition per extension, CodeSystem/org-unit-type.

Every one is found at `[base]/<Type>/<id>` and by `[base]/<Type>?url=<canonical>`. (All search parameters
served are HL7's own, so no SearchParameter resources are needed.)
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select

from plugins.orgunits.tables import MIGRATIONS, org_unit_type
from server import Migrations, Settings, StaticProvider, hookimpl, software_version

# name -> (value type, contexts, definition)
EXTENSIONS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "org-unit-validation-status": ("code", ("Location",), "The org unit's validation status in its source: NEW, "
                                   "VALID or REJECTED (mapped to Location.status)"),
    "org-unit-type-depth": ("integer", ("Location",), "Depth of the org unit's type in the pyramid (1 = country)"),
    "source-version": ("integer", ("Location", "Organization"), "Number of the data source version the org unit "
                       "was published from (on Organization: the current version)"),
    "opening-date": ("date", ("Location",), "Date the org unit opened"),
    "closing-date": ("date", ("Location",), "Date the org unit closed (or will close)"),
}


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))


def structure_definition(ns: str, name: str) -> dict[str, Any]:
    value_type, contexts, definition = EXTENSIONS[name]
    url = f"{ns}/fhir/StructureDefinition/{name}"
    return {
        "resourceType": "StructureDefinition", "id": name, "url": url, "version": software_version(),
        "name": _pascal(name), "title": name, "status": "active", "description": definition,
        "fhirVersion": "4.0.1", "kind": "complex-type", "abstract": False,
        "context": [{"type": "element", "expression": c} for c in contexts],
        "type": "Extension", "baseDefinition": "http://hl7.org/fhir/StructureDefinition/Extension",
        "derivation": "constraint",
        "differential": {"element": [
            {"id": "Extension", "path": "Extension", "short": name, "definition": definition, "max": "1"},
            {"id": "Extension.extension", "path": "Extension.extension", "max": "0"},
            {"id": "Extension.url", "path": "Extension.url", "fixedUri": url},
            {"id": "Extension.value[x]", "path": "Extension.value[x]", "min": 1, "type": [{"code": value_type}]},
        ]},
    }


def _operation(ns: str, id_: str, name: str, title: str, code: str, levels: tuple[bool, bool, bool],
               description: str, parameters: list[dict[str, Any]]) -> dict[str, Any]:
    """An OperationDefinition of this server's on Location; `levels`: system, type, instance."""
    system, type_, instance = levels
    return {
        "resourceType": "OperationDefinition", "id": id_, "url": f"{ns}/fhir/OperationDefinition/{id_}",
        "version": software_version(), "name": name, "title": title, "status": "active", "kind": "operation",
        "affectsState": False, "code": code, "resource": ["Location"], "system": system, "type": type_,
        "instance": instance, "description": description, "parameter": parameters,
    }


def children_operation(ns: str) -> dict[str, Any]:
    return _operation(
        ns, "Location-children", "LocationChildren", "Direct children of a Location", "children", (False, False, True),
        "GET [base]/Location/[id]/$children (also [base]/Location/[id]/children/): the Locations whose partOf is this "
        "one, as a searchset Bundle paged like search; every Location search parameter filters among them. 404 if the "
        "Location does not exist, 410 if it was deleted.",
        [
            {"name": "_count", "use": "in", "min": 0, "max": "1", "type": "integer", "documentation": "Page size"},
            {"name": "_skip", "use": "in", "min": 0, "max": "1", "type": "integer", "documentation": "Offset"},
            {"name": "return", "use": "out", "min": 1, "max": "1", "type": "Bundle",
             "documentation": "searchset Bundle of the direct children"},
        ])


def _param(name: str, kind: str, text: str, use: str = "in", max_: str = "1", min_: int = 0) -> dict[str, Any]:
    return {"name": name, "use": use, "min": min_, "max": max_, "type": kind, "documentation": text}


SEARCH_TEXT = "Every Location search parameter selects what is counted or exported, as [base]/Location?<search> does " \
    "(strictly: an unknown parameter is refused, never ignored), within what the token may see."


def counts_operation(ns: str) -> dict[str, Any]:
    return _operation(
        ns, "Location-counts", "LocationCounts", "Exact counts of the Locations a search matches", "counts",
        (False, True, False),
        "GET [base]/Location/$counts?by=...&<search>: how many Locations the search matches (total, exact however "
        "many) and how many per group. " + SEARCH_TEXT,
        [
            _param("by", "code", "type (default): per org-unit type (its level, how many closed, how many of each "
                   "status); parent: per parent, in name order (accents and case ignored), roots first; below: for "
                   "each match (at most 100) the number of Locations below it"),
            _param("_count", "integer", "by=parent: the groups shown (default 100, at most 1000)"),
            _param("_skip", "integer", "by=parent: the groups skipped"),
            _param("total", "integer", "Every match", "out", min_=1),
            _param("groups", "integer", "by=parent: how many groups there are", "out"),
            {"name": "group", "use": "out", "min": 0, "max": "*", "documentation": "One group", "part": [
                _param("type", "Coding", "by=type: the org-unit type", "out"),
                _param("level", "integer", "by=type: the type's depth in the pyramid (1 = country)", "out"),
                _param("parent", "Reference", "by=parent: the parent (none: the group of roots)", "out"),
                _param("unit", "Reference", "by=below: the matching Location", "out"),
                _param("count", "integer", "by=type, by=parent: matches in the group", "out"),
                _param("closed", "integer", "by=type: of which closed (operationalStatus C)", "out"),
                _param("active", "integer", "by=type: of which active", "out"),
                _param("suspended", "integer", "by=type: of which suspended", "out"),
                _param("inactive", "integer", "by=type: of which inactive", "out"),
                _param("below", "integer", "by=below: the Locations below the unit", "out"),
            ]},
        ])


def table_operation(ns: str, kind: str) -> dict[str, Any]:
    """$geojson or $csv: the same rows, the same properties."""
    geo = kind == "geojson"
    return _operation(
        ns, f"Location-{kind}", f"Location{'GeoJson' if geo else 'Csv'}",
        f"The Locations a search matches, or a subtree, as {'GeoJSON' if geo else 'CSV'}", kind, (False, True, True),
        f"GET [base]/Location/${kind}?<search>: every Location the search matches; GET [base]/Location/[id]/${kind}"
        "?<search>: the Location and every Location below it (those matching the search). Streamed in the order of "
        "the pyramid (a parent before its children), "
        + ("a GeoJSON FeatureCollection (application/geo+json): a Feature a Location, its id, a Point (longitude, "
           "latitude, altitude) or a null geometry, and its properties. " if geo else
           "as CSV (text/csv, UTF-8 with a byte order mark, a header line): a line a Location, its id, its "
           "properties, latitude, longitude and altitude. ") +
        "The properties: name, type, type_name, level, status, closed, opening_date, closing_date, code (the source "
        "reference), uuid, parent, parent_name, last_updated, version. " + SEARCH_TEXT,
        [
            _param("properties", "string", "Comma-separated names of the properties to keep (default: all)"),
            _param("positioned", "boolean", "true: only the Locations with a position (the points of a map)"),
            _param("return", "Binary", "The GeoJSON or CSV document", "out", min_=1),
        ])


def export_operation(ns: str, settings: Settings) -> dict[str, Any]:
    """The engine's Bulk Data `$export` as this server runs it (HL7's definition, narrowed: kick-off by GET)."""
    return {
        "resourceType": "OperationDefinition", "id": "export", "url": f"{ns}/fhir/OperationDefinition/export",
        "version": software_version(), "name": "BulkDataExport", "title": "Bulk Data export", "status": "active",
        "kind": "operation", "affectsState": False, "code": "export",
        "base": "http://hl7.org/fhir/uv/bulkdata/OperationDefinition/export",
        "system": True, "type": True, "instance": False,
        "description": "GET [base]/$export (every exported type) or GET [base]/[type]/$export, with Prefer: "
                       "respond-async: 202 and a Content-Location to poll; the completion manifest lists NDJSON "
                       "files (one resource a line, as a read returns it) reflecting the data at its "
                       "transactionTime, limited to what the token may read, downloaded with the same token. "
                       f"A job expires after {settings.bulk.expire_seconds} s; it is not cancelled by DELETE.",
        "parameter": [
            _param("_outputFormat", "string", "application/fhir+ndjson (also application/ndjson, ndjson)"),
            _param("_since", "instant", "Only the resources changed after this instant; the deleted ones are listed "
                                      "as DELETE entries of transaction Bundles in the manifest's `deleted`"),
            _param("_type", "string", "Comma-separated resource types (repeatable); default every exported type",
                  max_="*"),
            _param("_typeFilter", "string", "A search of one exported type, `Type?query` URL-encoded (repeatable, or "
                  "comma-separated): that type's resources are those matching any of its queries, each taken as "
                  "[base]/[type]?query takes it (its search parameters, chains and _has; no result parameter such "
                  "as _count, _sort, _include, _elements or _summary); a type without one is exported whole. A "
                  "query the server cannot apply is refused (400)", max_="*"),
            {"name": "return", "use": "out", "min": 0, "max": "1", "type": "Binary",
             "documentation": "None: the answer is 202 with the job's status URL in Content-Location"},
        ],
    }


def type_code_system(ns: str, conn: Connection, account: str | None = None) -> dict[str, Any]:
    """The types of the caller's account (each account has its own); None (trusted in-process callers):
    every account's, a code used by several listed once."""
    query = select(org_unit_type.c.short_name, org_unit_type.c.name, org_unit_type.c.category,
                   org_unit_type.c.depth).order_by(org_unit_type.c.short_name, org_unit_type.c.account.desc())
    if account is not None:
        query = query.where(org_unit_type.c.account == account)
    rows = list({row[0]: row for row in conn.execute(query).all()}.values())
    system: dict[str, Any] = {
        "resourceType": "CodeSystem", "id": "org-unit-type", "url": f"{ns}/fhir/CodeSystem/org-unit-type",
        "version": software_version(), "name": "OrgUnitType", "title": "Org unit types", "status": "active",
        "description": "The org unit types of the pyramid (Location.type); codes are the types' short names",
        "caseSensitive": True, "content": "complete", "count": len(rows),
    }
    if rows:
        system["concept"] = [
            {"code": code, "display": name,
             "definition": f"{name} (category {category}{f', depth {depth}' if depth is not None else ''})"}
            for code, name, category, depth in rows
        ]
    return system


@hookimpl
def register_resource_providers(settings: Settings) -> list[StaticProvider]:
    ns = settings.fhir.extension_namespace
    structures = [structure_definition(ns, name) for name in EXTENSIONS]
    operations = [children_operation(ns), counts_operation(ns), table_operation(ns, "geojson"),
                  table_operation(ns, "csv"), *([export_operation(ns, settings)] if settings.bulk.enabled else [])]
    return [
        StaticProvider("OperationDefinition", lambda conn: operations, "Operations this server defines"),
        StaticProvider("StructureDefinition", lambda conn: structures, "The extensions this server writes"),
        StaticProvider("CodeSystem", lambda conn, account: [type_code_system(ns, conn, account)],
                       "Code systems this server defines", per_account=True),
    ]


@hookimpl
def register_migrations(settings: Settings) -> list[Migrations]:
    return [MIGRATIONS]
