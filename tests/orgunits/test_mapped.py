"""`orgunit-fhir load mapped`: any registry export (CSV, JSON, JSON lines) through a mapping file, levels included,
in one transaction; the worked example of README (tests/fixtures/mapped) end to end."""
from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import Engine, select

from plugins.orgunits.importers.mapped import load_mapped
from plugins.orgunits.tables import data_source, org_unit_type
from server.errors import LoadError
from tests.support.contexts import REAL_DATA
from tests.support.data import counts
from tests.support.live import live_server
from tests.support.commands import run_cli
from tests.support.store_snapshot import snapshot, units

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "mapped"
LAKELAND = FIXTURES / "lakeland_facilities.csv"
LAKELAND_MAPPING = FIXTURES / "lakeland_facilities.mapping.yaml"
FHIRCHECK = REAL_DATA.parents[1] / "conformance" / "fhircheck.py"


def by_ref(engine: Engine) -> dict[str, Any]:
    return {row.source_ref: row for row in units(engine).values()}


def type_rows(engine: Engine) -> dict[str, tuple[str, str, int | None]]:
    with engine.connect() as conn:
        return {r.short_name: (r.name, r.category, r.depth) for r in conn.execute(select(org_unit_type))}


# --- the worked example ---------------------------------------------------------------------------------------------

def test_the_worked_example_as_published(engine: Engine) -> None:
    assert counts(load_mapped(engine, LAKELAND, LAKELAND_MAPPING)) == {"inserted": 34}
    found = by_ref(engine)
    assert len(found) == 1 + 3 + 7 + 23  # the country, its counties and sub-counties, the facilities
    country, county, sub_county = found["LK"], found["county-01"], found["sub-county-0102"]
    assert (country.name, country.parent_id, county.parent_id) == ("Republic of Lakeland", None, country.id)
    assert (county.name, sub_county.name, sub_county.parent_id) == ("Northshore", "Kellow", county.id)
    first = found["10231"]
    assert (first.name, first.parent_id, first.validation_status) == \
        ("St. Anne Dispensary", found["sub-county-0101"].id, "VALID")
    assert (first.latitude, first.longitude, first.opening_date) == (-0.5257, 36.74051, date(1972, 1, 21))
    assert first.aliases == ["ST. ANNE DISP. PORT AMARA", "3kGZoD9iPCF"]
    referral = found["10001"]  # no sub-county in its row: it hangs from its county
    assert referral.parent_id == county.id and referral.opening_date == date(1952, 7, 1)
    closed = next(row for row in found.values() if row.closing_date is not None)
    assert (closed.validation_status, closed.closing_date) == ("REJECTED", date(2021, 3, 31))
    pending = [row for row in found.values() if row.validation_status == "NEW"]
    assert len(pending) == 1 and pending[0].opening_date is None
    assert sum(row.latitude is None for row in found.values()) == 1 + 1 + 3 + 7  # one facility has no position
    assert type_rows(engine) == {
        "country": ("Country", "COUNTRY", 1), "county": ("County", "REGION", 2),
        "sub-county": ("Sub-county", "DISTRICT", 3), "dispensary": ("Dispensary", "HF", 4),
        "health-centre": ("Health Centre", "HF", 4), "medical-clinic": ("Medical Clinic", "HF", 4),
        "nursing-home": ("Nursing Home", "HF", 4), "sub-county-hospital": ("Sub-County Hospital", "HF", 4),
        "county-referral-hospital": ("County Referral Hospital", "HF", 3)}
    before = snapshot(engine)
    assert counts(load_mapped(engine, LAKELAND, LAKELAND_MAPPING)) == {"unchanged": 34}
    assert snapshot(engine) == before


def test_the_worked_example_loads_in_one_command_and_passes_the_shared_checker(database_url: str,
                                                                               tmp_path: Path) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\n", encoding="utf-8")
    line = run_cli("load", "mapped", str(LAKELAND), "--mapping", str(LAKELAND_MAPPING), "--json", settings=settings,
                   database=database_url)
    report = json.loads(line)
    assert (report["inserted"], report["data_source"], report["format"]) == (34, "Lakeland MFL", "mapped")
    with live_server(tmp_path, database_url) as server:
        done = subprocess.run([sys.executable, str(FHIRCHECK), "live", "--base", server.base, "--token",
                               server.token, "--pages", "5", "--sample", "34"], capture_output=True, text=True,
                              timeout=600)
    assert done.returncode == 0 and done.stdout.rstrip().endswith(" 0 failed"), done.stdout[-4000:]


# --- levels from their own files, JSON and JSON lines ----------------------------------------------------------------

def chain(tmp_path: Path, facilities: list[dict[str, Any]] | None = None) -> tuple[Path, Path]:
    """A registry shaped like a Django fixture export: regions (JSON, records under '*.records'), districts (JSON
    lines), facilities whose position is a JSON string of zero-padded numbers; codes repeat from level to level."""
    (tmp_path / "regions.json").write_text(json.dumps([{"model": "geo.Region", "records": [
        {"code": 1, "name": "Coast"}, {"code": 2, "name": "Lakes"}]}]), encoding="utf-8")
    (tmp_path / "districts.jsonl").write_text("\n".join(json.dumps(d) for d in (
        {"region": {"code": 1}, "code": 1, "name": "Harbour"}, {"region": {"code": 2}, "code": 2, "name": "Inland"},
        {"region": {"code": 2}, "code": 3, "name": "Marsh"})) + "\n", encoding="utf-8")
    facilities = facilities if facilities is not None else [
        {"code": 3, "name": "Marsh Dispensary", "kind": {"name": "Dispensary"}, "district": {"code": 3},
         "attributes": json.dumps({"latitude": "-00.88226", "longitude": "034.92687"}), "state": "OPERATIONAL"},
        {"code": 1, "name": "Harbour Hospital", "kind": {"name": "Hospital"}, "district": {"code": 1},
         "attributes": json.dumps({"latitude": "", "longitude": ""}), "state": "CLOSED", "closed": "2020-05-01"},
    ]
    path = tmp_path / "facilities.json"
    path.write_text(json.dumps({"data": {"facilities": facilities}}), encoding="utf-8")
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text(yaml.safe_dump({
        "data_source": "Registry",
        "levels": [
            {"type": {"value": "Region"}, "file": "regions.json", "records": "*.records", "id": "code", "name": "name"},
            {"type": {"value": "District"}, "file": "districts.jsonl", "id": "code", "name": "name",
             "parent": "region.code"},
        ],
        "units": {"records": "data.facilities", "id": "code", "name": "name", "type": "kind.name",
                  "parent": "district.code", "latitude": "attributes.latitude", "longitude": "attributes.longitude",
                  "status": {"field": "state", "map": {"OPERATIONAL": "active", "CLOSED": "inactive"}},
                  "closing_date": "closed"},
    }), encoding="utf-8")
    return path, mapping


def test_levels_from_their_own_files_in_one_load(engine: Engine, tmp_path: Path) -> None:
    path, mapping = chain(tmp_path)
    assert counts(load_mapped(engine, path, mapping)) == {"inserted": 7}
    found = by_ref(engine)
    assert set(found) == {"region-1", "region-2", "district-1", "district-2", "district-3", "3", "1"}
    assert found["district-3"].parent_id == found["region-2"].id and found["3"].parent_id == found["district-3"].id
    assert (found["3"].latitude, found["3"].longitude, found["3"].validation_status) == (-0.88226, 34.92687, "VALID")
    assert (found["1"].latitude, found["1"].validation_status, found["1"].closing_date) == \
        (None, "REJECTED", date(2020, 5, 1))
    assert type_rows(engine)["region"] == ("Region", "COUNTRY", 1)  # no root: the regions are the top


def test_a_bad_record_in_the_last_file_writes_no_level(engine: Engine, tmp_path: Path) -> None:
    path, mapping = chain(tmp_path, [{"code": 9, "name": "Lost", "kind": {"name": "Dispensary"},
                                      "district": {"code": 42}, "state": "OPERATIONAL", "closed": "",
                                      "attributes": json.dumps({"latitude": "", "longitude": ""})}])
    with pytest.raises(LoadError, match="parent 'district-42' matches no unit of the file"):
        load_mapped(engine, path, mapping)
    assert units(engine) == {}


def test_parent_by_code_in_one_file_and_among_stored_units(engine: Engine, tmp_path: Path) -> None:
    rows = [{"uid": "c1", "label": "Clinic", "up": "d1", "level": "Facility",
             "guid": "urn:uuid:0B6F7C1E-4A47-4D7E-9A3E-000000000001"},
            {"uid": "d1", "label": "District", "up": "n1", "level": "District"},
            {"uid": "n1", "label": "Nation", "up": None, "level": "Country"}]
    path = tmp_path / "units.jsonl"
    path.write_text("\n".join(map(json.dumps, rows)) + "\n", encoding="utf-8")
    mapping = tmp_path / "m.yaml"
    mapping.write_text("identifier_system: https://registry.example.org/uid\n"
                       "units: {id: uid, name: label, parent: up, type: level, uuid: guid}\n", encoding="utf-8")
    assert counts(load_mapped(engine, path, mapping, data_source="Flat")) == {"inserted": 3}
    found = by_ref(engine)
    assert found["c1"].uuid == "0b6f7c1e-4a47-4d7e-9a3e-000000000001" and found["d1"].uuid is None
    with engine.connect() as conn:
        assert conn.execute(select(data_source.c.identifier_system)).scalar() == "https://registry.example.org/uid"
    assert found["c1"].parent_id == found["d1"].id and found["d1"].parent_id == found["n1"].id
    assert type_rows(engine)["facility"] == ("Facility", "HF", 3)  # the deepest level of a file without levels
    path.write_text(json.dumps({"uid": "c2", "label": "Post", "up": "d1", "level": "Facility", "guid": None}) + "\n",
                    encoding="utf-8")
    assert counts(load_mapped(engine, path, mapping, data_source="Flat")) == {"inserted": 1, "missing": 3}
    assert by_ref(engine)["c2"].parent_id == found["d1"].id


# --- refusals: the mapping, then the records ---------------------------------------------------------------------

def _csv(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "list.csv"
    path.write_text(text, encoding="utf-8")
    return path


BASE = {"units": {"id": "code", "name": "name", "type": {"value": "Facility"}, "latitude": "lat", "longitude": "lon",
                  "status": {"field": "state", "map": {"open": "VALID"}}, "opening_date": "opened"}}
GOOD = "code,name,lat,lon,state,opened\nF1,One,-01.5,036.25,open,2001-02-03\n"


def _with(section: str, **changes: Any) -> Callable[[], dict[str, Any]]:
    def make() -> dict[str, Any]:
        raw = json.loads(json.dumps(BASE))
        raw.setdefault(section, {}).update(changes) if section != "" else raw.update(changes)
        return raw
    return make


BAD_MAPPINGS = [
    pytest.param(lambda: {"unit": {}}, "unknown key(s) unit", id="unknown-top-key"),
    pytest.param(lambda: {"data_source": "X"}, "'units' is required", id="no-units"),
    pytest.param(_with("units", colour="c"), "unknown key(s) colour", id="unknown-field"),
    pytest.param(lambda: {"units": {"name": "n", "type": {"value": "T"}}}, "units.id is required", id="no-id"),
    pytest.param(_with("units", latitude=["a", "b"]), "units.latitude: expected a field name", id="list-for-one"),
    pytest.param(_with("units", format="xls"), "units.format: expected one of csv, json, jsonl", id="format"),
    pytest.param(_with("", levels=[{"type": {"value": "R"}, "id": "r", "name": "r", "file": "r.csv"}]),
                 "units.parent is required", id="level-file-without-parent-field"),
]


@pytest.mark.parametrize("make, message", BAD_MAPPINGS)
def test_a_bad_mapping_is_refused_naming_the_key(engine: Engine, tmp_path: Path, make: Callable[[], Any],
                                                  message: str) -> None:
    mapping = tmp_path / "m.yaml"
    mapping.write_text(yaml.safe_dump(make()), encoding="utf-8")
    with pytest.raises(LoadError) as error:
        load_mapped(engine, _csv(tmp_path, GOOD), mapping)
    assert message in str(error.value) and units(engine) == {}


BAD_RECORDS = [
    pytest.param("F1,One,-01.5,036.25,shut,2001-02-03",
                 "units.status 'shut' (field 'state') is not in units.status.map", id="status-not-mapped"),
    pytest.param("F1,One,north,036.25,open,2001-02-03", "units.latitude 'north' (field 'lat') is not a number",
                 id="latitude-text"),
    pytest.param("F1,One,-95,036.25,open,2001-02-03", "outside -90..90", id="latitude-range"),
    pytest.param("F1,One,-01.5,,open,2001-02-03", "latitude and longitude must be given together", id="half-position"),
    pytest.param("F1,One,-01.5,036.25,open,03/02/2001", "units.opening_date '03/02/2001' (field 'opened') is not a "
                 "date (YYYY-MM-DD; or set date_format)", id="date-format"),
    pytest.param("F1,,-01.5,036.25,open,2001-02-03", "no name (field 'name', units.name)", id="no-name"),
    pytest.param(",One,-01.5,036.25,open,2001-02-03", "no field 'code' (units.id)", id="no-id"),
    pytest.param("F1,One,-01.5,036.25,open,2001-02-03\nF1,Again,,,open,", "id 'F1' is already used by", id="duplicate"),
    pytest.param("F1,One,-01.5", "line 3 has 3 fields but the header has 6: the row is cut short", id="cut-short"),
]


@pytest.mark.parametrize("rows, message", BAD_RECORDS)
def test_a_bad_record_is_refused_naming_it(engine: Engine, tmp_path: Path, rows: str, message: str) -> None:
    mapping = tmp_path / "m.yaml"
    mapping.write_text(yaml.safe_dump(BASE), encoding="utf-8")
    path = _csv(tmp_path, GOOD + rows + "\n")
    with pytest.raises(LoadError) as error:
        load_mapped(engine, path, mapping)
    assert message in str(error.value) and "list.csv line" in str(error.value) and units(engine) == {}
