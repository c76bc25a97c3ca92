from __future__ import annotations

import re
from collections import Counter
from datetime import date
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import aliased

from tests.support.contexts import migrate
from server.settings import parse_settings
from server.storage.db import create_db_engine
from plugins.orgunits.demo import LAT_RANGE, LON_RANGE, generate_demo, level_counts
from plugins.orgunits.tables import (
    data_source,
    org_unit,
    org_unit_name,
    org_unit_type,
    source_version,
)
from server.params.text import normalize
from tests.support.store_snapshot import count, rows, snapshot, without_write_times

UID = re.compile(r"[A-Za-z][A-Za-z0-9]{10}")


def sqlite_engine(tmp_path: Path, name: str) -> Engine:
    engine = create_db_engine(parse_settings({"database": {"url": f"sqlite:///{tmp_path / name}.db"}}))
    migrate(engine)
    return engine


def depth_counts(engine: Engine) -> dict[int, int]:
    with engine.connect() as conn:
        query = (select(org_unit_type.c.depth, func.count())
                 .join(org_unit, org_unit.c.org_unit_type_id == org_unit_type.c.id)
                 .group_by(org_unit_type.c.depth))
        return dict(conn.execute(query).all())


@pytest.mark.parametrize("size", [5, 6, 37, 500, 2000])
def test_exact_size_and_five_levels(engine: Engine, size: int) -> None:
    assert generate_demo(engine, size=size) == size
    assert count(engine, org_unit) == size
    levels = depth_counts(engine)
    assert sorted(levels) == [1, 2, 3, 4, 5]
    assert tuple(levels[depth] for depth in range(1, 6)) == level_counts(size)
    assert levels[1] == 1
    assert levels[5] == max(levels.values())


@pytest.mark.parametrize("size, expected", [
    (5, (1, 1, 1, 1, 1)),
    (6, (1, 1, 1, 1, 2)),
    (2000, (1, 6, 41, 263, 1689)),
    (100_000, (1, 17, 307, 5380, 94295)),
])
def test_level_counts(size: int, expected: tuple[int, ...]) -> None:
    assert level_counts(size) == expected


@pytest.mark.parametrize("size", [5, 6, 7, 10, 50, 333, 1234, 20_000, 1_000_000])
def test_level_counts_grow(size: int) -> None:
    counts = level_counts(size)
    assert sum(counts) == size and counts[0] == 1
    assert all(a <= b for a, b in zip(counts, counts[1:]))


def test_size_below_five_is_refused(engine: Engine) -> None:
    with pytest.raises(ValueError, match="at least 5"):
        generate_demo(engine, size=4)


def test_same_seed_same_rows_other_seed_other_rows(engine: Engine, tmp_path: Path) -> None:
    generate_demo(engine, size=300, seed=7)
    twin, other = sqlite_engine(tmp_path, "twin"), sqlite_engine(tmp_path, "other")
    try:
        generate_demo(twin, size=300, seed=7)
        generate_demo(other, size=300, seed=8)
        assert without_write_times(twin) == without_write_times(engine)  # lastUpdated: when each was written
        assert rows(other, org_unit) != rows(engine, org_unit)
        assert [row.name for row in _named(other)] != [row.name for row in _named(engine)]
    finally:
        twin.dispose()
        other.dispose()


def _named(engine: Engine) -> list:
    with engine.connect() as conn:
        return conn.execute(select(org_unit.c.name).order_by(org_unit.c.id)).all()


def test_rerun_changes_nothing(engine: Engine) -> None:
    generate_demo(engine, size=300)
    before = snapshot(engine)
    generate_demo(engine, size=300)
    assert snapshot(engine) == before


def test_statuses_dates_and_identifiers(engine: Engine) -> None:
    generate_demo(engine, size=2000)
    with engine.connect() as conn:
        units = conn.execute(select(org_unit)).all()
        source = conn.execute(select(data_source)).one()
        version = conn.execute(select(source_version)).one()
    assert (source.name, source.slug, version.number) == ("Demo", "demo", 1)
    assert {unit.source_version_id for unit in units} == {version.id}
    statuses = Counter(unit.validation_status for unit in units)
    assert set(statuses) == {"NEW", "VALID", "REJECTED"}
    assert 0.02 < statuses["NEW"] / 2000 < 0.09
    assert 0.005 < statuses["REJECTED"] / 2000 < 0.04
    closed = [unit for unit in units if unit.closing_date is not None]
    assert 0.01 < len(closed) / 2000 < 0.06
    assert all(unit.closing_date < date(2021, 1, 1) for unit in closed)
    assert all(unit.opening_date < unit.closing_date for unit in closed if unit.opening_date)
    assert sum(unit.opening_date is not None for unit in units) > 200
    assert all(UID.fullmatch(unit.source_ref) for unit in units)
    assert len({unit.source_ref for unit in units}) == 2000
    assert len({unit.uuid for unit in units}) == 2000
    assert len({unit.name for unit in units}) > 1000
    assert any(ch in "éèêçôà" for unit in units for ch in unit.name)
    assert all(unit.version_id == 1 for unit in units)
    assert all(unit.updated_at >= unit.created_at for unit in units)


def test_facility_types_and_coordinates(engine: Engine) -> None:
    generate_demo(engine, size=2000)
    with engine.connect() as conn:
        query = select(org_unit, org_unit_type.c.category, org_unit_type.c.short_name).join(
            org_unit_type, org_unit.c.org_unit_type_id == org_unit_type.c.id)
        units = conn.execute(query).all()
    categories = Counter(unit.category for unit in units)
    assert categories == dict(zip(("COUNTRY", "REGION", "DISTRICT", "AREA", "HF"), level_counts(2000)))
    facility_types = Counter(unit.short_name for unit in units if unit.category == "HF")
    assert len(facility_types) >= 4 and facility_types.most_common(1)[0][0] == "CSPS"
    facilities = [unit for unit in units if unit.category == "HF"]
    assert all(LAT_RANGE[0] <= unit.latitude <= LAT_RANGE[1] and LON_RANGE[0] <= unit.longitude <= LON_RANGE[1]
               for unit in facilities)
    areas = [unit for unit in units if unit.category == "AREA"]
    located = sum(unit.latitude is not None for unit in areas)
    assert 0 < located < len(areas)
    assert all(unit.latitude is None for unit in units if unit.category in ("COUNTRY", "REGION", "DISTRICT"))


def test_upper_levels_have_boundaries_around_their_facilities(engine: Engine) -> None:
    """Country, regions and districts are drawn as areas (a map of a region shows its districts); facilities and
    areas are points only; each district's outline holds its facilities' bounding box, within its padding."""
    generate_demo(engine, size=2000)
    with engine.connect() as conn:
        query = select(org_unit.c.id, org_unit.c.parent_id, org_unit.c.path, org_unit.c.geometry, org_unit.c.latitude,
                       org_unit.c.longitude, org_unit_type.c.category).join(
            org_unit_type, org_unit.c.org_unit_type_id == org_unit_type.c.id)
        units = conn.execute(query).all()
    shaped = Counter(unit.category for unit in units if unit.geometry is not None)
    assert shaped == dict(zip(("COUNTRY", "REGION", "DISTRICT"), level_counts(2000)[:3]))
    for district in (unit for unit in units if unit.category == "DISTRICT"):
        ring = district.geometry["coordinates"][0]
        assert district.geometry["type"] == "Polygon" and ring[0] == ring[-1] and len(ring) >= 4
        inside = [u for u in units if u.category == "HF" and u.path.startswith(district.path)]
        assert inside
        lons, lats = [p[0] for p in ring], [p[1] for p in ring]
        assert min(lons) <= min(u.longitude for u in inside) and max(u.longitude for u in inside) <= max(lons)
        assert min(lats) <= min(u.latitude for u in inside) and max(u.latitude for u in inside) <= max(lats)


def test_every_non_root_has_a_parent_one_level_up(engine: Engine) -> None:
    generate_demo(engine, size=2000)
    parent, parent_type = aliased(org_unit), aliased(org_unit_type)
    with engine.connect() as conn:
        roots = conn.execute(select(org_unit.c.id).where(org_unit.c.parent_id.is_(None))).scalars().all()
        pairs = conn.execute(
            select(org_unit_type.c.depth, parent_type.c.depth)
            .join(org_unit_type, org_unit.c.org_unit_type_id == org_unit_type.c.id)
            .outerjoin(parent, parent.c.id == org_unit.c.parent_id)
            .outerjoin(parent_type, parent.c.org_unit_type_id == parent_type.c.id)
            .where(org_unit.c.parent_id.is_not(None))).all()
    assert roots == [1]
    assert len(pairs) == 1999
    assert all(parent_depth == depth - 1 for depth, parent_depth in pairs)


def test_names_table(engine: Engine) -> None:
    generate_demo(engine, size=2000)
    with engine.connect() as conn:
        names = conn.execute(select(org_unit_name)).all()
        aliases = conn.execute(select(org_unit.c.id, org_unit.c.name, org_unit.c.aliases)).all()
    assert all(row.norm == normalize(row.text) for row in names)
    expected = {(unit.id, position, text) for unit in aliases
                for position, text in enumerate([unit.name, *(unit.aliases or [])])}
    assert {(row.org_unit_id, row.position, row.text) for row in names} == expected
    with_aliases = [unit for unit in aliases if unit.aliases]
    assert 100 < len(with_aliases) < 1000
    assert max(len(unit.aliases) for unit in with_aliases) == 2


def test_progress_is_reported(engine: Engine) -> None:
    seen: list[int] = []
    generate_demo(engine, size=4500, progress=seen.append)
    assert seen == [2000, 4000, 4500]


def test_twenty_thousand(engine: Engine) -> None:
    assert generate_demo(engine, size=20_000) == 20_000  # its speed is bench/'s to measure, not a unit test's
    assert count(engine, org_unit) == 20_000


def test_hundred_thousand_on_sqlite(tmp_path: Path) -> None:
    engine = sqlite_engine(tmp_path, "big")
    try:
        assert generate_demo(engine, size=100_000) == 100_000
        assert count(engine, org_unit) == 100_000
    finally:
        engine.dispose()
