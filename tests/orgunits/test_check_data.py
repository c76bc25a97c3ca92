"""`orgunit-fhir check-data` (issue 38): the data-quality report of what is published. On the Kenya sample (three
counties of the real Master Facility List, tests/fixtures/kenya_mfl_sample) it finds nothing; each problem planted
into it is found by its check alone, with its count, severity and the unit named by code and name; an error-level
finding exits 1. Problems a load refuses today (swapped points, impossible dates, control characters) are planted
into the stored rows, as data loaded before this release holds them. On SQLite and PostgreSQL."""
from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, select, update

from plugins.orgunits.tables import org_unit
from server.storage.db import normalize_url
from tests.support.operator import KENYA_UNITS, Operator, kenya_copy, operator, settings_path

__all__ = ["operator", "settings_path"]  # fixtures
CLINIC = "20255"  # GK Prison Mbale, a facility of Vihiga under ward 1051
Records = list[dict[str, Any]]


def report(operator: Operator, *options: str) -> tuple[int, dict[str, Any]]:
    status, out, said = operator.printed("check-data", "--json", *options)
    assert status in (0, 1), said
    return status, json.loads(out)


def found(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["check"]: check for check in document["checks"] if check["count"]}


def stored(operator: Operator, change: Callable[[Engine], None]) -> None:
    engine = create_engine(normalize_url(operator.url))
    try:
        change(engine)
    finally:
        engine.dispose()


def unit_of(code: str) -> Any:
    return org_unit.c.source_ref == code


def set_row(code: str, **values: Any) -> Callable[[Engine], None]:
    def change(engine: Engine) -> None:
        with engine.begin() as conn:
            conn.execute(update(org_unit).where(unit_of(code)).values(**values))

    return change


def swap_point(engine: Engine) -> None:
    with engine.begin() as conn:
        lat, lon = conn.execute(select(org_unit.c.latitude, org_unit.c.longitude).where(unit_of(CLINIC))).one()
        conn.execute(update(org_unit).where(unit_of(CLINIC)).values(latitude=lon, longitude=lat))


def ward_boundary(engine: Engine) -> None:
    """Ward 1051 gets a boundary far from its facilities (a small square in the sea): its points lie outside it."""
    square = {"type": "Polygon",
              "coordinates": [[[45.0, -5.0], [45.1, -5.0], [45.1, -4.9], [45.0, -4.9], [45.0, -5.0]]]}
    with engine.begin() as conn:
        conn.execute(update(org_unit).where(unit_of("ward-1051")).values(geometry=square))


def without_point(records: Records) -> None:
    record = next(r for r in records if str(r["code"]) == CLINIC)
    attributes = json.loads(record["attributes"])
    attributes["latitude"] = attributes["longitude"] = ""
    record["attributes"] = json.dumps(attributes)


def far_away(records: Records) -> None:
    record = next(r for r in records if str(r["code"]) == CLINIC)
    attributes = json.loads(record["attributes"])
    attributes["latitude"], attributes["longitude"] = "-3.9", "39.7"  # Mombasa, not Vihiga
    record["attributes"] = json.dumps(attributes)


def same_name(records: Records) -> None:
    ward = next(r for r in records if str(r["code"]) == CLINIC)["ward"]["code"]
    siblings = [r for r in records if r["ward"]["code"] == ward]
    siblings[1]["name"] = siblings[0]["name"]


def blank_parent(records: Records) -> None:
    next(r for r in records if str(r["code"]) == CLINIC)["ward"] = {"code": None}


def close_ward(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(update(org_unit).where(unit_of("ward-1051")).values(closing_date=date(2015, 1, 1)))


@pytest.mark.parametrize("in_file, in_store, check, count, severity", [
    pytest.param(without_point, None, "facility-without-point", 1, "warning", id="facility-without-point"),
    pytest.param(None, swap_point, "swapped-coordinates", 1, "error", id="swapped-coordinates"),
    pytest.param(None, ward_boundary, "outside-parent-boundary", None, "warning", id="outside-parent-boundary"),
    pytest.param(far_away, None, "far-from-siblings", 1, "warning", id="far-from-siblings"),
    pytest.param(same_name, None, "duplicate-name-under-parent", 1, "warning", id="duplicate-name-under-parent"),
    pytest.param(None, close_ward, "closed-with-open-children", 1, "warning", id="closed-with-open-children"),
    pytest.param(None, set_row(CLINIC, opening_date=date(2015, 1, 1),
                               closing_date=date(2010, 1, 1)),
                 "closed-before-opened", 1, "error", id="closed-before-opened"),
    pytest.param(None, set_row(CLINIC, opening_date=date(2031, 1, 1)), "opening-in-future", 1,
                 "error", id="opening-in-future"),
    pytest.param(blank_parent, None, "type-at-several-depths", 1, "warning", id="type-at-several-depths"),
    pytest.param(None, set_row("county-14", parent_id=None), "several-roots", 1, "warning", id="several-roots"),
    pytest.param(None, set_row(CLINIC, name="GK Prison Mbale\x92s"), "control-characters", 1, "error",
                 id="control-characters"),
    pytest.param(None, set_row(CLINIC, name=unicodedata.normalize("NFD", "GK Prisón Mbale")), "not-nfc", 1, "warning",
                 id="not-nfc"),
])
def test_each_planted_problem_is_found_alone(operator: Operator, tmp_path: Path,
                                            in_file: Callable[[Records], None] | None,
                                            in_store: Callable[[Engine], None] | None, check: str,
                                            count: int | None, severity: str) -> None:
    facilities, mapping = kenya_copy(tmp_path, in_file)
    status, said = operator.load_kenya(facilities=facilities, mapping=mapping)
    assert status == 0, said
    if in_store is not None:
        stored(operator, in_store)
    status, document = report(operator)
    assert set(found(document)) == {check}, found(document)
    finding = found(document)[check]
    assert finding["severity"] == severity and (count is None or finding["count"] == count)
    assert status == (1 if severity == "error" else 0)
    if check != "several-roots":
        assert any(CLINIC in line or "ward-1051" in line or "'" in line for line in finding["first"])


def test_the_kenya_sample_is_clean_and_the_text_report_says_so(operator: Operator) -> None:
    assert operator.load_kenya()[0] == 0
    status, document = report(operator)
    assert status == 0 and document["units"] == KENYA_UNITS and found(document) == {}
    assert {c["check"] for c in document["checks"]} >= {"swapped-coordinates", "not-nfc", "several-roots"}
    status, out, said = operator.printed("check-data")
    assert status == 0 and out == "" and f"check-data: {KENYA_UNITS} units checked in " in said
    assert "0 errors, 0 warnings" in said


def test_identifiers_shared_by_two_data_sources_and_the_scope_options(operator: Operator, tmp_path: Path) -> None:
    """A partner list with one code of the registry (under its system): found in both data sources; --data-source
    and --account narrow the report, an unknown one is refused naming those that exist."""
    assert operator.load_kenya()[0] == 0
    (tmp_path / "partner.csv").write_text(f"id,name,type\n{CLINIC},GK Prison Mbale,Dispensary\n", encoding="utf-8")
    (tmp_path / "partner.yaml").write_text("identifier_system: https://mfl.health.go.ke/facility-code\n"
                                           "units:\n  id: id\n  name: name\n  type: type\n", encoding="utf-8")
    operator.ok("load", "mapped", str(tmp_path / "partner.csv"), "--mapping", str(tmp_path / "partner.yaml"),
                "--data-source", "Partner")
    status, document = report(operator)
    assert found(document)["identifier-in-several-sources"]["count"] == 2
    status, document = report(operator, "--data-source", "Kenya MFL")
    assert document["units"] == KENYA_UNITS
    assert report(operator, "--account", "default")[1]["units"] == KENYA_UNITS + 1
    status, said = operator.run("check-data", "--account", "defualt")
    assert status == 1 and "account 'defualt' does not exist (accounts: default)" in said
    status, said = operator.run("check-data", "--data-source", "Kenya")
    assert status == 1 and "no data source 'Kenya' (data sources: Kenya MFL, Partner)" in said
