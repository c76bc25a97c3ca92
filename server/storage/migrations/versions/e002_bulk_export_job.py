"""(empty) the Bulk Data jobs' table, now the bulk plugin's chain (server/bulk/migrations, revision b001)

This revision created bulk_export_job when Bulk Data was wired into the engine; it stays, empty, so that the
databases recorded at e002 keep a known revision. The bulk chain's b001 finds the table they hold and records it.

Revision ID: e002
Revises: e001
"""
from __future__ import annotations

revision = "e002"
down_revision = "e001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
