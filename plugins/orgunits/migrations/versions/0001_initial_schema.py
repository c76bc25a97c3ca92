"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-22 01:20:49.077286
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('data_source',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(), nullable=False),
    sa.Column('slug', sa.String(), nullable=False),
    sa.Column('identifier_system', sa.String(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name'),
    sa.UniqueConstraint('slug')
    )
    op.create_table('org_unit_history',
    sa.Column('org_unit_id', sa.Integer(), nullable=False),
    sa.Column('version_id', sa.Integer(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('deleted', sa.Boolean(), nullable=False),
    sa.Column('snapshot', sa.JSON(), nullable=True),
    sa.PrimaryKeyConstraint('org_unit_id', 'version_id')
    )
    with op.batch_alter_table('org_unit_history', schema=None) as batch_op:
        batch_op.create_index('ix_org_unit_history_updated_at', ['updated_at', 'org_unit_id', 'version_id'], unique=False)

    op.create_table('org_unit_type',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(), nullable=False),
    sa.Column('short_name', sa.String(), nullable=False),
    sa.Column('category', sa.String(), nullable=False),
    sa.Column('depth', sa.Integer(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('short_name')
    )
    op.create_table('source_version',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('data_source_id', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['data_source_id'], ['data_source.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('data_source_id', 'number')
    )
    with op.batch_alter_table('source_version', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_source_version_data_source_id'), ['data_source_id'], unique=False)

    op.create_table('org_unit',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(), nullable=False),
    sa.Column('uuid', sa.String(), nullable=True),
    sa.Column('source_ref', sa.String(), nullable=True),
    sa.Column('aliases', sa.JSON(), nullable=True),
    sa.Column('validation_status', sa.String(), nullable=False),
    sa.Column('org_unit_type_id', sa.Integer(), nullable=False),
    sa.Column('parent_id', sa.Integer(), nullable=True),
    sa.Column('source_version_id', sa.Integer(), nullable=False),
    sa.Column('latitude', sa.Float(), nullable=True),
    sa.Column('longitude', sa.Float(), nullable=True),
    sa.Column('altitude', sa.Float(), nullable=True),
    sa.Column('opening_date', sa.Date(), nullable=True),
    sa.Column('closing_date', sa.Date(), nullable=True),
    sa.Column('geometry', sa.JSON(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('version_id', sa.Integer(), nullable=False),
    sa.Column('deleted', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['org_unit_type_id'], ['org_unit_type.id'], ),
    sa.ForeignKeyConstraint(['parent_id'], ['org_unit.id'], ),
    sa.ForeignKeyConstraint(['source_version_id'], ['source_version.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('org_unit', schema=None) as batch_op:
        batch_op.create_index('ix_org_unit_parent_id_id', ['parent_id', 'id'], unique=False)
        batch_op.create_index(batch_op.f('ix_org_unit_source_ref'), ['source_ref'], unique=False)
        batch_op.create_index(batch_op.f('ix_org_unit_source_version_id'), ['source_version_id'], unique=False)
        batch_op.create_index('ix_org_unit_status_id', ['validation_status', 'id'], unique=False)
        batch_op.create_index('ix_org_unit_type_id_id', ['org_unit_type_id', 'id'], unique=False)
        batch_op.create_index(batch_op.f('ix_org_unit_updated_at'), ['updated_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_org_unit_uuid'), ['uuid'], unique=False)

    op.create_table('org_unit_name',
    sa.Column('org_unit_id', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('text', sa.String(), nullable=False),
    sa.Column('norm', sa.String(), nullable=False),
    sa.ForeignKeyConstraint(['org_unit_id'], ['org_unit.id'], ),
    sa.PrimaryKeyConstraint('org_unit_id', 'position')
    )
    with op.batch_alter_table('org_unit_name', schema=None) as batch_op:
        batch_op.create_index('ix_org_unit_name_norm', ['norm'], unique=False, postgresql_ops={'norm': 'text_pattern_ops'})
        batch_op.create_index('ix_org_unit_name_text', ['text'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('org_unit_name', schema=None) as batch_op:
        batch_op.drop_index('ix_org_unit_name_text')
        batch_op.drop_index('ix_org_unit_name_norm', postgresql_ops={'norm': 'text_pattern_ops'})

    op.drop_table('org_unit_name')
    with op.batch_alter_table('org_unit', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_org_unit_uuid'))
        batch_op.drop_index(batch_op.f('ix_org_unit_updated_at'))
        batch_op.drop_index('ix_org_unit_type_id_id')
        batch_op.drop_index('ix_org_unit_status_id')
        batch_op.drop_index(batch_op.f('ix_org_unit_source_version_id'))
        batch_op.drop_index(batch_op.f('ix_org_unit_source_ref'))
        batch_op.drop_index('ix_org_unit_parent_id_id')

    op.drop_table('org_unit')
    with op.batch_alter_table('source_version', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_source_version_data_source_id'))

    op.drop_table('source_version')
    op.drop_table('org_unit_type')
    with op.batch_alter_table('org_unit_history', schema=None) as batch_op:
        batch_op.drop_index('ix_org_unit_history_updated_at')

    op.drop_table('org_unit_history')
    op.drop_table('data_source')
