"""data_source.removed_at (a data source removed with `orgunit-fhir data-sources remove`: its units are deleted
versions, it is no longer an Organization) and data_source.last_format (the load format that last wrote it: a
load in another format says so)

Revision ID: 0008
Revises: 0007
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("data_source", schema=None) as batch_op:
        batch_op.add_column(sa.Column("removed_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("last_format", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("data_source", schema=None) as batch_op:
        batch_op.drop_column("last_format")
        batch_op.drop_column("removed_at")
