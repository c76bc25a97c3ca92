"""org_unit_purged and orgunit_purge: what a purge erased, kept so that nothing is named twice (issue 37: after a
purge, a reload handed out the purged ids again with versionIds from 1, and the sync point went back). A purged
unit's id is never allocated again and its versions continue if a source loads that id again; a purged data source's
id is never given again; the purge's instant keeps the sync point (Bundle.meta.lastUpdated) from going back.

Revision ID: 0016
Revises: 0015
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "org_unit_purged",
        sa.Column("org_unit_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("org_unit_id"),
    )
    op.create_table(
        "orgunit_purge",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("account", sa.String(), nullable=False),
        sa.Column("data_source", sa.String(), nullable=False),
        sa.Column("data_source_id", sa.Integer(), nullable=False),
        sa.Column("units", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("orgunit_purge")
    op.drop_table("org_unit_purged")
