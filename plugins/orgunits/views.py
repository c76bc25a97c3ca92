"""The org unit as published: its row joined with type, source version, data source and parent; the data source as
published (an Organization).

The Location provider reads these columns; the writer snapshots them (as JSON) into org_unit_history,
so a historical version renders exactly as it was published (and a data source's into data_source_history).
"""
from __future__ import annotations

from datetime import date, datetime
from typing import Any

from sqlalchemy import ColumnElement, FromClause, Select, and_, func, literal, or_, select, true
from sqlalchemy.orm import aliased

from plugins.orgunits.tables import data_source, org_unit, org_unit_type, orgunit_purge, orgunit_setting, source_version

parent = aliased(org_unit, name="parent")

# the system a unit's source reference is published under: its level's (a mapping's per-level identifier_system),
# else its data source's; NULL: neither names one (the Location provider then derives it from the data source slug)
SOURCE_SYSTEM: ColumnElement[Any] = func.coalesce(org_unit.c.identifier_system, data_source.c.identifier_system)

PUBLISHED_COLUMNS: tuple[ColumnElement[Any], ...] = (
    org_unit.c.id, org_unit.c.name, org_unit.c.uuid, org_unit.c.source_ref, org_unit.c.aliases,
    org_unit.c.validation_status, org_unit.c.parent_id, org_unit.c.latitude, org_unit.c.longitude,
    org_unit.c.altitude, org_unit.c.opening_date, org_unit.c.closing_date, org_unit.c.geometry,
    org_unit.c.updated_at, org_unit.c.version_id, org_unit.c.deleted,
    org_unit_type.c.name.label("type_name"), org_unit_type.c.short_name.label("type_code"),
    org_unit_type.c.category.label("type_category"), org_unit_type.c.depth.label("type_depth"),
    source_version.c.number.label("source_version"), source_version.c.data_source_id,
    data_source.c.name.label("source_name"), data_source.c.slug.label("source_slug"),
    SOURCE_SYSTEM.label("source_system"),
    parent.c.name.label("parent_name"),
)

# outer joins (every unit has a type and a source version) so that the planners drop the joins a query
# does not use (counts, pages of stored bodies)
PUBLISHED_FROM: FromClause = (
    org_unit.outerjoin(org_unit_type, org_unit.c.org_unit_type_id == org_unit_type.c.id)
    .outerjoin(source_version, org_unit.c.source_version_id == source_version.c.id)
    .outerjoin(data_source, source_version.c.data_source_id == data_source.c.id)
    .outerjoin(parent, org_unit.c.parent_id == parent.c.id)
)


_newer = source_version.alias("newer")
# the source version served for each data source: its default, else its newest
SERVED: ColumnElement[bool] = or_(
    data_source.c.default_version_id == source_version.c.id,
    and_(data_source.c.default_version_id.is_(None),
         source_version.c.number == select(func.max(_newer.c.number))
         .where(_newer.c.data_source_id == source_version.c.data_source_id).scalar_subquery()),
)

# a unit its data source holds: live, or withdrawn (its source version is not served); not deleted by the source
# (`--delete-missing`, a removal): what `versions list` counts and what a load compares its file with
SOURCE_HOLDS: ColumnElement[bool] = or_(org_unit.c.deleted.is_(False), org_unit.c.withdrawn.is_(True))


def types_of(data_source_id: int) -> ColumnElement[bool]:
    """The types a data source's units take: its own (each data source has its own: migration 0015), and its
    account's without a data source (written by a caller naming none)."""
    account = select(data_source.c.account).where(data_source.c.id == data_source_id).scalar_subquery()
    return or_(org_unit_type.c.data_source_id == data_source_id,
               and_(org_unit_type.c.data_source_id.is_(None), org_unit_type.c.account == account))


# (partition, account, served) of every source version: the partitions of org units (server.declare.provider.Tenancy);
# a removed data source's versions stay served, so its account's consumers see the deletions in _history; an account
# whose every data source is removed keeps them too (its tokens see the deletions: 410, DELETE entries), and the
# engine shows the deletions of a version not served to its account as well
VERSION_PARTITIONS: Select[Any] = select(source_version.c.id, data_source.c.account, SERVED).select_from(
    source_version.join(data_source, source_version.c.data_source_id == data_source.c.id))

# (partition, account, served) of every data source: the partitions of Organizations; a removed one stays served, so
# its account's consumers see its deletion (410, a DELETE in _history), as they see its units'
SOURCE_PARTITIONS: Select[Any] = select(data_source.c.id, data_source.c.account, true())

# the number of the source version each data source serves (its Organization's source-version extension)
CURRENT_VERSION: ColumnElement[Any] = (select(source_version.c.number)
                                       .where(source_version.c.data_source_id == data_source.c.id, SERVED)
                                       .scalar_subquery().label("current_version"))
# the data source as its Organization publishes it: what each version's snapshot holds (data_source_history), besides
# the version's number and instant (history.record_sources)
SOURCE_PUBLISHED: tuple[ColumnElement[Any], ...] = (data_source.c.id, data_source.c.name, data_source.c.slug,
                                                    CURRENT_VERSION)


CLAIMLESS = "claimless_account"
# the account a token without an account claim sees (Tenancy.first_account): recorded with the first data source
# (migration 0012 recorded the oldest one's), moved by `accounts rename`, never by a removal or a purge: once it holds
# no data source such tokens get 403 naming it, never the next tenant's data (plugins.orgunits.claimless)
FIRST_ACCOUNT: Select[Any] = select(orgunit_setting.c.value).where(orgunit_setting.c.name == CLAIMLESS)

# the instant of the newest purge: what it erased was stamped before it (Versioning.high_water: the sync point never
# goes back; plugins.orgunits.purged)
PURGED: Select[Any] = select(func.max(orgunit_purge.c.at))

RENAMED = "renamed_account:"  # + the old name: the account's name now (`accounts rename`; plugins.orgunits.claimless)
# the names tokens may still claim that no longer name an account, and what became of each (Tenancy.former_accounts:
# such a token gets 403 saying it, never an empty answer)
FORMER_ACCOUNTS: Select[Any] = select(
    func.substr(orgunit_setting.c.name, len(RENAMED) + 1),
    literal("was renamed '") + orgunit_setting.c.value + literal("' (orgunit-fhir accounts rename)"),
).where(orgunit_setting.c.name.startswith(RENAMED))


def snapshot(row: Any, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """A published row (`keys` of it: all when None) as JSON-ready data (dates and instants as ISO strings)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if keys is not None and key not in keys:
            continue
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, date):
            value = value.isoformat()
        out[key] = value
    return out
