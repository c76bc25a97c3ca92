"""healthcare services: the service, its locations, its versions

Revision ID: hs0001
Revises:
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "hs0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "healthcare_service",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("name_norm", sa.String(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("category", sa.String(), nullable=True),
        sa.Column("organization_id", sa.Integer(), nullable=True),
        sa.Column("location_ids", sa.JSON(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_healthcare_service_name_norm", "healthcare_service", ["name_norm"])
    op.create_index("ix_healthcare_service_updated_at", "healthcare_service", ["updated_at"])
    op.create_table(
        "healthcare_service_location",
        sa.Column("service_id", sa.Integer(), nullable=False),
        sa.Column("location_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["service_id"], ["healthcare_service.id"]),
        sa.PrimaryKeyConstraint("service_id", "location_id"),
    )
    op.create_index("ix_healthcare_service_location_location_id", "healthcare_service_location", ["location_id"])
    op.create_table(
        "healthcare_service_history",
        sa.Column("service_id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.Column("snapshot", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("service_id", "version_id"),
    )
    op.create_index("ix_healthcare_service_history_updated_at", "healthcare_service_history", ["updated_at"])


def downgrade() -> None:
    op.drop_table("healthcare_service_history")
    op.drop_table("healthcare_service_location")
    op.drop_table("healthcare_service")
