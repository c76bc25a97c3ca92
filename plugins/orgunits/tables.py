"""SQLModel tables of the organization-unit domain (the pyramid that the Location provider publishes)."""
from __future__ import annotations

from datetime import date, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import JSON, Column, Index, LargeBinary, UniqueConstraint, false
from sqlmodel import Field, SQLModel

from server import Migrations, code_point_string, text_index_expression

VALIDATION_STATUSES = ("NEW", "VALID", "REJECTED")
PATH_TYPE = code_point_string()  # byte order for prefix ranges
NORM_TYPE = PATH_TYPE  # search-normalized text: a name prefix is a range of it (server.params.types.string)


DEFAULT_ACCOUNT = "default"


class DataSource(SQLModel, table=True):
    __tablename__ = "data_source"
    __table_args__ = (
        UniqueConstraint("account", "name", name="uq_data_source_account_name"),
        UniqueConstraint("account", "slug", name="uq_data_source_account_slug"),
        Index("ix_data_source_account", "account"),
    )
    id: int | None = Field(default=None, primary_key=True)
    account: str = Field(default=DEFAULT_ACCOUNT, sa_column_kwargs={"server_default": DEFAULT_ACCOUNT})
    name: str
    slug: str
    # the source version served (only its units are published); NULL: the newest version
    default_version_id: int | None = None
    identifier_system: str | None = None
    # its Organization's current version (data_source_history): its number and instant (meta.versionId, lastUpdated)
    version_id: int = Field(default=1, sa_column_kwargs={"server_default": "1"})
    updated_at: datetime | None = None
    # server.params.text.normalize(name), for name search
    name_norm: str | None = Field(default=None, sa_column=Column(NORM_TYPE))
    # `orgunit-fhir data-sources remove`: its units are deleted versions, it is no longer published
    removed_at: datetime | None = None
    last_format: str | None = None  # the load format that last wrote it (a load in another format warns)


class DataSourceHistory(SQLModel, table=True):
    """Every version of every data source's Organization: its published row as JSON (what the Organization provider's
    to_resource takes), or its removal (a deletion). history.record_sources writes them."""

    __tablename__ = "data_source_history"
    __table_args__ = (Index("ix_data_source_history_updated_at", "updated_at", "data_source_id", "version_id"),)
    data_source_id: int = Field(primary_key=True)
    version_id: int = Field(primary_key=True)
    updated_at: datetime
    deleted: bool = False
    snapshot: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))


class SourceVersion(SQLModel, table=True):
    __tablename__ = "source_version"
    __table_args__ = (UniqueConstraint("data_source_id", "number"),)
    id: int | None = Field(default=None, primary_key=True)
    number: int
    data_source_id: int = Field(foreign_key="data_source.id", index=True)


class OrgUnitType(SQLModel, table=True):
    """A type of org unit, each data source's own (migration 0015): what one data source's load decides about its
    types (depth, category, hence physicalType) never changes another's units. A type without a data source (NULL:
    written by a caller that named none) is its account's, used by any of its data sources that has none of its own
    of that code."""

    __tablename__ = "org_unit_type"
    __table_args__ = (UniqueConstraint("data_source_id", "short_name", name="uq_org_unit_type_data_source_short_name"),
                      Index("ix_org_unit_type_account_short_name", "account", "short_name"))
    id: int | None = Field(default=None, primary_key=True)
    account: str = Field(default=DEFAULT_ACCOUNT, sa_column_kwargs={"server_default": DEFAULT_ACCOUNT})
    data_source_id: int | None = None
    name: str
    short_name: str
    category: str
    depth: int | None = None


class OrgUnit(SQLModel, table=True):
    __tablename__ = "org_unit"
    __table_args__ = (
        Index("ix_org_unit_parent_id_id", "parent_id", "id"),
        Index("ix_org_unit_status_id", "validation_status", "id"),
        Index("ix_org_unit_type_id_id", "org_unit_type_id", "id"),
        # a caller's partitions (source versions) in id order: a page of one account walks its own units
        Index("ix_org_unit_source_version_id_id", "source_version_id", "id"),
        # near: the bounding box's latitude band, its longitudes read from the index
        Index("ix_org_unit_latitude_longitude", "latitude", "longitude"),
    )
    id: int | None = Field(default=None, primary_key=True)
    name: str
    uuid: str | None = Field(default=None, index=True)
    source_ref: str | None = Field(default=None, index=True)
    # the system source_ref is published under (a mapping's level `identifier_system`); NULL: the data source's
    identifier_system: str | None = None
    aliases: list[str] | None = Field(default=None, sa_column=Column(JSON))
    validation_status: str = "NEW"
    org_unit_type_id: int = Field(foreign_key="org_unit_type.id")
    parent_id: int | None = Field(default=None, foreign_key="org_unit.id")
    source_version_id: int = Field(foreign_key="source_version.id")
    latitude: float | None = None
    longitude: float | None = None
    altitude: float | None = None
    opening_date: date | None = None
    closing_date: date | None = None
    geometry: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON(none_as_null=True)))  # GeoJSON
    created_at: datetime
    updated_at: datetime = Field(index=True)
    version_id: int = 1
    # a deleted version is current (410 on read, a DELETE in _history): the data source deleted it, or (`withdrawn`)
    # its source version stopped being served
    deleted: bool = False
    # not published because its source version is not served (plugins.orgunits.served): deleted too when it had been
    # published (its withdrawal is a deleted version), else never published (no version of it was ever shown); a
    # switch to its source version publishes it again (a new live version)
    withdrawn: bool = Field(default=False, sa_column_kwargs={"server_default": false()})
    # materialized path of ids, "/<root>/.../<self>/": descendants and ancestors by index (partof:below/above)
    path: str | None = Field(default=None, sa_column=Column(PATH_TYPE, index=True))


class OrgUnitHistory(SQLModel, table=True):
    """Every version of every org unit: the published row as JSON (what to_resource takes), or a deletion."""

    __tablename__ = "org_unit_history"
    __table_args__ = (Index("ix_org_unit_history_updated_at", "updated_at", "org_unit_id", "version_id"),)
    org_unit_id: int = Field(primary_key=True)
    version_id: int = Field(primary_key=True)
    updated_at: datetime
    deleted: bool = False
    snapshot: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    # the version rendered once as compact FHIR JSON (server.storage.prerender), spliced into responses; NULL: render per request
    body: bytes | None = Field(default=None, sa_column=Column(LargeBinary))
    # what scoped the version while it was current (server.VersionScope): its source version (the partition: an
    # account's, served or not) and its materialized path; the current version's follow the unit's (a move of an
    # ancestor changes them) so that a caller sees each version only as it could when it was current
    source_version_id: int | None = None
    path: str | None = Field(default=None, sa_column=Column(PATH_TYPE))


class OrgUnitBody(SQLModel, table=True):
    """The current version's stored body of each org unit (server.CurrentBodies: kept by the engine as it stores the
    bodies): a search page reads it by id, not among every version's snapshot and body in org_unit_history."""

    __tablename__ = "org_unit_body"
    org_unit_id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    version_id: int
    body: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class OrgUnitName(SQLModel, table=True):
    """The name (position 0) and each alias (1..n) of an org unit, with its search-normalized form."""

    __tablename__ = "org_unit_name"
    __table_args__ = (
        # a name prefix is a range of norm; the unit ids come from the index alone
        Index("ix_org_unit_name_norm_unit", "norm", "org_unit_id"),
        Index("ix_org_unit_name_text", "text"),
    )
    org_unit_id: int = Field(foreign_key="org_unit.id", primary_key=True)
    position: int = Field(primary_key=True)
    text: str
    norm: str = Field(sa_column=Column(NORM_TYPE, nullable=False))


class OrgunitSetting(SQLModel, table=True):
    """A setting of the org-unit plugin that the data records, not the settings file: `claimless_account` (the account
    a token without an account claim sees, plugins.orgunits.claimless); `renamed_account:<name>` (the account's new
    name after `accounts rename`: a token still claiming the old one is told)."""

    __tablename__ = "orgunit_setting"
    name: str = Field(primary_key=True)
    value: str


class DirectoryOrganization(SQLModel, table=True):
    """An Organization that is not a data source (a facility's owner, a network, a partner), loaded with
    `orgunit-fhir load organizations` into a data source, whose account sees it. Its id is DIRECTORY_IDS and up: the
    Organization provider serves data sources and these under one type, ids apart (organization.py)."""

    __tablename__ = "directory_organization"
    __table_args__ = (UniqueConstraint("data_source_id", "code", name="uq_directory_organization_code"),)
    id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    data_source_id: int = Field(index=True)
    code: str  # its identifier in the file, of `identifier_system`
    identifier_system: str
    name: str
    name_norm: str | None = Field(default=None, sa_column=Column(NORM_TYPE))
    type_system: str | None = None
    type_code: str | None = None
    type_display: str | None = None
    part_of: int | None = None  # the id of the Organization it is part of (a directory one or a data source)
    version_id: int = 1
    updated_at: datetime
    deleted: bool = False


class DirectoryOrganizationHistory(SQLModel, table=True):
    """Every version of a directory Organization: the row as to_resource takes it (JSON), or its deletion."""

    __tablename__ = "directory_organization_history"
    __table_args__ = (Index("ix_directory_organization_history_updated_at", "updated_at", "organization_id",
                            "version_id"),)
    organization_id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    version_id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    updated_at: datetime
    deleted: bool = False
    data_source_id: int  # the partition this version belonged to (its account)
    snapshot: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))


class OrgUnitPurged(SQLModel, table=True):
    """The last version of every unit a purge erased: its id is never given to another unit, and a unit loaded again
    with that id (a source's own, as Iaso's) continues its versions, so that (id, versionId) names one content for
    ever."""

    __tablename__ = "org_unit_purged"
    org_unit_id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    version_id: int


class OrgunitPurge(SQLModel, table=True):
    """Every purge (`data-sources|accounts remove --purge`): when (its stamp, taken like a version's: the sync point
    never goes back), what it erased; the highest data source id it erased is never given again."""

    __tablename__ = "orgunit_purge"
    id: int | None = Field(default=None, primary_key=True)
    at: datetime
    account: str
    data_source: str
    data_source_id: int
    units: int


data_source = DataSource.__table__
data_source_history = DataSourceHistory.__table__
source_version = SourceVersion.__table__
org_unit_type = OrgUnitType.__table__
org_unit = OrgUnit.__table__
org_unit_name = OrgUnitName.__table__
org_unit_history = OrgUnitHistory.__table__
org_unit_body = OrgUnitBody.__table__
orgunit_setting = OrgunitSetting.__table__
org_unit_purged = OrgUnitPurged.__table__
orgunit_purge = OrgunitPurge.__table__
directory_organization = DirectoryOrganization.__table__
directory_organization_history = DirectoryOrganizationHistory.__table__
# identifier:text, a source reference or an alias starting with a value whatever its case (migration 0009)
Index("ix_org_unit_source_ref_lower", text_index_expression(org_unit.c.source_ref))
Index("ix_org_unit_name_text_lower", text_index_expression(org_unit_name.c.text))
metadata = SQLModel.metadata

# the chain keeps alembic's default version table: databases made before plugins had chains upgrade in place
MIGRATIONS = Migrations("orgunits", Path(__file__).parent / "migrations", metadata, version_table="alembic_version")
