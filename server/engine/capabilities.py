"""The CapabilityStatement, generated once from the registry, then amended by plugins."""
from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import pluggy

from server.access.smart import security
from server.declare.provider import Operation, StaticProvider
from server.declare.registry import Registry
from server.params.types.reference import ReferenceTarget
from server.search.chains import HAS, chain_documentation, has_documentation
from server.settings import Settings

FORMATS = ["application/fhir+json", "json", "application/fhir+xml", "xml"]
RESULT_PARAMETERS = (
    "Result parameters: _count (default {default}, at most {max}), _skip, _sort (comma-separated, '-' descending; "
    "ties broken by id), _total (none, estimate, accurate), _summary (true, data, count, false), _elements, "
    "_include / _revinclude (each with :iterate), _format (json, xml), _pretty. Each search parameter's "
    "documentation lists its modifiers. {unknown} Chained parameters ([reference].[parameter]=) and reverse chaining (_has:...) are listed "
    "in each reference parameter's documentation and in _has; one the server cannot follow is refused (400)."
)

UNKNOWN = {  # fhir.unknown_parameters
    "refuse": "An unknown parameter is refused (400 naming it) unless Prefer: handling=lenient, which ignores it "
              "(a warning OperationOutcome entry in the Bundle says so).",
    "ignore": "Unknown parameters are ignored (a warning OperationOutcome entry in the Bundle names them; listed "
              "nowhere in the self link) unless Prefer: handling=strict, which refuses them (400).",
}


SYNC = (
    "To sync (IHE mCSD ITI-91): send the Bundle's meta.lastUpdated back as the next _since (or _lastUpdated=ge): "
    "it is the sync point, the instant a history or search Bundle is complete up to (every version before it "
    "is committed; a load still running stamps its versions at or after it). Follow the next links of a history "
    "walk to its end: they keep the first page's snapshot (_till, _after), so entries are neither repeated nor "
    "skipped while loads commit. _since takes one instant with its zone (an empty, repeated or zoneless one is "
    "refused); deletions appear only in _history."
)


@functools.cache
def software_version() -> str:
    """The installed distribution's version (read once: its metadata is parsed at each read)."""
    try:
        return version("orgunit-fhir")
    except PackageNotFoundError:
        return "0.0.0"


def _interactions(rtype: str, versioned: bool) -> list[dict[str, str]]:
    gone = "; 410 if deleted" if versioned else ""  # a deletion is known from the versions kept only
    out = [{"code": "read", "documentation": f"GET [base]/{rtype}/[id]{gone}"}]
    if versioned:
        out += [
            {"code": "vread", "documentation": f"GET [base]/{rtype}/[id]/_history/[vid]"},
            {"code": "history-instance", "documentation": f"GET [base]/{rtype}/[id]/_history (_since, _at, _count)"},
            {"code": "history-type", "documentation": f"GET [base]/{rtype}/_history (_since, _at, _count): "
                                                      f"every version, newest first. {SYNC}"},
        ]
    out.append({"code": "search-type", "documentation": f"GET [base]/{rtype}?[parameters]"})
    return out


def _includes(provider: Any, registry: Registry) -> tuple[list[str], list[str]]:
    forward = [f"{provider.resource_type}:{p.name}" for p in provider.params_by_name.values() if p.referenced_types]
    reverse = [r.key for r in registry.referrers(provider.resource_type)]
    return forward, reverse


def _static_resource(provider: StaticProvider) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "type": provider.resource_type,
        "profile": f"http://hl7.org/fhir/StructureDefinition/{provider.resource_type}",
        "interaction": [{"code": "read"}, {"code": "search-type"}],
        "versioning": "no-version",
        "readHistory": False,
        "updateCreate": False,
        "searchParam": [
            {"name": "_id", "definition": "http://hl7.org/fhir/SearchParameter/Resource-id", "type": "token"},
            {"name": "url", "definition": "http://hl7.org/fhir/SearchParameter/conformance-url", "type": "uri",
             "documentation": "The canonical URL, exactly"},
        ],
    }
    if provider.documentation:
        entry["documentation"] = provider.documentation
    return entry


def _trees(param: Any) -> str | None:
    """What :below and :above do on a reference to another type's tree (the engine gives them: the provider's
    documentation may not say so)."""
    trees = sorted({t.hierarchy.resource_type for t in param.targets
                    if isinstance(t, ReferenceTarget) and t.tree is not None})
    if not trees:
        return None
    named = " or ".join(trees)
    return (f"Modifiers :below and :above ({named} hierarchy): :below=[id] matches references to that {named} or to "
            f"one inside it, :above=[id] to that {named} or to one above it.")


def _documentation(param: Any, registry: Registry) -> str | None:
    """A parameter's documentation; a reference parameter's also lists its chains (R4 has no element for them)
    and its hierarchy modifiers on another type's tree (nor for modifiers)."""
    added = [d for d in (_trees(param), chain_documentation(registry.providers, param) if param.referenced_types
                         else None) if d]
    if not added:
        return param.documentation or None
    return " ".join([f"{param.documentation.rstrip('. ')}." if param.documentation else "", *added]).strip()


def _resource(provider: Any, settings: Settings, registry: Registry) -> dict[str, Any]:
    if isinstance(provider, StaticProvider):
        return _static_resource(provider)
    entry: dict[str, Any] = {
        "type": provider.resource_type,
        "profile": provider.profile or f"http://hl7.org/fhir/StructureDefinition/{provider.resource_type}",
        "interaction": _interactions(provider.resource_type, provider.versioning is not None),
        "versioning": "versioned" if provider.versioning is not None else "no-version",
        "readHistory": provider.versioning is not None,
        "updateCreate": False,
        "conditionalCreate": False,
        "conditionalRead": "full-support",
        "conditionalUpdate": False,
        "conditionalDelete": "not-supported",
    }
    if provider.documentation:
        entry["documentation"] = provider.documentation
    params = [
        {k: v for k, v in {"name": p.name, "definition": p.definition, "type": p.type,
                           "documentation": _documentation(p, registry)}.items() if v}
        for p in provider.params_by_name.values()
    ]
    reverse_chaining = has_documentation(registry, provider.resource_type)
    if reverse_chaining:
        params.append({"name": HAS, "type": "special", "documentation": reverse_chaining})
    params += [
        {"name": "_count", "type": "number",
         "documentation": f"Page size; default {settings.api.default_count}, at most {settings.api.max_count} "
                          "(larger values are clamped); 0 returns the total only"},
        {"name": "_skip", "type": "number", "documentation": "Number of matches to skip (paging offset)"},
    ]
    entry["searchParam"] = params
    forward, reverse = _includes(provider, registry)
    if forward:
        entry["searchInclude"] = forward
    if reverse:
        entry["searchRevInclude"] = reverse
    if provider.operations:
        entry["operation"] = [
            {"name": op.name, "definition": op.definition, "documentation": op.documentation}
            for op in provider.operations
        ]
    return entry


def build_capability_statement(registry: Registry, settings: Settings, pm: pluggy.PluginManager,
                               operations: Sequence[Operation] = ()) -> dict[str, Any]:
    """`operations`: the server-wide ones (the `register_operations` hook): those of the system level are listed
    in rest.operation (a plugin lists its type-level ones where it serves them, through its
    update_capability_statement)."""
    now = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    statement: dict[str, Any] = {
        "resourceType": "CapabilityStatement",
        "name": "ReadOnlyFhirServer",
        "title": "Read-only FHIR R4 server",
        "status": "active",
        "experimental": False,
        "date": now,
        "publisher": settings.fhir.publisher or settings.fhir.software_name,
        "description": "Read-only FHIR R4 server: GET and HEAD only; every request needs a JWT bearer token. "
                       "No create/update/delete, no POST [base]/[type]/_search, no transaction.",
        "kind": "instance",
        "software": {"name": settings.fhir.software_name, "version": software_version()},
        "implementation": {"description": "orgunit-fhir"},
        "fhirVersion": "4.0.1",
        "format": list(FORMATS),
        "rest": [{
            "mode": "server",
            "documentation": "Search results are ordered by id unless _sort says otherwise; follow the next link "
                             "to page. " + RESULT_PARAMETERS.format(default=settings.api.default_count,
                                                                   max=settings.api.max_count,
                                                                   unknown=UNKNOWN[settings.fhir.unknown_parameters]),
            "security": security(settings),
        }],
    }
    resources = [_resource(p, settings, registry) for p in registry]
    if resources:
        statement["rest"][0]["resource"] = resources
    system = [{"name": op.name, "definition": op.definition, "documentation": op.documentation}
              for op in operations if "system" in op.levels and not op.path]
    if system:
        statement["rest"][0]["operation"] = system
    pm.hook.update_capability_statement(statement=statement, settings=settings, registry=registry)
    return statement


def for_base(statement: dict[str, Any], base: str) -> dict[str, Any]:
    out = copy.copy(statement)
    out["implementation"] = {**statement["implementation"], "url": base}
    return out
