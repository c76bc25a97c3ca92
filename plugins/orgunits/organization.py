"""The Organization provider: each data source (Iaso, DHIS2, a ministry's registry...) as a FHIR R4 Organization.

With it enabled, Location.managingOrganization carries `reference: Organization/<id>`, and the Location
`organization` search parameter and `_include=Location:organization` work. Plugin settings
(`plugins.orgunits.organization.config`): `type`, a Coding for Organization.type (default organization-type `govt`).
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import func, literal, select
from sqlalchemy.engine import RowMapping

from plugins.orgunits.tables import MIGRATIONS, data_source, source_version
from plugins.orgunits.views import FIRST_ACCOUNT, SERVED, SOURCE_PARTITIONS
from server import (
    ConfigError,
    Migrations,
    ResourceProvider,
    SearchParam,
    Settings,
    StringTarget,
    Tenancy,
    TokenTarget,
    hookimpl,
    instant,
)

HL7_SP = "http://hl7.org/fhir/SearchParameter/Organization-"
DEFAULT_TYPE = {"system": "http://terminology.hl7.org/CodeSystem/organization-type", "code": "govt",
                "display": "Government"}

current_version = (select(source_version.c.number)  # the version served
                   .where(source_version.c.data_source_id == data_source.c.id, SERVED)
                   .scalar_subquery().label("current_version"))


def organization_provider(settings: Settings) -> ResourceProvider:
    config = dict(settings.plugin_config("organization"))
    if set(config) - {"type"}:
        raise ConfigError(f"unknown key(s) {', '.join(sorted(set(config) - {'type'}))}; known: type")
    coding = config.get("type", DEFAULT_TYPE)
    if not isinstance(coding, dict) or not {"system", "code"} <= set(coding) or set(coding) - {"system", "code", "display"}:
        raise ConfigError("type must be a Coding: {system, code, display}")
    ns = settings.fhir.extension_namespace
    system = f"{ns}/fhir/sid/data-source"

    def to_resource(row: RowMapping) -> dict[str, Any]:
        resource: dict[str, Any] = {"resourceType": "Organization", "id": str(row["id"])}
        if row["updated_at"] is not None:
            resource["meta"] = {"lastUpdated": instant(row["updated_at"])}
        if row["current_version"] is not None:
            resource["extension"] = [{"url": f"{ns}/fhir/StructureDefinition/source-version",
                                      "valueInteger": row["current_version"]}]
        resource["identifier"] = [{"use": "official", "system": system, "value": row["slug"]}]
        resource["active"] = True
        resource["type"] = [{"coding": [dict(coding)]}]
        resource["name"] = row["name"]
        return resource

    return ResourceProvider(
        resource_type="Organization",
        table=data_source,
        id_column=data_source.c.id,
        columns=(*data_source.c, current_version),
        to_resource=to_resource,
        last_updated=data_source.c.updated_at,
        # account only: each caller sees its account's data sources, a token limited to subtrees none
        tenancy=Tenancy(data_source.c.id, SOURCE_PARTITIONS, first_account=FIRST_ACCOUNT),
        search_params=(
            SearchParam("name", "string", (StringTarget(data_source.c.name_norm, data_source.c.name),),
                        "Name starts with the value, ignoring case and accents; :exact, :contains", HL7_SP + "name",
                        sort=func.lower(data_source.c.name)),
            SearchParam("identifier", "token", (TokenTarget(data_source.c.slug, system, text=data_source.c.slug),),
                        f"The data source slug ({system}|slug)", HL7_SP + "identifier"),
            SearchParam("active", "token", (TokenTarget(literal("true"), codes={"true": ("true",), "false": ()}),),
                        "true (every data source served is active)", HL7_SP + "active"),
        ),
        documentation="The data sources of the org-unit pyramid; each Location's managingOrganization",
    )


@hookimpl
def register_resource_providers(settings: Settings) -> list[ResourceProvider]:
    return [organization_provider(settings)]


@hookimpl
def register_migrations(settings: Settings) -> list[Migrations]:
    return [MIGRATIONS]
