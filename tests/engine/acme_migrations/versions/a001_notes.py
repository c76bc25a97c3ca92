"""acme_note

Revision ID: a001
Revises:
"""
import sqlalchemy as sa
from alembic import op

revision = "a001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("acme_note", sa.Column("id", sa.Integer(), primary_key=True),
                    sa.Column("text", sa.String(), nullable=False))


def downgrade() -> None:
    op.drop_table("acme_note")
