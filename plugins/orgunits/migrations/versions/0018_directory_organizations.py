"""directory_organization and its history: Organizations that are not data sources (facility owners, networks,
partners), loaded with `orgunit-fhir load organizations` and served by the Organization provider beside the data
sources (issue 41).

Revision ID: 0018
Revises: 0017
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    norm = sa.String().with_variant(sa.String(collation="C"), "postgresql")
    op.create_table(
        "directory_organization",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("data_source_id", sa.Integer(), nullable=False),
        sa.Column("code", sa.String(), nullable=False),
        sa.Column("identifier_system", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("name_norm", norm, nullable=True),
        sa.Column("type_system", sa.String(), nullable=True),
        sa.Column("type_code", sa.String(), nullable=True),
        sa.Column("type_display", sa.String(), nullable=True),
        sa.Column("part_of", sa.Integer(), nullable=True),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("data_source_id", "code", name="uq_directory_organization_code"),
    )
    op.create_index("ix_directory_organization_data_source_id", "directory_organization", ["data_source_id"])
    op.create_table(
        "directory_organization_history",
        sa.Column("organization_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("version_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.Column("data_source_id", sa.Integer(), nullable=False),
        sa.Column("snapshot", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("organization_id", "version_id"),
    )
    op.create_index("ix_directory_organization_history_updated_at", "directory_organization_history",
                    ["updated_at", "organization_id", "version_id"])


def downgrade() -> None:
    op.drop_table("directory_organization_history")
    op.drop_table("directory_organization")
