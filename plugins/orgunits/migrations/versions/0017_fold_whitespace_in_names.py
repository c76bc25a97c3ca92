"""Search-normalized names again: runs of whitespace now fold to one space (server.params.text.normalize), so that
'St.  Mary' (two spaces, as exports often have them) is found by 'St. Mary' (issue 38). The same renormalization as
0006: every stored norm that today's normalization gives otherwise.

Revision ID: 0017
Revises: 0016
"""
from __future__ import annotations

from alembic import op

from plugins.orgunits.names import renormalize

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    renormalize(op.get_bind())


def downgrade() -> None:
    """The former normalization differs only for whitespace runs; they stay folded."""
