"""Organizations keep versions: data_source.version_id and data_source_history (each version of a data source's
Organization: its published row as JSON, or its removal). Each data source gets its first version: what it publishes
now, at its updated_at; a removed one a deletion, at its removed_at.

Revision ID: 0011
Revises: 0010
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_data_source = sa.table("data_source", sa.column("id", sa.Integer()), sa.column("name", sa.String()),
                        sa.column("slug", sa.String()), sa.column("default_version_id", sa.Integer()),
                        sa.column("updated_at", sa.DateTime(timezone=True)),
                        sa.column("removed_at", sa.DateTime(timezone=True)))
_source_version = sa.table("source_version", sa.column("id", sa.Integer()), sa.column("number", sa.Integer()),
                           sa.column("data_source_id", sa.Integer()))
_history = sa.table("data_source_history", sa.column("data_source_id", sa.Integer()),
                    sa.column("version_id", sa.Integer()), sa.column("updated_at", sa.DateTime(timezone=True)),
                    sa.column("deleted", sa.Boolean()), sa.column("snapshot", sa.JSON()))


def upgrade() -> None:
    op.add_column("data_source", sa.Column("version_id", sa.Integer(), nullable=False, server_default="1"))
    op.create_table(
        "data_source_history",
        sa.Column("data_source_id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.Column("snapshot", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("data_source_id", "version_id"),
    )
    op.create_index("ix_data_source_history_updated_at", "data_source_history",
                    ["updated_at", "data_source_id", "version_id"], unique=False)
    _first_versions(op.get_bind())


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=timezone.utc) if value.utcoffset() is None else value.astimezone(timezone.utc)


def _first_versions(conn: sa.Connection) -> None:
    """Version 1 of each data source's Organization, as the Organization provider renders it (its name, slug and
    the number of the source version served: the one chosen, else the newest)."""
    numbers: dict[int, dict[int, int]] = {}
    for version_id, number, source_id in conn.execute(sa.select(_source_version.c.id, _source_version.c.number,
                                                                _source_version.c.data_source_id)):
        numbers.setdefault(source_id, {})[version_id] = number
    now = datetime.now(timezone.utc)
    rows: list[dict[str, Any]] = []
    for row in conn.execute(sa.select(_data_source)).mappings():
        versions = numbers.get(row["id"], {})
        served = versions.get(row["default_version_id"]) if row["default_version_id"] in versions else \
            max(versions.values(), default=None)
        removed = _utc(row["removed_at"])
        at = removed or _utc(row["updated_at"]) or now
        snapshot = None if removed is not None else {
            "id": row["id"], "name": row["name"], "slug": row["slug"], "current_version": served, "version_id": 1,
            "updated_at": at.isoformat()}
        rows.append({"data_source_id": row["id"], "version_id": 1, "updated_at": at, "deleted": removed is not None,
                     "snapshot": snapshot})
    for item in rows:
        conn.execute(sa.insert(_history).values(item))
        conn.execute(sa.update(_data_source).where(_data_source.c.id == item["data_source_id"])
                     .values(updated_at=item["updated_at"]))


def downgrade() -> None:
    op.drop_index("ix_data_source_history_updated_at", table_name="data_source_history")
    op.drop_table("data_source_history")
    # ALTER TABLE, not a batch (as 0010): SQLite's batch copies the table
    op.execute("ALTER TABLE data_source DROP COLUMN version_id")
