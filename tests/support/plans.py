"""Query plans of the statements a request runs: captured as the engine sends them, explained by the database
that runs them (SQLite's EXPLAIN QUERY PLAN, PostgreSQL's EXPLAIN), and the full scans of a table found in them."""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, event

from plugins.orgunits.demo import COUNTRY, REGION, generate_demo
from plugins.orgunits.records import UnitRecord
from plugins.orgunits.writer import ensure_data_source, ensure_source_version, ensure_types, write_units


@dataclass(frozen=True)
class Statement:
    sql: str
    parameters: Any


@contextmanager
def captured(engine: Engine) -> Iterator[list[Statement]]:
    """The statements run on `engine` meanwhile (SQLAlchemy's and driver SQL alike)."""
    seen: list[Statement] = []

    def before(conn: Any, cursor: Any, sql: str, parameters: Any, context: Any, many: bool) -> None:
        seen.append(Statement(sql, parameters))

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", before)


def full_scans(engine: Engine, statement: Statement, table: str) -> list[str]:
    """How the plan of `statement` reads the whole of `table`: a scan of it, or a walk of one of its indexes
    with no condition on the index (a page found by walking the id index and testing every row)."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        if engine.dialect.name == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + statement.sql, statement.parameters)
            details = [row[3] for row in cursor.fetchall()]
            return [d for d in details if re.match(rf"SCAN {re.escape(table)}\b", d)]
        cursor.execute("EXPLAIN (FORMAT JSON) " + statement.sql, statement.parameters)
        plan = cursor.fetchone()[0]
        return [f"{n['Node Type']} on {table}" + (f" using {n['Index Name']}" if "Index Name" in n else "")
                for n in _nodes(plan if isinstance(plan, list) else json.loads(plan))
                if n.get("Relation Name") == table and (n["Node Type"] == "Seq Scan" or (
                    n["Node Type"] in ("Index Scan", "Index Only Scan") and "Index Cond" not in n))]
    finally:
        raw.close()


def tables_read(engine: Engine, statement: Statement) -> set[str]:
    """The tables the plan of `statement` reads in any way (SQLite names an aliased table by its alias)."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        if engine.dialect.name == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + statement.sql, statement.parameters)
            return {m.group(1) for row in cursor.fetchall() if (m := re.match(r"(?:SCAN|SEARCH) (\w+)", row[3]))}
        cursor.execute("EXPLAIN (FORMAT JSON) " + statement.sql, statement.parameters)
        plan = cursor.fetchone()[0]
        return {n["Relation Name"] for n in _nodes(plan if isinstance(plan, list) else json.loads(plan))
                if "Relation Name" in n}
    finally:
        raw.close()


def read_by(engine: Engine, statement: Statement, alias: str) -> list[str]:
    """How the plan of `statement` reads the table aliased `alias`: each such read's index condition (SQLite: its
    SEARCH line's)."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        if engine.dialect.name == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + statement.sql, statement.parameters)
            return [row[3] for row in cursor.fetchall() if re.match(rf"(?:SCAN|SEARCH) {re.escape(alias)}\b", row[3])]
        cursor.execute("EXPLAIN (FORMAT JSON) " + statement.sql, statement.parameters)
        plan = cursor.fetchone()[0]
        return [str(n.get("Index Cond", n["Node Type"]))
                for n in _nodes(plan if isinstance(plan, list) else json.loads(plan)) if n.get("Alias") == alias]
    finally:
        raw.close()


def _nodes(plan: Any) -> Iterator[dict[str, Any]]:
    if isinstance(plan, list):
        for item in plan:
            yield from _nodes(item)
    elif isinstance(plan, dict):
        if "Node Type" in plan:
            yield plan
        for value in plan.values():
            if isinstance(value, list | dict):
                yield from _nodes(value)


SECOND_SOURCE_UNITS = 12


def plan_dataset(engine: Engine, size: int, analyze: Callable[[], None]) -> datetime:
    """The demo pyramid of `size` units, then a second, small data source loaded later (its units are the only
    ones updated since the instant returned); then fresh planner statistics."""
    generate_demo(engine, size=size)
    later = datetime.now().astimezone() + timedelta(days=1)
    with engine.begin() as conn:
        source = ensure_data_source(conn, "Second registry", now=later)
        version = ensure_source_version(conn, source, 1, now=later)
        ensure_types(conn, (COUNTRY, REGION), now=later, data_source_id=source)  # each data source its own types
        first = size + 1
        units = [UnitRecord(first, "Second root", "COUNTRY", "VALID", source_ref="SECOND-ROOT")]
        units += [UnitRecord(first + i, f"Second unit {i}", "REGION", "VALID", source_ref=f"SECOND-{i}",
                             parent_id=first) for i in range(1, SECOND_SOURCE_UNITS)]
        write_units(conn, units, version, later)
    analyze()
    return later
