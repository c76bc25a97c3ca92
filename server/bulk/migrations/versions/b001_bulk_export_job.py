"""bulk_export_job: the Bulk Data $export jobs (server.bulk), shared by every worker and replica

The table was the engine chain's revision e002 before Bulk Data became a plugin with its own chain: a database
made then has it already (its engine chain recorded e002, now empty), and this revision only records it.

Revision ID: b001
Revises:
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "b001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("bulk_export_job"):  # made by the engine chain's e002 of before
        return
    op.create_table(
        "bulk_export_job",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("subject", sa.String(), nullable=False),
        sa.Column("account", sa.String(), nullable=False),
        sa.Column("scope", sa.String(), nullable=False),
        sa.Column("request", sa.Text(), nullable=False),
        sa.Column("parameters", sa.JSON(), nullable=False),
        sa.Column("transaction_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("progress", sa.String(), nullable=False),
        sa.Column("exported", sa.Integer(), nullable=False),
        sa.Column("manifest", sa.JSON()),
        sa.Column("worker", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_bulk_export_job_expires_at", "bulk_export_job", ["expires_at"])
    op.create_index("ix_bulk_export_job_status", "bulk_export_job", ["status"])


def downgrade() -> None:
    op.drop_index("ix_bulk_export_job_status", "bulk_export_job")
    op.drop_index("ix_bulk_export_job_expires_at", "bulk_export_job")
    op.drop_table("bulk_export_job")
