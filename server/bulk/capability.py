"""What the CapabilityStatement says of `$export` besides the system operation the engine lists from its
declaration (HL7's definition): it instantiates the Bulk Data server statement and lists the type-level operation of
each exported type (the server's own definition, which the canonical plugin serves at
`[base]/OperationDefinition/export`)."""
from __future__ import annotations

from typing import Any

from server import Settings
from server.engine.export_reader import Registry, exported_types

BULK_DATA = "http://hl7.org/fhir/uv/bulkdata/CapabilityStatement/bulk-data"
EXPORT = "http://hl7.org/fhir/uv/bulkdata/OperationDefinition/export"
DOCUMENTATION = (
    "Bulk Data Access export (STU2; kick-off by GET, `Prefer: respond-async`): `_type`, `_since` (resources changed "
    "after it; deletions listed in the manifest's `deleted` Bundles), `_typeFilter` (`Type?query`, URL-encoded, "
    "several comma-separated or repeated: a type's resources are those matching any of its queries, each a search "
    "of that type as [base]/[type]?query takes it, without result parameters; a query the server cannot apply is "
    "refused), `_outputFormat` (application/fhir+ndjson). Every file reflects the data at `transactionTime`, holds "
    "exactly what the token may read (SMART: the read scope of each type exported), and is downloaded with the same "
    "token; a job is polled at its Content-Location and expires after {expire} s (no DELETE: read-only).")


def own_definition(settings: Settings) -> str:
    return f"{settings.fhir.extension_namespace}/fhir/OperationDefinition/export"


def documentation(settings: Settings) -> str:
    return DOCUMENTATION.format(expire=settings.bulk.expire_seconds)


def add_bulk(statement: dict[str, Any], registry: Registry, settings: Settings) -> None:
    if not settings.bulk.enabled:
        return
    instantiates = statement.setdefault("instantiates", [])
    if BULK_DATA not in instantiates:
        instantiates.append(BULK_DATA)
    exported = set(exported_types(registry))
    for entry in statement["rest"][0].get("resource", ()):
        if entry["type"] in exported:
            entry.setdefault("operation", []).append({
                "name": "export", "definition": own_definition(settings),
                "documentation": f"GET [base]/{entry['type']}/$export: the {entry['type']} resources only "
                                 f"(`_typeFilter={entry['type']}?[query]` narrows them)"})
