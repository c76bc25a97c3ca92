"""identifier:text (a source reference or an alias starting with a value, ignoring case) as an index range: indexes
on lower(source_ref) and lower(text), in code-point order (COLLATE "C" on PostgreSQL; SQLite's BINARY), the
expressions a token's :text compares (server.params.types.token)

Revision ID: 0009
Revises: 0008
"""
from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

INDEXES = {"ix_org_unit_source_ref_lower": ("org_unit", "source_ref"),
           "ix_org_unit_name_text_lower": ("org_unit_name", "text")}


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for name, (table, column) in INDEXES.items():
        expression = f'(lower({column}) COLLATE "C")' if postgresql else f"lower({column})"
        op.execute(f"CREATE INDEX {name} ON {table} ({expression})")
    op.execute("ANALYZE")


def downgrade() -> None:
    for name in INDEXES:
        op.execute(f"DROP INDEX {name}")
