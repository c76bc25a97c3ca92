"""org_unit_history.source_version_id and .path: what scoped each kept version while it was current (its account's
source version, its place in the pyramid), so that a caller sees an old version only as it could when it was current
(issue 36: a version of another account, or of another subtree, is never shown).

Back-filled from what each version published: its source version from the snapshot's data source and version
number; its path from its parent then (the parent's path now, the unit's own path when the parent is the same); a
deletion keeps the version it deletes. The current version's are the unit's own.

Revision ID: 0013
Revises: 0012
"""
from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from plugins.orgunits.tables import PATH_TYPE

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

BATCH = 2000

_history = sa.table("org_unit_history", sa.column("org_unit_id", sa.Integer()), sa.column("version_id", sa.Integer()),
                    sa.column("deleted", sa.Boolean()), sa.column("snapshot", sa.JSON()),
                    sa.column("source_version_id", sa.Integer()), sa.column("path", sa.String()))
_unit = sa.table("org_unit", sa.column("id", sa.Integer()), sa.column("parent_id", sa.Integer()),
                 sa.column("path", sa.String()), sa.column("source_version_id", sa.Integer()),
                 sa.column("version_id", sa.Integer()))
_source_version = sa.table("source_version", sa.column("id", sa.Integer()), sa.column("number", sa.Integer()),
                           sa.column("data_source_id", sa.Integer()))


def _scope_of(row: Any, units: dict[int, tuple[Any, Any, Any, Any]], versions: dict[tuple[Any, Any], int],
              before: tuple[Any, Any] | None) -> tuple[Any, Any]:
    """(source version id, path) of one kept version."""
    unit = units.get(row.org_unit_id)
    if unit is not None and unit[3] == row.version_id:  # the current version: the unit's own
        return unit[2], unit[1]
    if row.deleted or not row.snapshot:
        return before if before is not None else ((unit[2], unit[1]) if unit is not None else (None, None))
    snap = row.snapshot
    partition = versions.get((snap.get("data_source_id"), snap.get("source_version")))
    parent = snap.get("parent_id")
    if unit is not None and parent == unit[0]:
        path = unit[1]
    else:
        parent_path = units[parent][1] if parent in units else None
        path = f"{parent_path}{row.org_unit_id}/" if parent_path else (f"/{row.org_unit_id}/" if parent is None
                                                                      else None)
    return partition, path


def upgrade() -> None:
    op.add_column("org_unit_history", sa.Column("source_version_id", sa.Integer(), nullable=True))
    op.add_column("org_unit_history", sa.Column("path", PATH_TYPE, nullable=True))
    conn = op.get_bind()
    versions = {(ds, number): sid for sid, number, ds in conn.execute(
        sa.select(_source_version.c.id, _source_version.c.number, _source_version.c.data_source_id))}
    units = {uid: (parent, path, sv, version) for uid, parent, path, sv, version in conn.execute(
        sa.select(_unit.c.id, _unit.c.parent_id, _unit.c.path, _unit.c.source_version_id, _unit.c.version_id))}
    update = (sa.update(_history).where(_history.c.org_unit_id == sa.bindparam("uid"),
                                        _history.c.version_id == sa.bindparam("vid"))
              .values(source_version_id=sa.bindparam("sv"), path=sa.bindparam("p")))
    last: tuple[Any, Any] | None = None
    before: tuple[Any, Any] | None = None
    while True:
        query = sa.select(_history.c.org_unit_id, _history.c.version_id, _history.c.deleted, _history.c.snapshot)
        if last is not None:
            query = query.where(sa.tuple_(_history.c.org_unit_id, _history.c.version_id) > sa.tuple_(*last))
        rows = conn.execute(query.order_by(_history.c.org_unit_id, _history.c.version_id).limit(BATCH)).all()
        if not rows:
            return
        values = []
        for row in rows:
            if last is None or row.org_unit_id != last[0]:
                before = None
            before = _scope_of(row, units, versions, before)
            values.append({"uid": row.org_unit_id, "vid": row.version_id, "sv": before[0], "p": before[1]})
            last = (row.org_unit_id, row.version_id)
        conn.execute(update, values)


def downgrade() -> None:
    # ALTER TABLE, not a batch: SQLite's batch copies the table and loses its indexes' expressions
    op.execute("ALTER TABLE org_unit_history DROP COLUMN path")
    op.execute("ALTER TABLE org_unit_history DROP COLUMN source_version_id")
