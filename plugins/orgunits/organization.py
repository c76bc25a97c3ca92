"""The Organization provider: each data source (Iaso, DHIS2, a ministry's registry...) as a FHIR R4 Organization.

With it enabled, Location.managingOrganization carries `reference: Organization/<id>`, and the Location
`organization` search parameter and `_include=Location:organization` work. Plugin settings
(`plugins.orgunits.organization.config`): `type`, a Coding for Organization.type (default organization-type `govt`).

Organizations keep versions (vread, `_history`, `_since`: mCSD's Update option, ITI-91), written as the data sources
change (history.record_sources): created by a first load, renamed (`data-sources rename`), serving another source
version (a load of a newer one, `versions set-default`: the source-version extension), removed (`data-sources
remove`: a deleted version, 410 on read) or restored by a load.

mCSD's Organization search parameters, and what they mean for a data source:
  type    every data source has the one configured type: `type=govt` (or its system|code) finds them all, another
          code none
  partof  a data source is part of no other Organization (the pyramid is Location.partOf): `partof=[id]` finds
          none, `partof:missing=true` every one
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Integer, cast, func, literal, null
from sqlalchemy.engine import RowMapping

from plugins.orgunits.tables import MIGRATIONS, data_source, data_source_history
from plugins.orgunits.views import FIRST_ACCOUNT, FORMER_ACCOUNTS, PURGED, SOURCE_PARTITIONS, SOURCE_PUBLISHED
from server import (
    ConfigError,
    Migrations,
    ReferenceTarget,
    ResourceProvider,
    SearchParam,
    Settings,
    StringTarget,
    Tenancy,
    TokenTarget,
    VersionScope,
    Versioning,
    hookimpl,
    instant,
)

HL7_SP = "http://hl7.org/fhir/SearchParameter/Organization-"
DEFAULT_TYPE = {"system": "http://terminology.hl7.org/CodeSystem/organization-type", "code": "govt",
                "display": "Government"}

DELETED = data_source.c.removed_at.is_not(None).label("deleted")  # removed: its Organization is deleted
PART_OF = cast(null(), Integer).label("part_of")  # a data source is part of no other Organization


def _type(settings: Settings) -> Mapping[str, str]:
    config = dict(settings.plugin_config("organization"))
    if set(config) - {"type"}:
        raise ConfigError(f"unknown key(s) {', '.join(sorted(set(config) - {'type'}))}; known: type")
    coding = config.get("type", DEFAULT_TYPE)
    if not isinstance(coding, dict) or not {"system", "code"} <= set(coding) or \
            set(coding) - {"system", "code", "display"}:
        raise ConfigError("type must be a Coding: {system, code, display}")
    return coding


def organization_provider(settings: Settings) -> ResourceProvider:
    coding = _type(settings)
    ns = settings.fhir.extension_namespace
    system = f"{ns}/fhir/sid/data-source"

    def to_resource(row: RowMapping) -> dict[str, Any]:
        """A data source's current row, or a version's snapshot (the same keys: views.SOURCE_PUBLISHED, version_id,
        updated_at)."""
        meta = {"versionId": str(row["version_id"])}
        if row["updated_at"] is not None:
            meta["lastUpdated"] = instant(row["updated_at"])
        resource: dict[str, Any] = {"resourceType": "Organization", "id": str(row["id"]), "meta": meta}
        if row["current_version"] is not None:
            resource["extension"] = [{"url": f"{ns}/fhir/StructureDefinition/source-version",
                                      "valueInteger": row["current_version"]}]
        resource["identifier"] = [{"use": "official", "system": system, "value": row["slug"]}]
        resource["active"] = True
        resource["type"] = [{"coding": [dict(coding)]}]
        resource["name"] = row["name"]
        return resource

    kind = f"{coding['system']}|{coding['code']}"
    return ResourceProvider(
        resource_type="Organization",
        table=data_source,
        id_column=data_source.c.id,
        columns=(*SOURCE_PUBLISHED, data_source.c.version_id, data_source.c.updated_at, DELETED, PART_OF),
        to_resource=to_resource,
        # account only: each caller sees its account's data sources, a token limited to subtrees none
        tenancy=Tenancy(data_source.c.id, SOURCE_PARTITIONS, first_account=FIRST_ACCOUNT,
                        former_accounts=FORMER_ACCOUNTS,
                        versions=VersionScope(data_source_history.c.data_source_id)),  # each version its own partition
        versioning=Versioning(
            version=data_source.c.version_id, last_updated=data_source.c.updated_at, deleted=DELETED,
            history=data_source_history, history_id=data_source_history.c.data_source_id,
            history_version=data_source_history.c.version_id, history_updated=data_source_history.c.updated_at,
            history_deleted=data_source_history.c.deleted, history_snapshot=data_source_history.c.snapshot,
            high_water=PURGED,
        ),
        search_params=(
            SearchParam("name", "string", (StringTarget(data_source.c.name_norm, data_source.c.name),),
                        "Name starts with the value, ignoring case and accents; :exact, :contains", HL7_SP + "name",
                        sort=func.lower(data_source.c.name)),
            SearchParam("identifier", "token", (TokenTarget(data_source.c.slug, system, text=data_source.c.slug),),
                        f"The data source slug ({system}|slug)", HL7_SP + "identifier"),
            SearchParam("active", "token", (TokenTarget(literal("true"), codes={"true": ("true",), "false": ()}),),
                        "true (every data source served is active)", HL7_SP + "active"),
            SearchParam("type", "token", (TokenTarget(literal(coding["code"]), coding["system"],
                                                      text=literal(coding.get("display", coding["code"]))),),
                        f"Every data source has the type configured ({kind}, the plugin setting type): "
                        f"type={coding['code']} or {kind} finds them all, another code none; :not, :text",
                        HL7_SP + "type"),
            SearchParam("partof", "reference", (ReferenceTarget(PART_OF, "Organization"),),
                        "A data source is part of no other Organization (the pyramid is Location.partOf): "
                        "partof=[id] finds none, partof:missing=true every one", HL7_SP + "partof"),
        ),
        documentation="The data sources of the org-unit pyramid; each Location's managingOrganization. Versioned: "
                      "a data source created, renamed, serving another source version or removed is a new version",
    )


@hookimpl
def register_resource_providers(settings: Settings) -> list[ResourceProvider]:
    return [organization_provider(settings)]


@hookimpl
def register_migrations(settings: Settings) -> list[Migrations]:
    return [MIGRATIONS]
