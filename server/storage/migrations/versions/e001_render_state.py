"""render_state: the fingerprint of what rendered each type's stored bodies (server.storage.prerender)

Revision ID: e001
Revises:
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "e001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    # databases made before the engine had its own chain already hold it (the org-unit chain's 0004 made it)
    if not sa.inspect(op.get_bind()).has_table("render_state"):
        op.create_table(
            "render_state",
            sa.Column("resource_type", sa.String(), primary_key=True),
            sa.Column("fingerprint", sa.String(), nullable=False),
        )


def downgrade() -> None:
    op.drop_table("render_state")
