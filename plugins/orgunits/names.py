"""Names as stored and searched: stored in Unicode NFC (server.composed), searched by their normalized form
(server.normalize), which a migration recomputes whenever the normalization changes (`renormalize`)."""
from __future__ import annotations

from sqlalchemy import Connection, text

from server import normalize

WINDOW = 20_000
# (table, key columns, text column, normalized column)
NORMALIZED = (("org_unit_name", ("org_unit_id", "position"), "text", "norm"),
              ("data_source", ("id",), "name", "name_norm"))


def renormalize(bind: Connection) -> None:
    """Every stored normalized form that today's normalization gives otherwise, in windows of ids (bounded memory
    at any size): migrations 0006 (compatibility characters) and 0017 (whitespace runs)."""
    for table, keys, source, norm in NORMALIZED:
        changed: list[dict[str, object]] = []
        first = keys[0]
        low, high = bind.execute(text(f"SELECT min({first}), max({first}) FROM {table}")).one()
        for start in range(low or 0, (high or 0) + 1, WINDOW):
            rows = bind.execute(text(f"SELECT {', '.join(keys)}, {source}, {norm} FROM {table} "
                                     f"WHERE {first} >= :start AND {first} < :end"),
                                {"start": start, "end": start + WINDOW})
            for row in rows:
                value = normalize(row[-2]) if row[-2] is not None else None
                if value != row[-1]:
                    changed.append({**{f"k{i}": row[i] for i in range(len(keys))}, "norm": value})
        where = " AND ".join(f"{key} = :k{i}" for i, key in enumerate(keys))
        for start in range(0, len(changed), 5_000):
            bind.execute(text(f"UPDATE {table} SET {norm} = :norm WHERE {where}"), changed[start:start + 5_000])
