"""The Organization provider: each data source (Iaso, DHIS2, a ministry's registry...) as a FHIR R4 Organization,
and beside them the directory Organizations a data source holds (owners, networks, partners: directory.py, `load
organizations`), one row set (a union) of ids apart (directory ones from DIRECTORY_IDS), each scoped by its data
source's account.

With it enabled, Location.managingOrganization carries `reference: Organization/<id>`, and the Location
`organization` search parameter and `_include=Location:organization` work. Plugin settings
(`plugins.orgunits.organization.config`): `type`, a Coding for Organization.type (default organization-type `govt`).

Organizations keep versions (vread, `_history`, `_since`: mCSD's Update option, ITI-91), written as the data sources
change (history.record_sources): created by a first load, renamed (`data-sources rename`), serving another source
version (a load of a newer one, `versions set-default`: the source-version extension), removed (`data-sources
remove`: a deleted version, 410 on read) or restored by a load.

mCSD's Organization search parameters, and what they mean for a data source (a directory Organization has its
own identifier, type and partOf):
  type    every data source has the one configured type: `type=govt` (or its system|code) finds them all
  partof  a data source is part of no other Organization (the pyramid is Location.partOf): `partof:missing=true`
          finds every one
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Integer, String, cast, func, literal, null, select, union_all
from sqlalchemy.engine import RowMapping
from sqlalchemy.sql import Subquery

from plugins.orgunits.tables import (
    MIGRATIONS,
    data_source,
    data_source_history,
    directory_organization,
    directory_organization_history,
)
from plugins.orgunits.views import CURRENT_VERSION, FIRST_ACCOUNT, FORMER_ACCOUNTS, PURGED, SOURCE_PARTITIONS
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
DIRECTORY_IDS = 1_000_000_000  # the first id of a directory Organization: apart from every data source's


def _text(value: str | None) -> Any:
    return literal(value, String) if value is not None else cast(null(), String)


def _rows(system: str, coding: Mapping[str, str]) -> Subquery:
    """Every Organization as one row: the data sources (their kind `source`, of the configured type, part of none)
    and the directory Organizations (`directory`: their own identifier, type and partOf), each with its partition
    (its data source: the account that sees it)."""
    sources = select(data_source.c.id.label("id"), data_source.c.id.label("partition"), _text("source").label("kind"),
                     data_source.c.name.label("name"), data_source.c.name_norm.label("name_norm"),
                     data_source.c.slug.label("code"), _text(system).label("identifier_system"),
                     _text(coding["system"]).label("type_system"), _text(coding["code"]).label("type_code"),
                     _text(coding.get("display")).label("type_display"), cast(null(), Integer).label("part_of"),
                     CURRENT_VERSION, data_source.c.version_id.label("version_id"),
                     data_source.c.updated_at.label("updated_at"), DELETED)
    d = directory_organization
    directory = select(d.c.id, d.c.data_source_id.label("partition"), _text("directory").label("kind"), d.c.name,
                       d.c.name_norm, d.c.code, d.c.identifier_system, d.c.type_system, d.c.type_code, d.c.type_display,
                       d.c.part_of, cast(null(), Integer).label("current_version"), d.c.version_id, d.c.updated_at,
                       d.c.deleted)
    return union_all(sources, directory).subquery("organization_row")


h = directory_organization_history
VERSIONS = union_all(
    select(data_source_history.c.data_source_id.label("id"), data_source_history.c.version_id.label("version_id"),
           data_source_history.c.updated_at.label("updated_at"), data_source_history.c.deleted.label("deleted"),
           data_source_history.c.data_source_id.label("partition"), data_source_history.c.snapshot.label("snapshot")),
    select(h.c.organization_id, h.c.version_id, h.c.updated_at, h.c.deleted, h.c.data_source_id, h.c.snapshot),
).subquery("organization_version")  # every version of both kinds, by the partition it belonged to


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
        """An Organization's current row (organization_row), or a version's snapshot: a data source's (the keys of
        views.SOURCE_PUBLISHED, version_id, updated_at) or a directory Organization's (its row's keys)."""
        meta = {"versionId": str(row["version_id"])}
        if row["updated_at"] is not None:
            meta["lastUpdated"] = instant(row["updated_at"])
        resource: dict[str, Any] = {"resourceType": "Organization", "id": str(row["id"]), "meta": meta}
        if "kind" in row and row["kind"] == "directory":
            resource["identifier"] = [{"use": "official", "system": row["identifier_system"], "value": row["code"]}]
            resource["active"] = True
            if row["type_code"]:
                typed = {"system": row["type_system"], "code": row["type_code"], "display": row["type_display"]}
                resource["type"] = [{"coding": [{k: v for k, v in typed.items() if v}]}]
            resource["name"] = row["name"]
            if row["part_of"] is not None:
                resource["partOf"] = {"reference": f"Organization/{row['part_of']}"}
            return resource
        if row["current_version"] is not None:
            resource["extension"] = [{"url": f"{ns}/fhir/StructureDefinition/source-version",
                                      "valueInteger": row["current_version"]}]
        resource["identifier"] = [{"use": "official", "system": system,
                                   "value": row["code"] if "code" in row else row["slug"]}]
        resource["active"] = True
        resource["type"] = [{"coding": [dict(coding)]}]
        resource["name"] = row["name"]
        return resource

    org = _rows(system, coding)
    kind = f"{coding['system']}|{coding['code']}"
    return ResourceProvider(
        resource_type="Organization",
        table=org,
        id_column=org.c.id,
        columns=tuple(org.c),
        to_resource=to_resource,
        # account only: each caller sees its account's data sources and their directory Organizations, a token
        # limited to subtrees none
        tenancy=Tenancy(org.c.partition, SOURCE_PARTITIONS, first_account=FIRST_ACCOUNT,
                        former_accounts=FORMER_ACCOUNTS,
                        versions=VersionScope(VERSIONS.c.partition)),  # each version its own partition
        versioning=Versioning(
            version=org.c.version_id, last_updated=org.c.updated_at, deleted=org.c.deleted,
            history=VERSIONS, history_id=VERSIONS.c.id, history_version=VERSIONS.c.version_id,
            history_updated=VERSIONS.c.updated_at, history_deleted=VERSIONS.c.deleted,
            history_snapshot=VERSIONS.c.snapshot, high_water=PURGED,
        ),
        search_params=(
            SearchParam("name", "string", (StringTarget(org.c.name_norm, org.c.name),),
                        "Name starts with the value, ignoring case and accents; :exact, :contains", HL7_SP + "name",
                        sort=func.lower(org.c.name)),
            SearchParam("identifier", "token", (TokenTarget(org.c.code, org.c.identifier_system, text=org.c.code),),
                        f"A data source's slug ({system}|slug), a directory Organization's code (its system|code)",
                        HL7_SP + "identifier"),
            SearchParam("active", "token", (TokenTarget(literal("true"), codes={"true": ("true",), "false": ()}),),
                        "true (every Organization served is active)", HL7_SP + "active"),
            SearchParam("type", "token", (TokenTarget(org.c.type_code, org.c.type_system, text=org.c.type_display),),
                        f"A data source has the type configured ({kind}, the plugin setting type); a directory "
                        "Organization its own; :not, :text", HL7_SP + "type"),
            SearchParam("partof", "reference", (ReferenceTarget(org.c.part_of, "Organization"),),
                        "The Organization it is part of: a directory Organization's parent (a data source is part of "
                        "none: the pyramid is Location.partOf); partof:missing=true the top ones", HL7_SP + "partof"),
        ),
        documentation="The data sources of the org-unit pyramid (each Location's managingOrganization) and the "
                      "Organizations loaded beside them (`load organizations`: owners, networks, partners). "
                      "Versioned: a data source created, renamed, serving another source version or removed, and a "
                      "directory Organization changed or dropped by a load, is a new version",
    )


@hookimpl
def register_resource_providers(settings: Settings) -> list[ResourceProvider]:
    return [organization_provider(settings)]


@hookimpl
def register_migrations(settings: Settings) -> list[Migrations]:
    return [MIGRATIONS]
