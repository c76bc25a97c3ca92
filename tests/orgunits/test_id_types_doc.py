"""plugins/README.md section 6 says which SQL type the ids of the org units' Locations and Organizations have, so
that a package's reference columns match (issue 41, second platform-team trial, finding 4c): its table is checked
against the tables' declarations and a migrated database's columns, on both backends, and the directory
Organizations' first id against the code."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import BigInteger, Integer, create_engine, inspect

from plugins.orgunits.organization import DIRECTORY_IDS
from plugins.orgunits.tables import data_source, directory_organization, org_unit

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "plugins" / "README.md").read_text(encoding="utf-8")
SECTION = GUIDE[GUIDE.index("**The org units' ids are 32-bit integers.**"):]
SECTION = SECTION[:SECTION.index("\n\n**", 10)]
ROWS = {row.split(" | ")[1].strip("`"): row.split(" | ") for row in SECTION.splitlines() if row.startswith("| `")}
TABLES = {"org_unit": org_unit, "data_source": data_source, "directory_organization": directory_organization}


@pytest.mark.parametrize("column, resource, first", [
    pytest.param("org_unit.id", "`Location`", 1, id="location"),
    pytest.param("data_source.id", "`Organization`, a data source", 1, id="data-source"),
    pytest.param("directory_organization.id", "`Organization`, a directory Organization", DIRECTORY_IDS,
                 id="directory-organization"),
])
def test_the_id_types_are_as_documented(column: str, resource: str, first: int, migrated_url: str) -> None:
    row = ROWS[column]
    assert row[0] == f"| {resource}"
    assert row[2].startswith("`Integer` (SQLite `INTEGER`, PostgreSQL `integer`)")
    assert f"from {first:,}" in row[3]
    table, name = column.split(".")
    declared = TABLES[table].c[name].type
    assert isinstance(declared, Integer) and not isinstance(declared, BigInteger)
    engine = create_engine(migrated_url)
    try:
        stored = next(c["type"] for c in inspect(engine).get_columns(table) if c["name"] == name)
    finally:
        engine.dispose()
    assert str(stored.compile(dialect=engine.dialect)) == "INTEGER"  # PostgreSQL: integer (int4), not bigint
    assert first < 2**31 - 1  # within PostgreSQL's integer


def test_the_guide_names_postgresql_s_last_integer() -> None:
    last = re.search(r"`integer` ends at ([0-9,]+)", " ".join(SECTION.split()))
    assert last is not None and int(last.group(1).replace(",", "")) == 2**31 - 1
