"""Comparable snapshots of the org-unit tables, the same on SQLite (naive datetimes) and PostgreSQL."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine, Table, func, select

from server.declare.instants import as_utc
from plugins.orgunits.tables import (
    data_source,
    org_unit,
    org_unit_name,
    org_unit_type,
    source_version,
)

TABLES: tuple[Table, ...] = (data_source, source_version, org_unit_type, org_unit, org_unit_name)


def rows(engine: Engine, table: Table) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        result = conn.execute(select(table).order_by(*table.primary_key.columns))
        return [tuple(as_utc(value) if isinstance(value, datetime) else value for value in row) for row in result]


def snapshot(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    return {table.name: rows(engine, table) for table in TABLES}


def without_write_times(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """The snapshot without `updated_at` (the time of the write: two writes of the same data differ in it)."""
    out = {}
    with engine.connect() as conn:
        for table in TABLES:
            columns = [c for c in table.c if c.key != "updated_at"]
            out[table.name] = [tuple(row) for row in conn.execute(select(*columns)
                                                                  .order_by(*table.primary_key.columns))]
    return out


def count(engine: Engine, table: Table) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def units(engine: Engine) -> dict[int, Any]:
    """The org_unit rows without the derived `path` (it follows moves, it is not published data)."""
    columns = [c for c in org_unit.c if c.key != "path"]
    with engine.connect() as conn:
        return {row.id: row for row in conn.execute(select(*columns))}
