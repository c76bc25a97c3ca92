"""The package's own tables (SQLAlchemy Core, its own MetaData) and its own migration chain."""
from __future__ import annotations

from pathlib import Path

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
)

from server import Migrations

metadata = MetaData()

service = Table(
    "healthcare_service", metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("name", String, nullable=False),
    Column("name_norm", String, nullable=False, index=True),  # server.normalize(name): name search
    Column("active", Boolean, nullable=False),
    Column("category", String),  # a code of http://terminology.hl7.org/CodeSystem/service-category
    Column("organization_id", Integer),  # providedBy: Organization/<id>
    Column("location_ids", JSON, nullable=False),  # what to_resource renders; searched through service_location
    Column("version_id", Integer, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, index=True),
    Column("deleted", Boolean, nullable=False),
)

service_location = Table(  # the multi-valued reference HealthcareService.location, one row per Location
    "healthcare_service_location", metadata,
    Column("service_id", Integer, ForeignKey("healthcare_service.id"), primary_key=True),
    Column("location_id", Integer, primary_key=True, index=True),
)

service_history = Table(  # every version: the row as to_resource takes it (JSON), or a deletion
    "healthcare_service_history", metadata,
    Column("service_id", Integer, primary_key=True),
    Column("version_id", Integer, primary_key=True),
    Column("updated_at", DateTime(timezone=True), nullable=False, index=True),
    Column("deleted", Boolean, nullable=False),
    Column("snapshot", JSON),
)

MIGRATIONS = Migrations("legacy_services", Path(__file__).parent / "migrations", metadata)
