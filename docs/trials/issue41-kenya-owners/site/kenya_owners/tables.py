"""The owner of each facility: an OrganizationAffiliation per facility (its MFL code the id)."""
from __future__ import annotations

from pathlib import Path

from sqlalchemy import Column, Integer, MetaData, String, Table

from server import Migrations

metadata = MetaData()
affiliation = Table("kenya_owner_affiliation", metadata,
                    Column("id", String(32), primary_key=True),          # the facility's MFL code
                    Column("organization_id", Integer, nullable=False, index=True),  # the owner's Organization
                    Column("location_id", Integer, nullable=False, index=True),      # the facility's Location
                    Column("owner", String, nullable=False))
MIGRATIONS = Migrations("kenya_owners", Path(__file__).parent / "migrations", metadata)
