"""orgunit_setting: settings the data records, first `claimless_account`, the account a token without an account claim
sees. Until now it was derived from the oldest data source (removed ones included), which a purge deletes: the next
tenant's data then went to such tokens. It is recorded once, from that same derivation, so nothing a token sees
changes; a database without data sources records it with its first load.

Revision ID: 0012
Revises: 0011
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

CLAIMLESS = "claimless_account"  # plugins.orgunits.claimless.CLAIMLESS (a migration keeps its own copy)

_data_source = sa.table("data_source", sa.column("id", sa.Integer()), sa.column("account", sa.String()))
_setting = sa.table("orgunit_setting", sa.column("name", sa.String()), sa.column("value", sa.String()))


def upgrade() -> None:
    op.create_table(
        "orgunit_setting",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("value", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    conn = op.get_bind()
    first = conn.execute(sa.select(_data_source.c.account).order_by(_data_source.c.id).limit(1)).scalar()
    if first is not None:
        conn.execute(sa.insert(_setting).values(name=CLAIMLESS, value=first))


def downgrade() -> None:
    op.drop_table("orgunit_setting")
