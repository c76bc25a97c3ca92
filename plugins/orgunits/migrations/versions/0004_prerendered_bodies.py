"""org_unit_history.body (each version pre-rendered as FHIR JSON) and render_state

Revision ID: 0004
Revises: 0003
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("org_unit_history", schema=None) as batch_op:
        batch_op.add_column(sa.Column("body", sa.LargeBinary(), nullable=True))
    # render_state is the engine's table now (its chain makes it first); databases of before kept it here
    if not sa.inspect(op.get_bind()).has_table("render_state"):
        op.create_table(
            "render_state",
            sa.Column("resource_type", sa.String(), primary_key=True),
            sa.Column("fingerprint", sa.String(), nullable=False),
        )


def downgrade() -> None:
    with op.batch_alter_table("org_unit_history", schema=None) as batch_op:
        batch_op.drop_column("body")
