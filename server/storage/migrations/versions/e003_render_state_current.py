"""render_state.current_fingerprint: what made a type's current bodies kept apart (server.CurrentBodies)

A release that does not know the kept current bodies claims a type's stored bodies by deleting its row and
inserting one without this column: the kept rows are then unusable (NULL never matches a fingerprint) until a
`render` of a release that knows them makes them again. Existing rows start NULL for the same reason: nothing
proves which settings and code made the rows already kept.

Revision ID: e003
Revises: e002
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "e003"
down_revision = "e002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("render_state") as table:
        table.add_column(sa.Column("current_fingerprint", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("render_state") as table:
        table.drop_column("current_fingerprint")
