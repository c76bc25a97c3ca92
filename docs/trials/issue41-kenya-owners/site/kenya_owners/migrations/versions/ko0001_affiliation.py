"""kenya_owner_affiliation

Revision ID: ko0001
Revises:
"""
import sqlalchemy as sa
from alembic import op

revision = "ko0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("kenya_owner_affiliation",
                    sa.Column("id", sa.String(32), primary_key=True),
                    sa.Column("organization_id", sa.Integer(), nullable=False, index=True),
                    sa.Column("location_id", sa.Integer(), nullable=False, index=True),
                    sa.Column("owner", sa.String(), nullable=False))


def downgrade() -> None:
    op.drop_table("kenya_owner_affiliation")
