"""Search-normalized names again: compatibility characters (fullwidth letters, 'ℌ'...) are now case-folded after
their decomposition, so every backend finds them alike (server.params.text.normalize)

Revision ID: 0006
Revises: 0005
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from server.params.text import normalize

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

WINDOW = 20_000
TABLES = (("org_unit_name", ("org_unit_id", "position"), "text", "norm"),
          ("data_source", ("id",), "name", "name_norm"))


def upgrade() -> None:
    bind = op.get_bind()
    for table, keys, text, norm in TABLES:
        changed: list[dict[str, object]] = []
        first = keys[0]
        low, high = bind.execute(sa.text(f"SELECT min({first}), max({first}) FROM {table}")).one()
        for start in range(low or 0, (high or 0) + 1, WINDOW):  # windows of ids: bounded memory at any size
            rows = bind.execute(sa.text(f"SELECT {', '.join(keys)}, {text}, {norm} FROM {table} "
                                        f"WHERE {first} >= :start AND {first} < :end"),
                                {"start": start, "end": start + WINDOW})
            for row in rows:
                value = normalize(row[-2]) if row[-2] is not None else None
                if value != row[-1]:  # only names with compatibility characters differ
                    changed.append({**{f"k{i}": row[i] for i in range(len(keys))}, "norm": value})
        where = " AND ".join(f"{key} = :k{i}" for i, key in enumerate(keys))
        for start in range(0, len(changed), 5_000):
            bind.execute(sa.text(f"UPDATE {table} SET {norm} = :norm WHERE {where}"), changed[start:start + 5_000])


def downgrade() -> None:
    """The former normalization differs only for compatibility characters; they stay as they are."""
