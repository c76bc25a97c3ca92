"""An index behind every search parameter: a name prefix is a range of the normalized name (in code-point order
on PostgreSQL: COLLATE "C"), read with the unit ids from one index; `near` reads its bounding box from an index
of positions

Revision ID: 0007
Revises: 0006
"""
from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def _collate(collation: str | None) -> None:
    """The normalized columns' collation (PostgreSQL only: SQLite compares in code-point order already)."""
    if op.get_bind().dialect.name != "postgresql":
        return
    clause = f' COLLATE "{collation}"' if collation else ""
    op.execute(f"ALTER TABLE org_unit_name ALTER COLUMN norm TYPE VARCHAR{clause}")
    op.execute(f"ALTER TABLE data_source ALTER COLUMN name_norm TYPE VARCHAR{clause}")


def upgrade() -> None:
    with op.batch_alter_table("org_unit_name", schema=None) as batch_op:
        batch_op.drop_index("ix_org_unit_name_norm", postgresql_ops={"norm": "text_pattern_ops"})
    _collate("C")
    with op.batch_alter_table("org_unit_name", schema=None) as batch_op:
        batch_op.create_index("ix_org_unit_name_norm_unit", ["norm", "org_unit_id"], unique=False)
    with op.batch_alter_table("org_unit", schema=None) as batch_op:
        batch_op.create_index("ix_org_unit_latitude_longitude", ["latitude", "longitude"], unique=False)
    op.execute("ANALYZE")  # the planners weigh the new indexes with fresh statistics


def downgrade() -> None:
    with op.batch_alter_table("org_unit", schema=None) as batch_op:
        batch_op.drop_index("ix_org_unit_latitude_longitude")
    with op.batch_alter_table("org_unit_name", schema=None) as batch_op:
        batch_op.drop_index("ix_org_unit_name_norm_unit")
    _collate(None)
    with op.batch_alter_table("org_unit_name", schema=None) as batch_op:
        batch_op.create_index("ix_org_unit_name_norm", ["norm"], unique=False,
                              postgresql_ops={"norm": "text_pattern_ops"})
