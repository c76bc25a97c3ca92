"""org_unit.withdrawn: a unit not published because its source version is not served (issue 37: a served-version
switch is published as versions, plugins.orgunits.served). Back-filled without a version: the live units of a source
version not served today were never published (the served version hid them), so they become withdrawn and never
published: no deletion is published for them, and a switch to their version publishes them.

Revision ID: 0014
Revises: 0013
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_unit = sa.table("org_unit", sa.column("id", sa.Integer()), sa.column("source_version_id", sa.Integer()),
                 sa.column("deleted", sa.Boolean()), sa.column("withdrawn", sa.Boolean()))
_version = sa.table("source_version", sa.column("id", sa.Integer()), sa.column("number", sa.Integer()),
                    sa.column("data_source_id", sa.Integer()))
_source = sa.table("data_source", sa.column("id", sa.Integer()), sa.column("default_version_id", sa.Integer()))


def _served() -> sa.Select[tuple[int]]:
    """The source version each data source serves (plugins.orgunits.views.SERVED, as of this revision): its default,
    else its newest."""
    newer = _version.alias("newer")
    newest = (sa.select(sa.func.max(newer.c.number)).where(newer.c.data_source_id == _version.c.data_source_id)
              .scalar_subquery())
    return (sa.select(_version.c.id).select_from(_version.join(_source, _source.c.id == _version.c.data_source_id))
            .where(sa.or_(_source.c.default_version_id == _version.c.id,
                          sa.and_(_source.c.default_version_id.is_(None), _version.c.number == newest))))


def upgrade() -> None:
    # ALTER TABLE, not a batch: SQLite's batch copies the table and loses its indexes' expressions
    op.add_column("org_unit", sa.Column("withdrawn", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.get_bind().execute(sa.update(_unit).where(_unit.c.deleted.is_(False), _unit.c.source_version_id.not_in(_served()))
                          .values(withdrawn=True))


def downgrade() -> None:
    op.execute("ALTER TABLE org_unit DROP COLUMN withdrawn")
