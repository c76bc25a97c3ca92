"""The CapabilityStatement, generated once from the registry, then amended by plugins."""
from __future__ import annotations

import copy
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import pluggy

from server.registry import Registry
from server.settings import Settings

FORMATS = ["application/fhir+json", "json"]


def software_version() -> str:
    try:
        return version("orgunit-fhir")
    except PackageNotFoundError:
        return "0.0.0"


def _resource(provider: Any, settings: Settings) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "type": provider.resource_type,
        "profile": provider.profile or f"http://hl7.org/fhir/StructureDefinition/{provider.resource_type}",
        "interaction": [
            {"code": "read", "documentation": f"GET [base]/{provider.resource_type}/[id]"},
            {"code": "search-type", "documentation": f"GET [base]/{provider.resource_type}?[parameters]"},
        ],
        "versioning": "versioned",
        "readHistory": False,
        "updateCreate": False,
        "conditionalCreate": False,
        "conditionalRead": "not-supported",
        "conditionalUpdate": False,
        "conditionalDelete": "not-supported",
    }
    if provider.documentation:
        entry["documentation"] = provider.documentation
    params = [
        {k: v for k, v in {"name": p.name, "definition": p.definition, "type": p.type,
                           "documentation": p.documentation}.items() if v}
        for p in provider.search_params
    ]
    params += [
        {"name": "_count", "type": "number",
         "documentation": f"Page size; default {settings.fhir.default_count}, at most {settings.fhir.max_count} "
                          "(larger values are clamped); 0 returns the total only"},
        {"name": "_skip", "type": "number", "documentation": "Number of matches to skip (paging offset)"},
    ]
    entry["searchParam"] = params
    if provider.operations:
        entry["operation"] = [
            {"name": op.name, "definition": op.definition, "documentation": op.documentation}
            for op in provider.operations
        ]
    return entry


def build_capability_statement(registry: Registry, settings: Settings, pm: pluggy.PluginManager) -> dict[str, Any]:
    now = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    statement: dict[str, Any] = {
        "resourceType": "CapabilityStatement",
        "name": "OrgUnitFhirServer",
        "title": "Organization units as FHIR R4 Location resources (read-only)",
        "status": "active",
        "experimental": False,
        "date": now,
        "publisher": settings.fhir.publisher or settings.fhir.software_name,
        "description": "Read-only FHIR R4 server publishing a health-system organization-unit pyramid. "
                       "GET and HEAD only; every request needs a JWT bearer token.",
        "kind": "instance",
        "software": {"name": settings.fhir.software_name, "version": software_version()},
        "implementation": {"description": "orgunit-fhir"},
        "fhirVersion": "4.0.1",
        "format": list(FORMATS),
        "rest": [{
            "mode": "server",
            "documentation": "Search results are ordered by id; follow the next link to page.",
            "security": {
                "cors": bool(settings.server.cors_origins),
                "service": [{
                    "coding": [{"system": "http://terminology.hl7.org/CodeSystem/restful-security-service",
                                "code": "OAuth", "display": "OAuth"}],
                    "text": "Bearer JWT",
                }],
                "description": "Send 'Authorization: Bearer <JWT>'. The token must carry the permission "
                               f"'{settings.auth.permission}' in the '{settings.auth.permission_claim}' claim "
                               "or in a space-separated 'scope'. Missing or invalid tokens get 401, "
                               "tokens without the permission 403.",
            },
        }],
    }
    resources = [_resource(p, settings) for p in registry]
    if resources:
        statement["rest"][0]["resource"] = resources
    pm.hook.update_capability_statement(statement=statement, settings=settings)
    return statement


def for_base(statement: dict[str, Any], base: str) -> dict[str, Any]:
    out = copy.copy(statement)
    out["implementation"] = {**statement["implementation"], "url": base}
    return out
