"""Canonical resources behind the URLs the server publishes, served read-only from this server:
OperationDefinition/Location-children and OperationDefinition/export (the engine's Bulk Data $export), a
StructureDefinition per extension, CodeSystem/org-unit-type.

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


def children_operation(ns: str) -> dict[str, Any]:
    return {
        "resourceType": "OperationDefinition", "id": "Location-children",
        "url": f"{ns}/fhir/OperationDefinition/Location-children", "version": software_version(),
        "name": "LocationChildren", "title": "Direct children of a Location", "status": "active",
        "kind": "operation", "affectsState": False, "code": "children", "resource": ["Location"],
        "system": False, "type": False, "instance": True,
        "description": "GET [base]/Location/[id]/$children (also [base]/Location/[id]/children/): the Locations "
                       "whose partOf is this one, as a searchset Bundle paged like search; every Location search "
                       "parameter filters among them. 404 if the Location does not exist, 410 if it was deleted.",
        "parameter": [
            {"name": "_count", "use": "in", "min": 0, "max": "1", "type": "integer", "documentation": "Page size"},
            {"name": "_skip", "use": "in", "min": 0, "max": "1", "type": "integer", "documentation": "Offset"},
            {"name": "return", "use": "out", "min": 1, "max": "1", "type": "Bundle",
             "documentation": "searchset Bundle of the direct children"},
        ],
    }


def export_operation(ns: str, settings: Settings) -> dict[str, Any]:
    """The engine's Bulk Data `$export` as this server runs it (HL7's definition, narrowed: kick-off by GET)."""
    def param(name: str, kind: str, text: str, use: str = "in", max_: str = "1") -> dict[str, Any]:
        return {"name": name, "use": use, "min": 0, "max": max_, "type": kind, "documentation": text}

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
            param("_outputFormat", "string", "application/fhir+ndjson (also application/ndjson, ndjson)"),
            param("_since", "instant", "Only the resources changed after this instant; the deleted ones are listed "
                                      "as DELETE entries of transaction Bundles in the manifest's `deleted`"),
            param("_type", "string", "Comma-separated resource types (repeatable); default every exported type",
                  max_="*"),
            param("_typeFilter", "string", "A search of one exported type, `Type?query` URL-encoded (repeatable, or "
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
    operations = [children_operation(ns), *([export_operation(ns, settings)] if settings.bulk.enabled else [])]
    return [
        StaticProvider("OperationDefinition", lambda conn: operations, "Operations this server defines"),
        StaticProvider("StructureDefinition", lambda conn: structures, "The extensions this server writes"),
        StaticProvider("CodeSystem", lambda conn, account: [type_code_system(ns, conn, account)],
                       "Code systems this server defines", per_account=True),
    ]


@hookimpl
def register_migrations(settings: Settings) -> list[Migrations]:
    return [MIGRATIONS]
