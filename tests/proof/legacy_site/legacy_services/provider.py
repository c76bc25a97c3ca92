"""FHIR R4 HealthcareService, a provider written only against `from server import ...` (entry point
`legacy_services`). A caller sees a service when it may see one of its locations.

Plugin settings (`plugins.legacy_services.config`): none."""
from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import RowMapping

from legacy_services.directory import directory_operation
from legacy_services.loader import SERVICES, SERVICES_JSON
from legacy_services.tables import (
    MIGRATIONS,
    service,
    service_history,
    service_location,
)
from server import (
    Command,
    ConfigError,
    InvalidRequest,
    LoadFormat,
    Migrations,
    Operation,
    OperationCall,
    ReferenceTarget,
    ResourceProvider,
    SearchParam,
    Settings,
    StringTarget,
    Tenancy,
    Through,
    TokenTarget,
    Versioning,
    Via,
    hookimpl,
    instant,
)

HL7_SP = "http://hl7.org/fhir/SearchParameter/HealthcareService-"
CATEGORY = "http://terminology.hl7.org/CodeSystem/service-category"


def to_resource(row: RowMapping) -> dict[str, Any]:
    resource: dict[str, Any] = {"resourceType": "HealthcareService", "id": str(row["id"]),
                                "meta": {"versionId": str(row["version_id"]), "lastUpdated": instant(row["updated_at"])},
                                "active": row["active"]}
    if row["organization_id"] is not None:
        resource["providedBy"] = {"reference": f"Organization/{row['organization_id']}"}
    if row["category"]:
        resource["category"] = [{"coding": [{"system": CATEGORY, "code": row["category"]}]}]
    if row["location_ids"]:
        resource["location"] = [{"reference": f"Location/{i}"} for i in row["location_ids"]]
    resource["name"] = row["name"]
    return resource


LOCATIONS = Through(service_location, service_location.c.service_id)

SEARCH_PARAMS = (
    SearchParam("name", "string", (StringTarget(service.c.name_norm, service.c.name),),
                "Name starts with the value, ignoring case and accents; :exact, :contains", HL7_SP + "name",
                sort=func.lower(service.c.name)),
    SearchParam("active", "token", (TokenTarget(service.c.active, codes={"true": (True,), "false": (False,)}),),
                "true or false", HL7_SP + "active"),
    SearchParam("service-category", "token", (TokenTarget(service.c.category, CATEGORY),),
                f"A code of {CATEGORY}", HL7_SP + "service-category"),
    SearchParam("location", "reference",
                (ReferenceTarget(service_location.c.location_id, "Location", through=LOCATIONS),),
                "One of the Locations where the service is provided: id, Location/id or absolute URL",
                HL7_SP + "location"),
    SearchParam("organization", "reference", (ReferenceTarget(service.c.organization_id, "Organization"),),
                "The Organization that provides the service", HL7_SP + "organization"),
)


def summary(call: OperationCall) -> dict[str, Any]:
    """GET [base]/HealthcareService/$summary: the services the caller sees, active ones, by category."""
    if call.strict and call.parameters:
        raise InvalidRequest("$summary takes no parameter")
    scope = [call.visible] if call.visible is not None else []
    rows = call.connection.execute(select(service.c.category, service.c.active, func.count())
                                   .where(service.c.deleted.is_(False), *scope)
                                   .group_by(service.c.category, service.c.active)).all()
    by_category: dict[str, int] = {}
    for category, _, n in rows:
        by_category[category or "none"] = by_category.get(category or "none", 0) + n
    return {"resourceType": "Parameters", "parameter": [
        {"name": "total", "valueInteger": sum(n for *_, n in rows)},
        {"name": "active", "valueInteger": sum(n for _, active, n in rows if active)},
        *({"name": "category", "part": [{"name": "code", "valueCode": code}, {"name": "count", "valueInteger": n}]}
          for code, n in sorted(by_category.items()))]}


SUMMARY = Operation("summary", None, "GET [base]/HealthcareService/$summary: a Parameters resource with the total "
                    "of services the caller sees, the active ones, and a count per category",
                    "https://legacy-services.example.org/OperationDefinition/HealthcareService-summary",
                    handler=summary, levels=frozenset({"type"}))


def healthcare_service_provider(settings: Settings) -> ResourceProvider:
    if settings.plugin_config("legacy_services"):
        raise ConfigError("this plugin takes no config")
    return ResourceProvider(
        resource_type="HealthcareService",
        table=service,
        id_column=service.c.id,
        columns=tuple(service.c),
        to_resource=to_resource,
        search_params=SEARCH_PARAMS,
        operations=(SUMMARY,),
        references={"providedBy": "Organization"},
        tenancy=Tenancy(via=Via("location", "Location")),  # seen by whoever sees one of its Locations
        versioning=Versioning(
            version=service.c.version_id, last_updated=service.c.updated_at, deleted=service.c.deleted,
            history=service_history, history_id=service_history.c.service_id,
            history_version=service_history.c.version_id, history_updated=service_history.c.updated_at,
            history_deleted=service_history.c.deleted, history_snapshot=service_history.c.snapshot),
        documentation="Healthcare services and the Locations where they are provided",
    )


@hookimpl
def register_resource_providers(settings: Settings) -> list[ResourceProvider]:
    return [healthcare_service_provider(settings)]


@hookimpl
def register_operations(settings: Settings) -> list[Operation]:
    return [directory_operation(to_resource)]


@hookimpl
def register_migrations(settings: Settings) -> list[Migrations]:
    return [MIGRATIONS]


@hookimpl
def register_load_formats(settings: Settings) -> list[LoadFormat]:
    return [SERVICES_JSON]


@hookimpl
def register_commands(settings: Settings) -> list[Command]:
    return [SERVICES]
