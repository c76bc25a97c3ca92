"""A mapping's level names its own `identifier_system` (county codes are not facility codes): its units publish
their source code under that system in read, vread, search, chains and `$export`, and `identifier=system|value`
finds them by it alone; a level without one keeps the mapping's top-level system (issue 23, item 10)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from sqlalchemy import Engine, select
from starlette.testclient import TestClient

from plugins.orgunits.importers.mapped import load_mapped
from plugins.orgunits.tables import org_unit_history
from server.access.mint import mint_token
from server.app import create_app
from server.engine.context import create_context
from server.errors import LoadError
from server.storage.prerender import refresh
from tests.support.bulk import export, lines
from tests.support.contexts import SECRET, make_settings
from tests.support.data import counts
from tests.support.store_snapshot import units

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "mapped"
LAKELAND = FIXTURES / "lakeland_facilities.csv"
FACILITY = "https://lakeland.example.org/mfl/facility-code"  # the mapping's top-level system
COUNTY = "https://lakeland.example.org/mfl/county-code"  # the county level's own


def lakeland_mapping(tmp_path: Path, county_system: str | None = COUNTY, top: str | None = FACILITY,
                     **county: Any) -> Path:
    """The worked example of README, its county level under `county_system` (None: none of its own)."""
    raw = yaml.safe_load((FIXTURES / "lakeland_facilities.mapping.yaml").read_text(encoding="utf-8"))
    raw["levels"][0].update(county)
    if top is not None:
        raw["identifier_system"] = top
    if county_system is not None:
        raw["levels"][0]["identifier_system"] = county_system
    path = tmp_path / "lakeland.mapping.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def official(resource: dict[str, Any]) -> tuple[str, str]:
    (found,) = [item for item in resource["identifier"] if item.get("use") == "official"]
    return found["system"], found["value"]


@pytest.fixture(scope="module")
def lakeland(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The Lakeland list loaded with a county system of its own, its bodies pre-rendered as `load` leaves them."""
    var = tmp_path_factory.mktemp("var")
    ctx = create_context(make_settings(backend_url, var, auth={"secret": SECRET}))
    ctx.extensions.schema.upgrade(ctx.db)
    assert counts(load_mapped(ctx.db, LAKELAND, lakeland_mapping(var))) == {"inserted": 34}
    refresh(ctx.db, ctx.registry)
    with TestClient(create_app(ctx.settings, context=ctx), base_url="http://testserver") as client:
        client.headers["Authorization"] = f"Bearer {mint_token(ctx.settings)}"
        yield client
    ctx.db.dispose()


def ids_by_ref(client: TestClient, query: str) -> set[str]:
    answer = client.get(f"/fhir/Location?{query}&_count=100")
    assert answer.status_code == 200, answer.text
    return {official(entry["resource"])[1] for entry in answer.json().get("entry", ())}


def location_id(client: TestClient, ref: str) -> str:
    (entry,) = client.get("/fhir/Location", params={"identifier": ref}).json()["entry"]
    return str(entry["resource"]["id"])


PUBLISHED = [
    pytest.param("county-01", COUNTY, id="county-level-own-system"),
    pytest.param("sub-county-0101", FACILITY, id="sub-county-level-top-level-system"),
    pytest.param("10231", FACILITY, id="facility-top-level-system"),
    pytest.param("LK", FACILITY, id="root-top-level-system"),
]


@pytest.mark.parametrize("ref, system", PUBLISHED)
def test_each_unit_publishes_its_code_under_its_levels_system(lakeland: TestClient, ref: str, system: str) -> None:
    unit = location_id(lakeland, ref)
    read = lakeland.get(f"/fhir/Location/{unit}")
    assert read.status_code == 200 and official(read.json()) == (system, ref)
    assert official(lakeland.get(f"/fhir/Location/{unit}/_history/1").json()) == (system, ref)
    (found,) = lakeland.get("/fhir/Location", params={"_id": unit}).json()["entry"]
    assert official(found["resource"]) == (system, ref)


NORTHSHORE_CHILDREN = {"sub-county-0101", "sub-county-0102", "sub-county-0103", "10001"}

SEARCHES = [
    pytest.param(f"identifier={COUNTY}|county-01", {"county-01"}, id="county-by-its-system"),
    pytest.param(f"identifier={FACILITY}|county-01", set(), id="county-under-the-top-level-system-finds-nothing"),
    pytest.param(f"identifier={FACILITY}|10231", {"10231"}, id="facility-by-the-top-level-system"),
    pytest.param(f"identifier={COUNTY}|10231", set(), id="facility-under-the-county-system-finds-nothing"),
    pytest.param(f"identifier={FACILITY}|sub-county-0101", {"sub-county-0101"}, id="level-without-own-system"),
    pytest.param(f"identifier={COUNTY}|sub-county-0101", set(), id="level-without-own-system-wrong-system"),
    pytest.param("identifier=county-02", {"county-02"}, id="any-system"),
    pytest.param("identifier=|county-02", set(), id="no-system-finds-nothing"),
    pytest.param(f"identifier={COUNTY}|", {"county-01", "county-02", "county-03"}, id="every-code-of-the-system"),
    pytest.param(f"identifier:not={COUNTY}|county-01&type=county", {"county-02", "county-03"}, id="not"),
    pytest.param(f"partof.identifier={COUNTY}|county-01", NORTHSHORE_CHILDREN, id="chain-by-the-county-system"),
    pytest.param(f"partof.identifier={FACILITY}|county-01", set(), id="chain-wrong-system-finds-nothing"),
]


@pytest.mark.parametrize("query, refs", SEARCHES)
def test_identifier_search_by_each_levels_system(lakeland: TestClient, query: str, refs: set[str]) -> None:
    assert ids_by_ref(lakeland, query.replace("|", "%7C")) == refs


def test_export_publishes_each_levels_system(lakeland: TestClient) -> None:
    manifest = export(lakeland, _type="Location")
    exported = [orjson.loads(line) for line in lines(lakeland, manifest["output"])["Location"]]
    systems = dict(map(reversed, map(official, exported)))  # type: ignore[arg-type]
    assert len(systems) == 34
    assert {ref for ref, system in systems.items() if system == COUNTY} == {"county-01", "county-02", "county-03"}
    assert {system for ref, system in systems.items() if not ref.startswith("county-")} == {FACILITY}


def test_a_reload_that_changes_a_levels_system_publishes_a_new_version(engine: Engine, tmp_path: Path) -> None:
    assert counts(load_mapped(engine, LAKELAND, lakeland_mapping(tmp_path, county_system=None))) == {"inserted": 34}
    before = {row.source_ref: row for row in units(engine).values()}
    assert {row.identifier_system for row in before.values()} == {None}  # the data source's system
    report = load_mapped(engine, LAKELAND, lakeland_mapping(tmp_path, county_system=COUNTY))
    assert counts(report) == {"updated": 3, "unchanged": 31}  # the counties, nothing else
    after = {row.source_ref: row for row in units(engine).values()}
    assert {ref for ref, row in after.items() if row.version_id == before[ref].version_id + 1} == \
        {"county-01", "county-02", "county-03"}
    assert {ref for ref, row in after.items() if row.identifier_system == COUNTY} == {"county-01", "county-02",
                                                                                     "county-03"}
    county = after["county-01"].id
    with engine.connect() as conn:  # each version renders with the system it was published under
        published = {row.version_id: row.snapshot["source_system"] for row in conn.execute(
            select(org_unit_history.c.version_id, org_unit_history.c.snapshot)
            .where(org_unit_history.c.org_unit_id == county))}
    assert published == {1: FACILITY, 2: COUNTY}
    assert counts(load_mapped(engine, LAKELAND, lakeland_mapping(tmp_path, county_system=COUNTY))) == \
        {"unchanged": 34}


def test_a_level_with_its_own_system_may_publish_the_bare_code(engine: Engine, tmp_path: Path) -> None:
    assert counts(load_mapped(engine, LAKELAND, lakeland_mapping(tmp_path, prefix=""))) == {"inserted": 34}
    published = {(row.source_ref, row.identifier_system) for row in units(engine).values()}
    assert {("01", COUNTY), ("02", COUNTY), ("03", COUNTY), ("sub-county-0101", None)} <= published


BAD_SYSTEMS = [
    pytest.param("lakeland.example.org/county", None, "levels[0].identifier_system: expected an absolute URI",
                 id="level-no-scheme"),
    pytest.param("https://lakeland.example.org/county code", None, "levels[0].identifier_system", id="level-blank"),
    pytest.param(["https://a.example.org"], None, "levels[0].identifier_system: expected text", id="level-list"),
    pytest.param(None, "example.org:8080/mfl", "identifier_system: expected an absolute URI", id="top-no-scheme"),
]


@pytest.mark.parametrize("county, top, message", BAD_SYSTEMS)
def test_a_system_that_is_no_absolute_uri_is_refused(engine: Engine, tmp_path: Path, county: Any, top: str | None,
                                                     message: str) -> None:
    with pytest.raises(LoadError) as error:
        load_mapped(engine, LAKELAND, lakeland_mapping(tmp_path, county_system=county, top=top or FACILITY))
    assert message in str(error.value) and units(engine) == {}
