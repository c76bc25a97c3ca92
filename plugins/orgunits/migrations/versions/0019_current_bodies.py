"""org_unit_body: each org unit's current stored body, read by id where a search page or an include needs it (issue
42: a page of 100 looked each body up among every version's snapshot and body in org_unit_history, half of its
statement). Filled from the bodies the history already holds; the engine keeps it from then on
(server.storage.prerender).

Revision ID: 0019
Revises: 0018
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "org_unit_body",
        sa.Column("org_unit_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("org_unit_id"),
    )
    op.execute("INSERT INTO org_unit_body (org_unit_id, version_id, body) "
               "SELECT org_unit.id, org_unit.version_id, org_unit_history.body FROM org_unit "
               "JOIN org_unit_history ON org_unit_history.org_unit_id = org_unit.id "
               "AND org_unit_history.version_id = org_unit.version_id "
               "WHERE org_unit_history.body IS NOT NULL")


def downgrade() -> None:
    op.drop_table("org_unit_body")
