"""org_unit.identifier_system: the system a unit's source reference is published under when its level names its
own (a mapping's per-level `identifier_system`: county codes apart from facility codes); NULL: the data source's

Revision ID: 0010
Revises: 0009
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("org_unit", sa.Column("identifier_system", sa.String(), nullable=True))


def downgrade() -> None:
    # ALTER TABLE, not a batch: SQLite's batch copies the table and loses the expression indexes of 0009
    op.execute("ALTER TABLE org_unit DROP COLUMN identifier_system")
