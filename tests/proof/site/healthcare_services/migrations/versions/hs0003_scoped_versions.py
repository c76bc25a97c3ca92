"""each service version's Locations (its scope per version); practitioners keep versions (a deletion is one)

Revision ID: hs0003
Revises: hs0002
"""
from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "hs0003"
down_revision = "hs0002"
branch_labels = None
depends_on = None

_service_history = sa.table("healthcare_service_history", sa.column("service_id", sa.Integer()),
                            sa.column("version_id", sa.Integer()), sa.column("snapshot", sa.JSON()))
_practitioner = sa.table("hw_practitioner", sa.column("id", sa.Integer()), sa.column("name", sa.String()),
                         sa.column("name_norm", sa.String()))


def upgrade() -> None:
    table = op.create_table(
        "healthcare_service_history_location",
        sa.Column("service_id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("location_id", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("service_id", "version_id", "location_id"),
    )
    op.create_index("ix_healthcare_service_history_location_location_id", "healthcare_service_history_location",
                    ["location_id"])
    conn = op.get_bind()
    rows, before = [], {}
    for sid, vid, snapshot in conn.execute(sa.select(_service_history.c.service_id, _service_history.c.version_id,
                                                     _service_history.c.snapshot)
                                           .order_by(_service_history.c.service_id, _service_history.c.version_id)):
        held = (snapshot or {}).get("location_ids") if snapshot else before.get(sid, [])  # a deletion: the last held
        before[sid] = held or []
        rows += [{"service_id": sid, "version_id": vid, "location_id": i} for i in before[sid]]
    if rows:
        conn.execute(sa.insert(table), rows)
    now = datetime.now(UTC)
    op.add_column("hw_practitioner", sa.Column("version_id", sa.Integer(), nullable=False, server_default="1"))
    op.add_column("hw_practitioner", sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("hw_practitioner", sa.Column("deleted", sa.Boolean(), nullable=False, server_default=sa.false()))
    conn.execute(sa.text("UPDATE hw_practitioner SET updated_at = :now"), {"now": now})
    history = op.create_table(
        "hw_practitioner_history",
        sa.Column("practitioner_id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.Column("snapshot", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("practitioner_id", "version_id"),
    )
    op.create_index("ix_hw_practitioner_history_updated_at", "hw_practitioner_history", ["updated_at"])
    op.create_index("ix_hw_practitioner_updated_at", "hw_practitioner", ["updated_at"])
    people = conn.execute(sa.select(_practitioner.c.id, _practitioner.c.name, _practitioner.c.name_norm)).all()
    if people:
        conn.execute(sa.insert(history), [
            {"practitioner_id": pid, "version_id": 1, "updated_at": now, "deleted": False,
             "snapshot": {"id": pid, "name": name, "name_norm": norm, "version_id": 1, "updated_at": now.isoformat(),
                          "deleted": False}} for pid, name, norm in people])


def downgrade() -> None:
    op.drop_table("hw_practitioner_history")
    op.drop_table("healthcare_service_history_location")
    op.execute("ALTER TABLE hw_practitioner DROP COLUMN deleted")
    op.execute("ALTER TABLE hw_practitioner DROP COLUMN updated_at")
    op.execute("ALTER TABLE hw_practitioner DROP COLUMN version_id")
