"""data_source.updated_at and name_norm: a data source is published as an Organization

Revision ID: 0003
Revises: 0002
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from server.params.text import normalize

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("data_source", schema=None) as batch_op:
        batch_op.add_column(sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("name_norm", sa.String(), nullable=True))
    bind = op.get_bind()
    for source_id, name in bind.execute(sa.text("SELECT id, name FROM data_source")).all():
        bind.execute(sa.text("UPDATE data_source SET name_norm = :norm WHERE id = :id"),
                     {"norm": normalize(name), "id": source_id})
    op.execute("UPDATE data_source SET updated_at = (SELECT max(u.updated_at) FROM org_unit u "
               "JOIN source_version v ON u.source_version_id = v.id WHERE v.data_source_id = data_source.id)")


def downgrade() -> None:
    with op.batch_alter_table("data_source", schema=None) as batch_op:
        batch_op.drop_column("name_norm")
        batch_op.drop_column("updated_at")
