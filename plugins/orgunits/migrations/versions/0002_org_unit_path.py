"""org_unit.path: the materialized path that answers partof:below / partof:above by index

Revision ID: 0002
Revises: 0001
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

PATH = sa.String().with_variant(sa.String(collation="C"), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("org_unit", schema=None) as batch_op:
        batch_op.add_column(sa.Column("path", PATH, nullable=True))
        batch_op.create_index(batch_op.f("ix_org_unit_path"), ["path"], unique=False)
    op.execute("UPDATE org_unit SET path = '/' || CAST(id AS VARCHAR) || '/' WHERE parent_id IS NULL")
    for _ in range(256):  # one pyramid level per statement
        done = op.get_bind().execute(sa.text(
            "UPDATE org_unit SET path = (SELECT p.path FROM org_unit p WHERE p.id = org_unit.parent_id)"
            " || CAST(id AS VARCHAR) || '/' WHERE path IS NULL AND EXISTS"
            " (SELECT 1 FROM org_unit p WHERE p.id = org_unit.parent_id AND p.path IS NOT NULL)"))
        if not done.rowcount:
            break


def downgrade() -> None:
    with op.batch_alter_table("org_unit", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_org_unit_path"))
        batch_op.drop_column("path")
