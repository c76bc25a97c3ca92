"""Where this server differs from the IHE mCSD Directory it instantiates: what the Directory asks of each resource type
(its CapabilityStatement IHE.mCSD.Directory, the search parameters of ITI-90 Find Matching Care Services and the
Update Option's ITI-91 `_history`), compared with the providers served. The CapabilityStatement's description lists
the result (plugin.py), so it stays true whichever plugins are enabled."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from server import ResourceProvider

MCSD_DIRECTORY = "https://profiles.ihe.net/ITI/mCSD/CapabilityStatement/IHE.mCSD.Directory"


class Served(Protocol):
    """The registry of the providers served (the update_capability_statement hook's `registry`)."""

    @property
    def providers(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class Expected:
    """A resource type the Directory may serve and what it then SHALL support (ITI-90 2:3.90.4.1.2)."""

    resource_type: str
    params: tuple[str, ...]  # search parameters, and "name:modifier" for the modifiers asked for
    chains: tuple[str, ...] = ()  # chained parameters: "reference.parameter"
    includes: tuple[str, ...] = ()  # "_include" values
    revincludes: tuple[str, ...] = ()  # "_revinclude" values


COMMON = ("_id", "_lastUpdated")  # every type (ITI-90 2:3.90.4.1.2.1)
TEXT = ("contains", "exact")  # every string parameter's modifiers (ITI-90 2:3.90.4.1.2.1)

DIRECTORY: tuple[Expected, ...] = (
    Expected("Organization",
             ("active", "identifier", "name", "partof", "partof:above", "partof:below", "type",
              "ihe-mcsd-hierarchy-type", "ihe-mcsd-hierarchy-partof"),
             chains=("partof.identifier", "partof.name", "endpoint.connection-type", "endpoint.payload-type"),
             includes=("Organization:endpoint",),
             revincludes=("Location:organization", "OrganizationAffiliation:participating-organization",
                          "OrganizationAffiliation:primary-organization")),
    Expected("Location",
             ("identifier", "name", "organization", "partof", "partof:above", "partof:below", "status", "type"),
             chains=("partof.identifier", "partof.name", "organization.active", "organization.identifier",
                     "organization.name"),
             includes=("Location:organization",)),
    Expected("Practitioner", ("active", "identifier", "name", "given", "family")),
    Expected("PractitionerRole",
             ("active", "location", "organization", "practitioner", "role", "service", "specialty"),
             chains=("practitioner.identifier", "practitioner.name", "practitioner.given", "practitioner.family",
                     "organization.active", "organization.identifier", "organization.name", "location.status",
                     "location.identifier", "location.name", "service.active", "service.identifier",
                     "service.location", "service.name", "service.organization"),
             includes=("PractitionerRole:practitioner",)),
    Expected("HealthcareService",
             ("active", "identifier", "location", "name", "organization", "service-type"),
             chains=("organization.active", "organization.identifier", "organization.name", "location.status",
                     "location.identifier", "location.name")),
    Expected("Endpoint", ("connection-type", "identifier", "organization", "payload-type", "status")),
    Expected("OrganizationAffiliation",
             ("active", "date", "endpoint", "identifier", "participating-organization", "primary-organization",
              "role"),
             includes=("OrganizationAffiliation:endpoint",)),
)

BY_DESIGN = (
    "read-only by design: no create, update, delete or transaction",
    "searches by GET only: no POST [base]/[type]/_search (ITI-90 asks for both)",
)


def _lacking(providers: Mapping[str, Any], provider: ResourceProvider, expected: Expected) -> list[str]:
    """What the provider lacks of what the Directory asks of its type, one phrase per kind."""
    params = provider.params_by_name
    missing = [name for name in (*COMMON, *expected.params) if ":" not in name and name not in params]
    modifiers = [f"{name}:{modifier}" for name, param in params.items() if param.type == "string" and
                 name in (*COMMON, *expected.params) for modifier in TEXT if modifier not in param.modifiers]
    modifiers += [name for name in expected.params if ":" in name and name.split(":")[0] in params
                  and name.split(":")[1] not in params[name.split(":")[0]].modifiers]
    chains = [chain for chain in expected.chains if not _chains(providers, provider, chain)]
    includes = [value for value in expected.includes if not _refers(providers, value, None)]
    revincludes = [value for value in expected.revincludes if not _refers(providers, value, expected.resource_type)]
    phrases = [f"{what} {', '.join(names)}" for what, names in (
        ("search parameter", missing), ("modifier", modifiers), ("chained parameter", chains),
        ("_include", includes), ("_revinclude", revincludes)) if names]
    if provider.versioning is None:
        phrases.append("_history (the Update Option's history-type with _since)")
    return phrases


def _chains(providers: Mapping[str, Any], provider: ResourceProvider, chain: str) -> bool:
    reference, _, name = chain.partition(".")
    param = provider.params_by_name.get(reference)
    return param is not None and any(isinstance(target := providers.get(rtype), ResourceProvider) and
                                     name in target.params_by_name for rtype in param.referenced_types)


def _refers(providers: Mapping[str, Any], value: str, target: str | None) -> bool:
    """`Type:param` is a reference parameter served (to `target`, when named)."""
    rtype, _, name = value.partition(":")
    provider = providers.get(rtype)
    param = provider.params_by_name.get(name) if isinstance(provider, ResourceProvider) else None
    return param is not None and bool(param.referenced_types) and (target is None or target in param.referenced_types)


def differences(registry: Served) -> list[str]:
    """Every difference from the mCSD Directory: by design, the types not served, and per type served what it lacks."""
    providers = registry.providers
    served = {e.resource_type: p for e in DIRECTORY
              if isinstance(p := providers.get(e.resource_type), ResourceProvider)}
    out = list(BY_DESIGN)
    absent = [e.resource_type for e in DIRECTORY if e.resource_type not in served]
    if absent:
        out.append(f"resource types not served: {', '.join(absent)}")
    for expected in DIRECTORY:
        if expected.resource_type in served:
            lacking = _lacking(providers, served[expected.resource_type], expected)
            if lacking:
                out.append(f"{expected.resource_type}: no {'; no '.join(lacking)}")
    return out


def description(registry: Served) -> str:
    return (
        "Read-only FHIR R4 server publishing a health-system organization-unit pyramid. GET and HEAD only; every "
        "request needs a JWT bearer token. It instantiates the IHE mCSD Directory capability statement, with the "
        "Update Option (ITI-90 search, ITI-91 _history with _since), and differs from it as follows: "
        + "; ".join(differences(registry)) + ".")
