"""org_unit_type.data_source_id: each data source has its own types (issue 38: a load of one data source redefined a
type of its account, and so wrote a new version of another data source's units: a partner list's root 'Dispensary'
made every Kenya dispensary a jurisdiction of depth 1). A type used by the units of several data sources is copied,
one per data source, each copy publishing what the type published (no unit changes: no new version); a type no unit
uses stays its account's (no data source).

Revision ID: 0015
Revises: 0014
"""
from __future__ import annotations

from collections import defaultdict

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

NAMING = {"uq": "uq_%(table_name)s_%(column_0_name)s"}

_type = sa.table("org_unit_type", sa.column("id", sa.Integer()), sa.column("account", sa.String()),
                 sa.column("name", sa.String()), sa.column("short_name", sa.String()), sa.column("category", sa.String()),
                 sa.column("depth", sa.Integer()), sa.column("data_source_id", sa.Integer()))
_unit = sa.table("org_unit", sa.column("org_unit_type_id", sa.Integer()), sa.column("source_version_id", sa.Integer()))
_version = sa.table("source_version", sa.column("id", sa.Integer()), sa.column("data_source_id", sa.Integer()))


def upgrade() -> None:
    op.add_column("org_unit_type", sa.Column("data_source_id", sa.Integer(), nullable=True))
    with op.batch_alter_table("org_unit_type", schema=None, naming_convention=NAMING) as batch_op:
        batch_op.drop_constraint("uq_org_unit_type_account_short_name", type_="unique")
    conn = op.get_bind()
    users: dict[int, list[int]] = defaultdict(list)
    for type_id, source_id in conn.execute(
            sa.select(_unit.c.org_unit_type_id, _version.c.data_source_id).distinct()
            .select_from(_unit.join(_version, _version.c.id == _unit.c.source_version_id))
            .order_by(_unit.c.org_unit_type_id, _version.c.data_source_id)):
        users[type_id].append(source_id)
    copy = int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(_type.c.id), 0))).scalar_one())
    for type_id, sources in users.items():
        conn.execute(sa.update(_type).where(_type.c.id == type_id).values(data_source_id=sources[0]))
        row = conn.execute(sa.select(_type).where(_type.c.id == type_id)).one()
        for source_id in sources[1:]:
            copy += 1
            conn.execute(sa.insert(_type).values(id=copy, account=row.account, name=row.name, short_name=row.short_name,
                                                 category=row.category, depth=row.depth, data_source_id=source_id))
            of_source = sa.select(_version.c.id).where(_version.c.data_source_id == source_id)
            conn.execute(sa.update(_unit).where(_unit.c.org_unit_type_id == type_id,
                                                _unit.c.source_version_id.in_(of_source))
                         .values(org_unit_type_id=copy))
    if conn.dialect.name == "postgresql":  # the copies were given ids: the sequence goes on after them
        conn.execute(sa.text("SELECT setval(pg_get_serial_sequence('org_unit_type', 'id'), "
                             "(SELECT coalesce(max(id), 0) + 1 FROM org_unit_type), false)"))
    with op.batch_alter_table("org_unit_type", schema=None, naming_convention=NAMING) as batch_op:
        batch_op.create_unique_constraint("uq_org_unit_type_data_source_short_name", ["data_source_id", "short_name"])
        batch_op.create_index("ix_org_unit_type_account_short_name", ["account", "short_name"], unique=False)


def downgrade() -> None:
    """The copies merge back into the oldest type of their account and code (the units keep what they publish only
    when the copies agreed)."""
    conn = op.get_bind()
    first: dict[tuple[str, str], int] = {}
    for row in conn.execute(sa.select(_type.c.id, _type.c.account, _type.c.short_name).order_by(_type.c.id)):
        kept = first.setdefault((row.account, row.short_name), row.id)
        if kept != row.id:
            conn.execute(sa.update(_unit).where(_unit.c.org_unit_type_id == row.id).values(org_unit_type_id=kept))
            conn.execute(sa.delete(_type).where(_type.c.id == row.id))
    with op.batch_alter_table("org_unit_type", schema=None, naming_convention=NAMING) as batch_op:
        batch_op.drop_index("ix_org_unit_type_account_short_name")
        batch_op.drop_constraint("uq_org_unit_type_data_source_short_name", type_="unique")
        batch_op.create_unique_constraint("uq_org_unit_type_account_short_name", ["account", "short_name"])
    op.execute("ALTER TABLE org_unit_type DROP COLUMN data_source_id")
