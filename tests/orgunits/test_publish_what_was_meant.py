"""Issue 38, items 1 to 6: a load publishes only what its report shows, and holds back what the operator cannot have
meant. Each test plays one reproduction of the issue as written, on the Kenya sample (three counties of the real
Master Facility List, tests/fixtures/kenya_mfl_sample) through the command line, and reads the server as a
consumer; on SQLite and PostgreSQL."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.support.operator import KENYA_UNITS, Operator, kenya_copy, operator, settings_path

__all__ = ["operator", "settings_path"]  # fixtures
FACILITIES = 84
SYSTEM = "https://mfl.health.go.ke/facility-code"


def since(client: TestClient) -> str:
    client.app.state.ctx.freshness.expire()  # type: ignore[attr-defined]
    return str(client.get("/fhir/Location/_history", params={"_count": 1}).json()["meta"]["lastUpdated"])


def changed_since(client: TestClient, instant: str) -> list[dict[str, Any]]:
    client.app.state.ctx.freshness.expire()  # type: ignore[attr-defined]
    return client.get("/fhir/Location/_history", params={"_since": instant, "_count": 1000}).json().get("entry", [])


def count_since(client: TestClient, instant: str) -> int:
    client.app.state.ctx.freshness.expire()  # type: ignore[attr-defined]
    return int(client.get("/fhir/Location/_history", params={"_since": instant, "_count": 0}).json()["total"])


def facility(client: TestClient, code: str, system: str = SYSTEM) -> dict[str, Any]:
    found = client.get("/fhir/Location", params={"identifier": f"{system}|{code}"}).json()
    assert found["total"] == 1, found
    return found["entry"][0]["resource"]


def physical(resource: dict[str, Any]) -> tuple[str, int]:
    depth = next(e["valueInteger"] for e in resource["extension"] if e["url"].endswith("/org-unit-type-depth"))
    return resource["physicalType"]["coding"][0]["code"], depth


# --- 1. mass deletion -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kept", [pytest.param(FACILITIES // 2, id="half-the-file"), pytest.param(1, id="one-row")])
def test_a_mass_deletion_is_held_back_and_counted(operator: Operator, tmp_path: Path, kept: int) -> None:
    assert operator.load_kenya()[0] == 0
    cut, mapping = kenya_copy(tmp_path, lambda records: records.__delitem__(slice(kept, None)))
    gone = FACILITIES - kept
    with operator.consumer() as client:
        point = since(client)
        for options in ((), ("--dry-run",)):  # the dry run shows the same refusal, writing nothing
            status, said = operator.load_kenya("--delete-missing", *options, facilities=cut, mapping=mapping)
            assert status == 1, said
            assert f"this load would delete {gone:,} of the {KENYA_UNITS} units of default/Kenya MFL (first: " in said
            assert "pass --allow-mass-delete if it is intended" in said
        assert changed_since(client, point) == []  # nothing reached a consumer
        said = operator.load_kenya("--delete-missing", "--allow-mass-delete", facilities=cut, mapping=mapping)[1]
        assert f"{gone:,} deleted (first: " in said
        assert len([e for e in changed_since(client, point) if e["request"]["method"] == "DELETE"]) == gone
        point = since(client)
        status, said = operator.load_kenya()  # the whole file again: they come back, said so
        assert status == 0 and f"{gone:,} restored (first: " in said and "0 updated" in said, said
        assert count_since(client, point) == gone


# --- 2. a load never changes another data source's units ------------------------------------------------------------

def test_a_partner_list_never_reclassifies_the_registry(operator: Operator, tmp_path: Path) -> None:
    """A two-row list (`D1 Dispensary` at the top, `D2 Medical Clinic` under it) as a new data source of the same
    account: its types are its own; no Kenya unit gets a version."""
    assert operator.load_kenya()[0] == 0
    (tmp_path / "partner.csv").write_text("id,name,type,parent\nD1,D1 Dispensary,Dispensary,\n"
                                          "D2,D2 Medical Clinic,Medical Clinic,D1\n", encoding="utf-8")
    (tmp_path / "partner.yaml").write_text("units:\n  id: id\n  name: name\n  type: type\n  parent: parent\n",
                                           encoding="utf-8")
    with operator.consumer() as client:
        point = since(client)
        said = operator.ok("load", "mapped", str(tmp_path / "partner.csv"), "--mapping",
                           str(tmp_path / "partner.yaml"), "--data-source", "Partner")
        assert "Location: 2 inserted, 0 updated, 0 unchanged" in said, said
        assert count_since(client, point) == 2  # its two units, nothing else
        assert physical(facility(client, "20255")) == ("bu", 5)  # a Kenya dispensary, as it was
        partner = client.get("/fhir/Location", params={"name": "D1 Dispensary"}).json()["entry"][0]["resource"]
        assert physical(partner) == ("jdn", 1)


# --- 3. one blank parent reclassifies nothing -----------------------------------------------------------------------

def test_one_blank_parent_moves_one_unit_and_reclassifies_no_type(operator: Operator, tmp_path: Path) -> None:
    assert operator.load_kenya()[0] == 0
    clinic: dict[str, Any] = {}

    def blank(records: list[dict[str, Any]]) -> None:
        first = next(r for r in records if r["facility_type"]["name"] == "Medical Clinic")
        first["ward"] = {"code": None}
        clinic.update(first)

    path, mapping = kenya_copy(tmp_path, blank)
    with operator.consumer() as client:
        point = since(client)
        status, said = operator.load_kenya("--dry-run", facilities=path, mapping=mapping)
        assert "type-at-several-depths" in said  # the data-quality report of the dry run points it out
        status, said = operator.load_kenya(facilities=path, mapping=mapping)
        assert status == 0 and f"1 updated (first: {clinic['code']} {clinic['name']!r}" in said, said
        assert count_since(client, point) == 1  # that unit only: its type stands where it stood
        others = client.get("/fhir/Location", params={"type": "medical-clinic", "_count": 100}).json()["entry"]
        assert {physical(e["resource"]) for e in others if e["resource"]["name"] != clinic["name"]} == {("bu", 5)}


def test_a_type_reclassified_is_held_back(operator: Operator, tmp_path: Path) -> None:
    """A mapping that drops the ward level: every facility one level up, its type too: refused unless allowed."""
    assert operator.load_kenya()[0] == 0

    def without_wards(text: str) -> str:
        start = text.index("  - file: 0009_wards.json")
        text = text[:start] + text[text.index("units:"):]
        return text.replace("parent: ward.code", "parent: ward.code\n  # wards left out")

    def to_constituency(records: list[dict[str, Any]]) -> None:
        wards = json.loads((tmp_path / "0009_wards.json").read_text(encoding="utf-8"))[0]["records"]
        parent = {w["code"]: w["constituency"]["code"] for w in wards}
        for record in records:
            record["ward"] = {"code": parent[record["ward"]["code"]]}

    kenya_copy(tmp_path)
    path, mapping = kenya_copy(tmp_path, to_constituency, without_wards)
    status, said = operator.load_kenya(facilities=path, mapping=mapping)
    assert status == 1 and "this load would reclassify" in said and "from depth 5 (HF) to depth 4 (HF)" in said
    assert "--allow-reclassify" in said and "--allow-reparent" in said, said


# --- 4. the report is what was written ------------------------------------------------------------------------------

def test_a_typod_identifier_system_is_held_back_and_counted(operator: Operator, tmp_path: Path) -> None:
    assert operator.load_kenya()[0] == 0
    path, mapping = kenya_copy(tmp_path, mapping=lambda text: text.replace(SYSTEM, "https://mfl.heath.go.ke/code"))
    status, said = operator.load_kenya(facilities=path, mapping=mapping)
    assert status == 1, said
    assert f"this load would publish {KENYA_UNITS} of the {KENYA_UNITS} units of default/Kenya MFL under another " \
           f"identifier system: {SYSTEM} -> https://mfl.heath.go.ke/code ({KENYA_UNITS} units)" in said
    with operator.consumer() as client:
        assert facility(client, "20255")["name"] == "GK Prison Mbale"  # still found under the real system
        point = since(client)
        said = operator.load_kenya("--allow-identifier-change", facilities=path, mapping=mapping)[1]
        assert f"0 inserted, {KENYA_UNITS} updated" in said, said  # every version written is counted
        assert count_since(client, point) == KENYA_UNITS


# --- 5. swapped latitude and longitude ------------------------------------------------------------------------------

def test_swapped_coordinates_are_refused(operator: Operator, tmp_path: Path) -> None:
    swapped_keys = kenya_copy(tmp_path / "keys", mapping=lambda text: text.replace(
        "latitude: attributes.latitude", "latitude: attributes.LON").replace(
        "longitude: attributes.longitude", "longitude: attributes.latitude").replace("attributes.LON",
                                                                                       "attributes.longitude"))
    status, said = operator.load_kenya(facilities=swapped_keys[0], mapping=swapped_keys[1])
    assert status == 1 and "units.latitude names the field 'attributes.longitude'" in said
    assert "latitude and longitude look swapped" in said

    def swap(records: list[dict[str, Any]], only: int | None = None) -> None:
        for record in records[:only]:
            attributes = json.loads(record["attributes"])
            attributes["latitude"], attributes["longitude"] = attributes["longitude"], attributes["latitude"]
            record["attributes"] = json.dumps(attributes)

    one = kenya_copy(tmp_path / "one", lambda records: swap(records, 1))  # one row among right ones: a first load
    status, said = operator.load_kenya(facilities=one[0], mapping=one[1])
    assert status == 1 and "this load would publish 1 point whose latitude and longitude look swapped" in said
    assert "20255 'GK Prison Mbale'" in said and "far from the points around it" in said, said
    assert operator.load_kenya()[0] == 0
    with operator.consumer() as client:
        near = client.get("/fhir/Location", params={"near": "0.0798|34.722|5"}).json()
        assert "20255" in {e["resource"]["identifier"][0]["value"] for e in near["entry"]}
    everything = kenya_copy(tmp_path / "all", swap)  # a reload with the columns swapped
    status, said = operator.load_kenya(facilities=everything[0], mapping=everything[1])
    assert status == 1 and f"this load would publish {FACILITIES} points whose latitude and longitude look " \
                           "swapped" in said and "where its previous version was" in said, said


# --- 6. the same registry twice -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["Ministry Facilities", "KenyaMFL", "Kenya MFL 2015"])
def test_the_same_registry_under_another_name_is_refused(operator: Operator, name: str) -> None:
    assert operator.load_kenya()[0] == 0
    status, said = operator.load_kenya("--data-source", name)
    assert status == 1, said
    assert f"this load would add {KENYA_UNITS} of its {KENYA_UNITS} new units to default/{name} with the identifiers " \
           f"of units that data source 'Kenya MFL' ({KENYA_UNITS}) of the account already has" in said
    assert "--allow-duplicate-source" in said
    with operator.consumer() as client:
        assert client.get("/fhir/Location", params={"identifier": f"{SYSTEM}|20255"}).json()["total"] == 1
        roots = client.get("/fhir/Location", params={"partof:missing": "true"}).json()
        assert roots["total"] == 1
    assert operator.load_kenya("--data-source", name, "--allow-duplicate-source")[0] == 0
