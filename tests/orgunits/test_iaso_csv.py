from __future__ import annotations

import csv
from collections.abc import Callable
from datetime import date, datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from server.declare.instants import as_utc
from server.errors import LoadError
from plugins.orgunits.importers.iaso_csv import load_iaso_csv
from plugins.orgunits.tables import data_source, org_unit, org_unit_name, org_unit_type
from plugins.orgunits.records import WriteReport
from tests.support.contexts import IASO_CSV
from tests.support.data import counts, first_load
from tests.support.store_snapshot import TABLES, count, snapshot, units

Rows = list[list[str]]


def read_csv() -> Rows:
    with IASO_CSV.open(encoding="utf-8-sig", newline="") as handle:
        return list(csv.reader(handle))


HEADER = read_csv()[0]


def col(name: str) -> int:
    return HEADER.index(name)


def line_of(rows: Rows, unit_id: str) -> int:
    return next(index for index, row in enumerate(rows) if row[0] == unit_id) + 1


def write_csv(path: Path, rows: Rows, bom: bool = False) -> Path:
    with path.open("w", encoding="utf-8-sig" if bom else "utf-8", newline="") as handle:
        csv.writer(handle, lineterminator="\r\n").writerows(rows)
    return path


def edited(tmp_path: Path, edits: dict[str, dict[str, str]]) -> Path:
    """The real file with some cells replaced, rows chosen by their Iaso ID."""
    rows = read_csv()
    for row in rows[1:]:
        for column, value in edits.get(row[0], {}).items():
            row[col(column)] = value
    return write_csv(tmp_path / "edited.csv", rows)


def category_counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        query = (select(org_unit_type.c.category, func.count())
                 .join(org_unit, org_unit.c.org_unit_type_id == org_unit_type.c.id).group_by(org_unit_type.c.category))
        return dict(conn.execute(query).all())


def test_real_file_loads(engine: Engine) -> None:
    assert load_iaso_csv(engine, IASO_CSV) == WriteReport(inserted=136, notes=first_load("Iaso"))
    assert count(engine, org_unit) == 136
    assert category_counts(engine) == {"COUNTRY": 1, "REGION": 1, "DISTRICT": 6, "AREA": 45, "HF": 83}
    with engine.connect() as conn:
        types = {row.short_name: (row.name, row.category, row.depth) for row in conn.execute(select(org_unit_type))}
        source = conn.execute(select(data_source)).one()
    assert types == {
        "COUN": ("Country/Pays", "COUNTRY", 1),
        "REG": ("Region/Région", "REGION", 2),
        "DIST": ("District/Zone de santé", "DISTRICT", 3),
        "AREA": ("Health area/Aire de santé", "AREA", 4),
        "HF": ("Health facility/Formation sanitaire", "HF", 5),
    }
    assert (source.name, source.slug) == ("Iaso", "iaso")
    stored = units(engine)
    assert all(row.version_id == 1 and row.validation_status == "VALID" for row in stored.values())
    assert sum(row.latitude is not None for row in stored.values()) == 83
    assert [row.id for row in stored.values() if row.parent_id is None] == [2048976]


@pytest.mark.parametrize("unit_id, name, source_ref, parent_id, parent_ref", [
    (2049032, "CMA Boromo 1", "KvNOePwHFyH", 2048986, "PikEUJoaxom"),
    (2048986, "Boromo", "PikEUJoaxom", 2048978, "CTtB0TPRvWc"),
    (2048978, "DS Boromo", "CTtB0TPRvWc", 2048977, "awG7snlrjVy"),
    (2049004, "Balave", "UMJIrkSBNbU", 2048980, "XfC8RKeUvO4"),
    (2048977, "Boucle du Mouhoun", "awG7snlrjVy", 2048976, "zmSNCYjqQGj"),
], ids=["facility", "area", "district", "closed-area", "region"])
def test_parent_links(engine: Engine, unit_id: int, name: str, source_ref: str, parent_id: int,
                      parent_ref: str) -> None:
    load_iaso_csv(engine, IASO_CSV)
    stored = units(engine)
    unit = stored[unit_id]
    assert (unit.name, unit.source_ref, unit.parent_id) == (name, source_ref, parent_id)
    assert stored[parent_id].source_ref == parent_ref


def test_fields_of_known_rows(engine: Engine) -> None:
    loaded_at = datetime.now(timezone.utc)
    load_iaso_csv(engine, IASO_CSV)
    stored = units(engine)
    facility = stored[2049032]
    assert (facility.latitude, facility.longitude, facility.altitude) == (11.716788, -3.339844, None)
    assert as_utc(facility.created_at) == datetime(2024, 9, 26, 12, 21, tzinfo=timezone.utc)
    assert as_utc(facility.updated_at) >= loaded_at  # lastUpdated is the load, not "Date de modification"
    closed = {row.id: row.closing_date for row in stored.values() if row.closing_date is not None}
    assert closed == {2049004: date(2024, 12, 1)}
    assert all(row.opening_date is None and row.aliases is None and row.uuid is None for row in stored.values())
    with engine.connect() as conn:
        names = conn.execute(select(org_unit_name).where(org_unit_name.c.org_unit_id == 2048977)).all()
    assert [(row.position, row.text, row.norm) for row in names] == [(0, "Boucle du Mouhoun", "boucle du mouhoun")]
    assert count(engine, org_unit_name) == 136


def test_reload_changes_nothing(engine: Engine) -> None:
    load_iaso_csv(engine, IASO_CSV)
    before = snapshot(engine)
    assert load_iaso_csv(engine, IASO_CSV) == WriteReport(unchanged=136)
    assert snapshot(engine) == before


def test_bom_is_accepted(engine: Engine, tmp_path: Path) -> None:
    path = write_csv(tmp_path / "bom.csv", read_csv(), bom=True)
    assert path.read_bytes()[:3] == b"\xef\xbb\xbf"
    assert load_iaso_csv(engine, path) == WriteReport(inserted=136, notes=first_load("Iaso"))


def test_renamed_unit_gets_version_two(engine: Engine, tmp_path: Path) -> None:
    load_iaso_csv(engine, IASO_CSV)
    before = units(engine)
    report = load_iaso_csv(engine, edited(tmp_path, {"2049032": {"Nom": "CMA de Boromo"}}))
    assert report == WriteReport(updated=1, unchanged=135)
    after = units(engine)
    assert after[2049032].name == "CMA de Boromo" and after[2049032].version_id == 2
    assert as_utc(after[2049032].updated_at) > as_utc(before[2049032].updated_at)
    assert {k: v for k, v in after.items() if k != 2049032} == {k: v for k, v in before.items() if k != 2049032}
    with engine.connect() as conn:
        norms = conn.execute(select(org_unit_name.c.norm).where(org_unit_name.c.org_unit_id == 2049032)).scalars().all()
    assert norms == ["cma de boromo"]


def test_subset_resolves_parents_already_stored(engine: Engine, tmp_path: Path) -> None:
    load_iaso_csv(engine, IASO_CSV)
    before = snapshot(engine)
    rows = read_csv()
    facilities = [rows[0], *(row for row in rows[1:] if row[col("Type")].endswith(" - HF"))]
    report = load_iaso_csv(engine, write_csv(tmp_path / "hf.csv", facilities))
    assert counts(report) == {"unchanged": 83, "missing": 53}  # the areas and above, left as they were
    assert len(report.missing_ids) == 5 and "53 units of default/Iaso are not in the file" in report.notes[0]
    assert snapshot(engine) == before


def test_subset_into_other_data_source_is_refused(engine: Engine, tmp_path: Path) -> None:
    load_iaso_csv(engine, IASO_CSV)
    rows = read_csv()
    facilities = [rows[0], *(row for row in rows[1:] if row[col("Type")].endswith(" - HF"))]
    with pytest.raises(LoadError, match=r"line 2 \(ID \d+, .*\): parent reference '\w+' matches no org unit"):
        load_iaso_csv(engine, write_csv(tmp_path / "hf.csv", facilities), data_source="Other")


def test_parent_by_name_when_reference_is_missing(engine: Engine, tmp_path: Path) -> None:
    path = edited(tmp_path, {"2049032": {"Ref Ext parent 1": ""}})
    load_iaso_csv(engine, path)
    assert units(engine)[2049032].parent_id == 2048986


def _set(unit_id: str, column: str, value: str) -> Callable[[Rows], tuple[Rows, int]]:
    def change(rows: Rows) -> tuple[Rows, int]:
        line = line_of(rows, unit_id)
        rows[line - 1][col(column)] = value
        return rows, line
    return change


def _duplicate_id(rows: Rows) -> tuple[Rows, int]:
    rows[3][0] = rows[2][0]
    return rows, 4


def _cycle(rows: Rows) -> tuple[Rows, int]:
    region = line_of(rows, "2048977")
    rows[region - 1][col("Ref Ext parent 1")] = "CTtB0TPRvWc"
    rows[region - 1][col("parent 1")] = "DS Boromo"
    return rows, region


def _missing_column(rows: Rows) -> tuple[Rows, int]:
    rows[0][0] = "Identifiant"
    return rows, 1


def _cut_short(rows: Rows) -> tuple[Rows, int]:
    """A row that ends early (an export interrupted, a stray line break): 12 of its 36 fields."""
    line = line_of(rows, "2049032")
    rows[line - 1] = rows[line - 1][:12]
    return rows, line


def _shared_code(rows: Rows) -> tuple[Rows, int]:
    line = line_of(rows, "2049032")
    rows[line - 1][col("Type")] = "Hospital/Hôpital - HF"
    return rows, line


BAD_FILES = [
    pytest.param(_set("2049032", "ID", "20490x2"), "ID '20490x2' is not an integer", id="bad-id"),
    pytest.param(_set("2049032", "Latitude", "95.2"), "Latitude '95.2' is outside -90..90", id="latitude-range"),
    pytest.param(_set("2049032", "Latitude", "11°43'N"), "Latitude \"11°43'N\" is not a number", id="latitude-text"),
    pytest.param(_set("2049032", "Longitude", "-183"), "Longitude '-183' is outside -180..180", id="longitude"),
    pytest.param(_set("2049032", "Longitude", ""), "latitude and longitude must be given together", id="half-gps"),
    pytest.param(_set("2049032", "Ref Ext parent 1", "NoSuchRef00"),
                 "parent reference 'NoSuchRef00' matches no org unit", id="dangling-ref"),
    pytest.param(_set("2049032", "parent 1", "Nowhere"), None, id="name-ignored-when-ref-resolves"),
    pytest.param(lambda rows: _set("2049032", "parent 1", "Nowhere")(_set("2049032", "Ref Ext parent 1", "")(rows)[0]),
                 "parent name 'Nowhere' matches no org unit", id="dangling-name"),
    pytest.param(_duplicate_id, "is already used on line 3", id="duplicate-id"),
    pytest.param(_cycle, "is its own ancestor", id="cycle"),
    pytest.param(_set("2049032", "Ref Ext parent 1", "KvNOePwHFyH"), "is its own parent", id="self-parent"),
    pytest.param(_set("2049032", "Validé", "MAYBE"), "validation status 'MAYBE'", id="status"),
    pytest.param(_set("2049032", "Date de fermeture", "2024-13-45"), "Date de fermeture '2024-13-45' is not a date",
                 id="closing-date"),
    pytest.param(_set("2049032", "Date de modification", "yesterday"), "Date de modification 'yesterday'",
                 id="timestamp"),
    pytest.param(_set("2049032", "Type", "Formation sanitaire"), "is not of the form 'Type name - CODE'", id="type"),
    pytest.param(_shared_code, "has the code 'HF' already used by type", id="shared-type-code"),
    pytest.param(_set("2049032", "Nom", " "), "has no name", id="empty-name"),
    pytest.param(_missing_column, "missing column(s) 'ID'", id="missing-column"),
    pytest.param(_cut_short, "has 12 fields but the header has 36: the row is cut short", id="row-cut-short"),
]


@pytest.mark.parametrize("change, message", BAD_FILES)
def test_bad_file_is_refused_with_line_number(engine: Engine, tmp_path: Path,
                                              change: Callable[[Rows], tuple[Rows, int]], message: str | None) -> None:
    rows, line = change(read_csv())
    path = write_csv(tmp_path / "bad.csv", rows)
    if message is None:
        assert load_iaso_csv(engine, path).inserted == 136
        return
    with pytest.raises(LoadError) as error:
        load_iaso_csv(engine, path)
    assert f"line {line}" in str(error.value)
    assert message in str(error.value)
    assert all(count(engine, table) == 0 for table in TABLES)


@pytest.mark.parametrize("change", [_set("2049032", "Latitude", "95.2"), _cycle, _duplicate_id,
                                    _set("2049032", "Ref Ext parent 1", "NoSuchRef00")],
                         ids=["latitude", "cycle", "duplicate-id", "dangling-ref"])
def test_bad_reload_leaves_stored_data_untouched(engine: Engine, tmp_path: Path,
                                                 change: Callable[[Rows], tuple[Rows, int]]) -> None:
    load_iaso_csv(engine, IASO_CSV)
    before = snapshot(engine)
    rows, _ = change(read_csv())
    rows[1][col("Nom")] = "Renamed before the bad row"
    with pytest.raises(LoadError):
        load_iaso_csv(engine, write_csv(tmp_path / "bad.csv", rows), version=2)
    assert snapshot(engine) == before


def test_cycle_through_stored_units_rolls_back_everything(engine: Engine, tmp_path: Path) -> None:
    """Only the writer sees this cycle (the region moves under a stored district), after rows were written."""
    load_iaso_csv(engine, IASO_CSV)
    before = snapshot(engine)
    rows = read_csv()
    region = rows[line_of(rows, "2048977") - 1]
    region[col("Ref Ext parent 1")], region[col("parent 1")] = "CTtB0TPRvWc", "DS Boromo"
    facility = rows[line_of(rows, "2049032") - 1]
    facility[col("Nom")] = "Renamed"
    with pytest.raises(LoadError, match=r"org unit 2048977 \('Boucle du Mouhoun'\) would become its own ancestor"):
        load_iaso_csv(engine, write_csv(tmp_path / "moved.csv", [rows[0], facility, region]))
    assert snapshot(engine) == before


def test_data_source_slug_clash_is_refused(engine: Engine) -> None:
    load_iaso_csv(engine, IASO_CSV)
    before = snapshot(engine)
    with pytest.raises(LoadError, match="slug 'iaso' already belongs to data source 'Iaso'"):
        load_iaso_csv(engine, IASO_CSV, data_source="IASO")
    assert snapshot(engine) == before
