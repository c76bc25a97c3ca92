"""data_source.account (tenants) and data_source.default_version_id (the one source version served);
data source names and slugs, and org unit type short names, are unique within an account

Revision ID: 0005
Revises: 0004
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# SQLite's unnamed constraints get these names when batch mode reflects the table
NAMING = {"uq": "uq_%(table_name)s_%(column_0_name)s"}


def _unique_names() -> tuple[str, str, str]:
    if op.get_bind().dialect.name == "postgresql":
        return "data_source_name_key", "data_source_slug_key", "org_unit_type_short_name_key"
    return "uq_data_source_name", "uq_data_source_slug", "uq_org_unit_type_short_name"


def upgrade() -> None:
    name_key, slug_key, type_key = _unique_names()
    with op.batch_alter_table("data_source", schema=None, naming_convention=NAMING) as batch_op:
        batch_op.add_column(sa.Column("account", sa.String(), nullable=False, server_default="default"))
        batch_op.add_column(sa.Column("default_version_id", sa.Integer(), nullable=True))
        batch_op.drop_constraint(name_key, type_="unique")
        batch_op.drop_constraint(slug_key, type_="unique")
        batch_op.create_unique_constraint("uq_data_source_account_name", ["account", "name"])
        batch_op.create_unique_constraint("uq_data_source_account_slug", ["account", "slug"])
        batch_op.create_index("ix_data_source_account", ["account"], unique=False)
    with op.batch_alter_table("org_unit_type", schema=None, naming_convention=NAMING) as batch_op:
        batch_op.add_column(sa.Column("account", sa.String(), nullable=False, server_default="default"))
        batch_op.drop_constraint(type_key, type_="unique")
        batch_op.create_unique_constraint("uq_org_unit_type_account_short_name", ["account", "short_name"])
    # every existing data source and type belongs to the account 'default'
    with op.batch_alter_table("org_unit", schema=None) as batch_op:
        batch_op.drop_index("ix_org_unit_source_version_id")
        batch_op.create_index("ix_org_unit_source_version_id_id", ["source_version_id", "id"], unique=False)


def downgrade() -> None:
    name_key, slug_key, type_key = _unique_names()
    with op.batch_alter_table("org_unit", schema=None) as batch_op:
        batch_op.drop_index("ix_org_unit_source_version_id_id")
        batch_op.create_index("ix_org_unit_source_version_id", ["source_version_id"], unique=False)
    with op.batch_alter_table("org_unit_type", schema=None, naming_convention=NAMING) as batch_op:
        batch_op.drop_constraint("uq_org_unit_type_account_short_name", type_="unique")
        batch_op.create_unique_constraint(type_key, ["short_name"])
        batch_op.drop_column("account")
    with op.batch_alter_table("data_source", schema=None, naming_convention=NAMING) as batch_op:
        batch_op.drop_index("ix_data_source_account")
        batch_op.drop_constraint("uq_data_source_account_slug", type_="unique")
        batch_op.drop_constraint("uq_data_source_account_name", type_="unique")
        batch_op.create_unique_constraint(name_key, ["name"])
        batch_op.create_unique_constraint(slug_key, ["slug"])
        batch_op.drop_column("default_version_id")
        batch_op.drop_column("account")
