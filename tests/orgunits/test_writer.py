from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import Engine, select

from server.errors import LoadError
from plugins.orgunits.tables import org_unit, org_unit_name, org_unit_type
from plugins.orgunits.writer import as_utc, ensure_data_source, ensure_source_version, ensure_types, write_units
from plugins.orgunits.records import TypeRecord, UnitRecord, WriteReport
from tests.support.store_snapshot import count, snapshot, units

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=timezone.utc)
T1 = datetime(2024, 6, 1, 8, 30, tzinfo=timezone.utc)
TYPES = (TypeRecord("Country", "C", "COUNTRY", 1), TypeRecord("Region", "R", "REGION", 2),
         TypeRecord("Facility", "F", "HF", 3))


def tree() -> list[UnitRecord]:
    return [
        UnitRecord(1, "Pays", "C", "VALID"),
        UnitRecord(2, "Ségou", "R", "VALID", parent_id=1, aliases=("Segou region", "SEGOU")),
        UnitRecord(3, "Kayes", "R", "NEW", parent_id=1),
        UnitRecord(4, "CSPS Bla", "F", "VALID", parent_id=2, latitude=13.1, longitude=-6.2, altitude=300.5),
        UnitRecord(5, "CSPS Nioro", "F", "REJECTED", parent_id=3, created_at=T0, updated_at=T0),
    ]


def write(engine: Engine, records: list[UnitRecord], now: datetime = T0, batch_size: int = 2000) -> WriteReport:
    with engine.begin() as conn:
        source = ensure_data_source(conn, "Test source")
        version = ensure_source_version(conn, source, 1)
        ensure_types(conn, TYPES)
        return write_units(conn, records, version, now, batch_size=batch_size)


@pytest.mark.parametrize("order", [[0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [3, 1, 4, 0, 2]],
                         ids=["parents-first", "reversed", "shuffled"])
@pytest.mark.parametrize("batch_size", [1, 2, 2000])
def test_any_order_is_written_parents_first(engine: Engine, order: list[int], batch_size: int) -> None:
    records = tree()
    report = write(engine, [records[i] for i in order], batch_size=batch_size)
    assert report == WriteReport(inserted=5)
    stored = units(engine)
    assert {unit_id: row.parent_id for unit_id, row in stored.items()} == {1: None, 2: 1, 3: 1, 4: 2, 5: 3}
    assert all(row.version_id == 1 for row in stored.values())
    assert as_utc(stored[1].created_at) == as_utc(stored[1].updated_at) == T0
    assert (stored[4].latitude, stored[4].longitude, stored[4].altitude) == (13.1, -6.2, 300.5)
    assert stored[2].aliases == ["Segou region", "SEGOU"]
    assert stored[1].aliases is None


def test_names_table_holds_name_then_aliases(engine: Engine) -> None:
    write(engine, tree())
    with engine.connect() as conn:
        names = conn.execute(select(org_unit_name).where(org_unit_name.c.org_unit_id == 2)
                             .order_by(org_unit_name.c.position)).all()
    assert [(row.position, row.text, row.norm) for row in names] == [
        (0, "Ségou", "segou"), (1, "Segou region", "segou region"), (2, "SEGOU", "segou")]
    assert count(engine, org_unit_name) == 7


def test_rewrite_unchanged_keeps_versions_and_timestamps(engine: Engine) -> None:
    write(engine, tree())
    before = snapshot(engine)
    report = write(engine, list(reversed(tree())), now=T1)
    assert report == WriteReport(unchanged=5)
    assert snapshot(engine) == before


@pytest.mark.parametrize("change", [
    {"name": "Ségou-Ville"},
    {"aliases": ("Only alias",)},
    {"aliases": ()},
    {"parent_id": 3},
    {"validation_status": "REJECTED"},
    {"latitude": 14.0, "longitude": -5.0},
    {"type_short_name": "F"},
], ids=["name", "aliases", "no-aliases", "parent", "status", "coordinates", "type"])
def test_changed_unit_gets_next_version(engine: Engine, change: dict) -> None:
    write(engine, tree())
    before = units(engine)
    records = [replace(record, **change) if record.id == 2 else record for record in tree()]
    report = write(engine, records, now=T1.replace(tzinfo=None))
    assert report == WriteReport(updated=1, unchanged=4)
    after = units(engine)
    assert after[2].version_id == 2 and as_utc(after[2].updated_at) == T1
    assert as_utc(after[2].created_at) == as_utc(before[2].created_at)
    # a rename also gives each child a new version (its partOf.display changes), a move each unit below (its place
    # changes: a subtree token it leaves is told, one it enters receives it); nothing else moves
    below: set[int] = set()
    while grown := {k for k, v in before.items() if v.parent_id in {2, *below}} - below:
        below |= grown
    children = {k for k, v in before.items() if v.parent_id == 2} if "name" in change else \
        below if "parent_id" in change else set()
    assert children or not {"name", "parent_id"} & set(change)
    for child in children:
        assert after[child].version_id == before[child].version_id + 1 and as_utc(after[child].updated_at) == T1
    assert {k: v for k, v in after.items() if k not in {2, *children}} == \
        {k: v for k, v in before.items() if k not in {2, *children}}
    with engine.connect() as conn:
        texts = conn.execute(select(org_unit_name.c.text).where(org_unit_name.c.org_unit_id == 2)
                             .order_by(org_unit_name.c.position)).scalars().all()
    updated = next(record for record in records if record.id == 2)
    assert texts == [updated.name, *updated.aliases]


def test_new_version_of_source_counts_as_change(engine: Engine) -> None:
    write(engine, tree())
    with engine.begin() as conn:
        source = ensure_data_source(conn, "Test source")
        version = ensure_source_version(conn, source, 2)
        assert write_units(conn, tree(), version, T1) == WriteReport(updated=5)


@pytest.mark.parametrize("records, message", [
    ([UnitRecord(1, "A", "C", "VALID"), UnitRecord(2, "B", "R", "VALID", parent_id=99)],
     "org unit 2 ('B'): parent 99 does not exist"),
    ([UnitRecord(1, "A", "C", "VALID", parent_id=2), UnitRecord(2, "B", "R", "VALID", parent_id=1)],
     "is its own ancestor"),
    ([UnitRecord(1, "A", "C", "VALID", parent_id=1)], "org unit 1 ('A') is its own parent"),
    ([UnitRecord(1, "A", "C", "VALID"), UnitRecord(1, "B", "C", "VALID")], "org unit 1 ('B') appears twice"),
    ([UnitRecord(1, "A", "X", "VALID")], "unknown org unit type 'X'"),
    ([UnitRecord(1, "A", "C", "MAYBE")], "validation status 'MAYBE'"),
    ([UnitRecord(1, "A", "C", "VALID", latitude=91.0, longitude=0.0)], "latitude 91.0 is outside -90..90"),
    ([UnitRecord(1, "A", "C", "VALID", latitude=0.0, longitude=-181.0)], "longitude -181.0 is outside"),
    ([UnitRecord(1, " ", "C", "VALID")], "org unit 1: name is empty"),
], ids=["dangling", "cycle", "self-parent", "duplicate", "unknown-type", "status", "latitude", "longitude",
        "empty-name"])
def test_bad_records_are_refused(engine: Engine, records: list[UnitRecord], message: str) -> None:
    with pytest.raises(LoadError) as error:
        write(engine, records)
    assert message in str(error.value)
    assert count(engine, org_unit) == 0


def test_cycle_through_stored_units_is_refused(engine: Engine) -> None:
    write(engine, tree())
    before = snapshot(engine)
    moved = [replace(record, parent_id=4) if record.id == 2 else record for record in tree()]
    with pytest.raises(LoadError, match=r"org unit \d \('.*'\) would become its own ancestor"):
        write(engine, moved, now=T1)
    assert snapshot(engine) == before


def test_streamed_input_is_consumed_lazily(engine: Engine) -> None:
    consumed: list[int] = []

    def stream():
        for record in tree():
            consumed.append(record.id)
            yield record

    progress: list[tuple[int, int]] = []
    with engine.begin() as conn:
        source = ensure_data_source(conn, "Test source")
        version = ensure_source_version(conn, source, 1)
        ensure_types(conn, TYPES)
        write_units(conn, stream(), version, T0, batch_size=2,
                    progress=lambda done: progress.append((done, len(consumed))))
    assert progress == [(2, 2), (4, 4), (5, 5)]


def test_ensure_helpers_are_idempotent(engine: Engine) -> None:
    with engine.begin() as conn:
        first = ensure_data_source(conn, "Système national", identifier_system="https://example.org/ou")
        assert ensure_data_source(conn, "Système national") == first
        version = ensure_source_version(conn, first, 3)
        assert ensure_source_version(conn, first, 3) == version
        ids = ensure_types(conn, TYPES)
        assert ensure_types(conn, TYPES) == ids
        renamed = ensure_types(conn, [TypeRecord("Health facility", "F", "HF", 3)])
        assert renamed == {"F": ids["F"]}
        assert conn.execute(select(org_unit_type.c.name).where(org_unit_type.c.short_name == "F")).scalar() \
            == "Health facility"
        with pytest.raises(LoadError, match="slug 'systeme-national' already belongs"):
            ensure_data_source(conn, "SYSTÈME NATIONAL")
        with pytest.raises(LoadError, match="given twice"):
            ensure_types(conn, [TypeRecord("A", "Z", "HF"), TypeRecord("B", "Z", "HF")])


def test_naive_now_is_utc(engine: Engine) -> None:
    write(engine, [UnitRecord(1, "A", "C", "VALID")], now=(T0 + timedelta(hours=1)).replace(tzinfo=None))
    assert as_utc(units(engine)[1].created_at) == T0 + timedelta(hours=1)


def test_materialized_paths_follow_moves(engine: Engine) -> None:
    from plugins.orgunits.tables import org_unit

    write(engine, tree())
    paths = lambda: dict(engine.connect().execute(select(org_unit.c.id, org_unit.c.path)).all())  # noqa: E731
    assert paths() == {1: "/1/", 2: "/1/2/", 3: "/1/3/", 4: "/1/2/4/", 5: "/1/3/5/"}
    moved = [replace(record, parent_id=3) if record.id == 2 else record for record in tree()]
    write(engine, moved, now=T1)
    assert paths() == {1: "/1/", 2: "/1/3/2/", 3: "/1/3/", 4: "/1/3/2/4/", 5: "/1/3/5/"}


def test_new_units_are_last_updated_when_loaded_not_when_the_source_says(engine: Engine) -> None:
    write(engine, tree(), now=T1)  # unit 5's record carries created_at = updated_at = T0
    stored = units(engine)
    assert as_utc(stored[5].updated_at) == T1 and as_utc(stored[5].created_at) == T0
