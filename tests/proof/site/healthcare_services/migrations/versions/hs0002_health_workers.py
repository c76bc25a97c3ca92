"""health workers: practitioners, their roles, the roles' locations per version

Revision ID: hs0002
Revises: hs0001
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "hs0002"
down_revision = "hs0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hw_practitioner",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("name_norm", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_hw_practitioner_name_norm", "hw_practitioner", ["name_norm"])
    op.create_table(
        "hw_practitioner_role",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("practitioner_id", sa.Integer(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("location_ids", sa.JSON(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["practitioner_id"], ["hw_practitioner.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_hw_practitioner_role_practitioner_id", "hw_practitioner_role", ["practitioner_id"])
    op.create_index("ix_hw_practitioner_role_updated_at", "hw_practitioner_role", ["updated_at"])
    op.create_table(
        "hw_practitioner_role_location",
        sa.Column("role_id", sa.Integer(), nullable=False),
        sa.Column("location_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["role_id"], ["hw_practitioner_role.id"]),
        sa.PrimaryKeyConstraint("role_id", "location_id"),
    )
    op.create_index("ix_hw_practitioner_role_location_location_id", "hw_practitioner_role_location",
                    ["location_id"])
    op.create_table(
        "hw_practitioner_role_history",
        sa.Column("role_id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.Column("snapshot", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("role_id", "version_id"),
    )
    op.create_index("ix_hw_practitioner_role_history_updated_at", "hw_practitioner_role_history", ["updated_at"])
    op.create_table(
        "hw_practitioner_role_history_location",
        sa.Column("role_id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("location_id", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("role_id", "version_id", "location_id"),
    )
    op.create_index("ix_hw_practitioner_role_history_location_location_id", "hw_practitioner_role_history_location",
                    ["location_id"])


def downgrade() -> None:
    op.drop_table("hw_practitioner_role_history_location")
    op.drop_table("hw_practitioner_role_history")
    op.drop_table("hw_practitioner_role_location")
    op.drop_table("hw_practitioner_role")
    op.drop_table("hw_practitioner")
