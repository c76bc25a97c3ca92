"""Search-normalized names again: compatibility characters (fullwidth letters, 'ℌ'...) are now case-folded after
their decomposition, so every backend finds them alike (server.params.text.normalize)

Revision ID: 0006
Revises: 0005
"""
from __future__ import annotations

from alembic import op

from plugins.orgunits.names import renormalize

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    renormalize(op.get_bind())


def downgrade() -> None:
    """The former normalization differs only for compatibility characters; they stay as they are."""
