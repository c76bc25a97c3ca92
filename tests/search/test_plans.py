"""An index behind every search parameter, on both backends: each search runs as a client sends it (a token's
scope, counts, pages in id order), and the plan of every statement it runs must not read the whole unit table
(no scan of it, no walk of one of its indexes without a condition on that index, as a page found by walking the
id index and testing every row would be)."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from plugins.orgunits.tables import org_unit, org_unit_name, org_unit_type
from server.access.mint import mint_token
from server.engine.context import ServerContext, create_context
from server.engine.caller import Caller, caller_of
from server.declare.rendered import Rendered
from server.engine.searches import run_operation, search_type
from server.params.text import normalize
from server.storage.prerender import refresh
from tests.support.contexts import SECRET, make_settings
from tests.support.plans import SECOND_SOURCE_UNITS, captured, full_scans, plan_dataset, read_by, tables_read

SIZE = 20_000  # enough rows for the planners to weigh an index against a scan
BASE = "http://fhir.test/fhir"


@dataclass(frozen=True)
class Plans:
    ctx: ServerContext
    caller: Caller
    values: dict[str, Any]


def _analyze(engine: Engine) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE" if engine.dialect.name == "postgresql" else "ANALYZE")


def _values(engine: Engine, later: Any) -> dict[str, Any]:
    """Real values drawn from the data: a district, a facility, a name prefix, identifiers, a position."""
    def first(query: Any) -> Any:
        with engine.connect() as conn:
            return conn.execute(query.limit(1)).first()

    def of_type(code: str) -> Any:
        return (select(org_unit).join(org_unit_type, org_unit.c.org_unit_type_id == org_unit_type.c.id)
                .where(org_unit_type.c.short_name == code).order_by(org_unit.c.id))

    district = first(of_type("DISTRICT"))
    facility = first(of_type("CSPS").where(org_unit.c.latitude.is_not(None)))
    alias = first(select(org_unit_name.c.text).where(org_unit_name.c.position > 0).order_by(org_unit_name.c.org_unit_id))
    second = first(select(func.min(org_unit.c.source_version_id + 0), func.max(org_unit.c.source_version_id)))
    with engine.connect() as conn:
        organization = conn.exec_driver_sql(
            f"SELECT data_source_id FROM source_version WHERE id = {int(second[1])}").scalar_one()
    return {"district": district.id, "facility": facility.id, "prefix": normalize(facility.name.split()[-1])[:3],
            "start": normalize(facility.name)[:7],
            "name": facility.name, "ref": facility.source_ref, "uuid": facility.uuid, "alias": alias.text,
            "lat": facility.latitude, "lon": facility.longitude, "organization": organization,
            "since": later.isoformat(timespec="seconds")}


@pytest.fixture(scope="module")
def plans(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plans]:
    ctx = create_context(make_settings(backend_url, tmp_path_factory.mktemp("var"), auth={"secret": SECRET}))
    ctx.extensions.schema.upgrade(ctx.db)
    later = plan_dataset(ctx.db, SIZE, lambda: None)
    refresh(ctx.db, ctx.registry)  # the stored bodies, as `demo` and `load` leave them: pages splice them
    _analyze(ctx.db)
    principal = ctx.authenticator.authenticate(f"Bearer {mint_token(ctx.settings)}")
    caller, values = caller_of(ctx, principal), _values(ctx.db, later)
    found = search_type(ctx, caller, BASE, "Location", [("_id", str(values["facility"]))])["entry"][0]["resource"]
    facility = found.resource() if isinstance(found, Rendered) else found
    values["system"] = next(i["system"] for i in facility["identifier"] if i["value"] == values["ref"])
    values["type_system"] = facility["type"][0]["coding"][0]["system"]
    yield Plans(ctx, caller, values)
    ctx.db.dispose()


SEARCHES = [
    pytest.param("name={prefix}", id="name-prefix"),
    pytest.param("name={prefix}&_count=100&_total=none", id="name-prefix-no-total"),
    pytest.param("name={start}&_count=5&_after={facility}", id="name-prefix-after"),  # the facility matches it
    pytest.param("name:exact={name}", id="name-exact"),
    pytest.param("status=inactive", id="status"),
    pytest.param("status=inactive&_after={facility}", id="status-after"),
    pytest.param("identifier={ref}", id="identifier-source-ref"),
    pytest.param("identifier={system}|{ref}", id="identifier-system-value"),
    pytest.param("identifier:text={ref}", id="identifier-text"),
    pytest.param("identifier=urn:uuid:{uuid}", id="identifier-uuid"),
    pytest.param("identifier={alias}", id="identifier-alias"),
    pytest.param("type=CHR", id="type"),
    pytest.param("type={type_system}|CHR", id="type-system-code"),
    pytest.param("partof:missing=true", id="roots"),
    pytest.param("_id={facility},{district}", id="ids"),
    pytest.param("partof={district}", id="partof"),
    pytest.param("partof:below={district}", id="partof-below"),
    pytest.param("partof:below={district}&_count=100&_after={district}", id="partof-below-after"),
    pytest.param("partof:above={facility}", id="partof-above"),
    pytest.param("organization={organization}", id="organization"),
    pytest.param("_id={facility}", id="id"),
    pytest.param("_lastUpdated=ge{since}", id="last-updated"),
    pytest.param("near={lat}|{lon}|5", id="near"),
    pytest.param("name={prefix}&status=active", id="name-and-status"),
    pytest.param("type=CHR&partof:below={district}", id="type-and-below"),
    pytest.param("$children={district}", id="children"),
    pytest.param("$children={district}&status=active&_count=5", id="children-and-status"),
]


@pytest.mark.parametrize("query", SEARCHES)
def test_every_search_reads_the_units_by_an_index(plans: Plans, query: str) -> None:
    items = [tuple(p.split("=", 1)) for p in query.format(**plans.values).split("&")]
    with captured(plans.ctx.db) as statements:
        if items[0][0] == "$children":
            bundle = run_operation(plans.ctx, plans.caller, BASE, "Location", str(items[0][1]), "children", items[1:])
        else:
            bundle = search_type(plans.ctx, plans.caller, BASE, "Location", items)  # type: ignore[arg-type]
    assert bundle.get("entry"), f"{query}: the values drawn from the data must match something"
    assert statements
    scans = {s.sql: found for s in statements if (found := full_scans(plans.ctx.db, s, "org_unit"))}
    assert not scans, f"{query}: full scans of the unit table: {scans}"


@pytest.mark.parametrize("query", [pytest.param("name={prefix}", id="page-and-count"),
                                   pytest.param("name={start}&_count=1&_after={facility}", id="resumed")])
def test_a_name_walk_finds_a_units_earlier_names_by_its_id(plans: Plans, query: str) -> None:
    """Each walked name is the unit's first matching one: its earlier names are looked up by the unit's id, never
    by reading the prefix's range again for every name walked (PostgreSQL estimates a range compared in code-point
    order at one row: with the range in that look-up, it read the range per name, 1 s for a common prefix at 1M)."""
    items = [tuple(p.split("=", 1)) for p in query.format(**plans.values).split("&")]
    plans.ctx.counts.clear()
    with captured(plans.ctx.db) as statements:
        search_type(plans.ctx, plans.caller, BASE, "Location", items)  # type: ignore[arg-type]
    walks = [s for s in statements if "_earlier" in s.sql]
    assert walks
    for statement in walks:
        reads = read_by(plans.ctx.db, statement, "_earlier")
        assert reads and all("org_unit_id" in r and "norm <" not in r for r in reads), (statement.sql, reads)


@pytest.mark.parametrize("query", [
    pytest.param("status=active", id="own-column"),
    pytest.param("name=ko&identifier=x", id="side-tables-in-subqueries"),
    pytest.param("type=CSPS", id="type-column-by-its-foreign-key"),
    pytest.param("organization={organization}", id="source-column-by-its-foreign-key"),
    pytest.param("identifier=https://orgunit-fhir.example.org/fhir/sid/x|y", id="joins-in-subqueries"),
    pytest.param("_sort=-name", id="sort-own-column"),
])
def test_counts_and_pages_of_stored_bodies_read_no_type(plans: Plans, query: str) -> None:
    """Fewer joins to plan: the count of a search that filters on no type, and its page of stored bodies, read
    no org unit type (a condition on a table the unit refers to goes by the unit's foreign key, a type code is
    looked up on its own, and the stored bodies hold the types)."""
    items = [tuple(p.split("=", 1)) for p in query.format(**plans.values).split("&")]
    plans.ctx.counts.clear()
    with captured(plans.ctx.db) as counting:
        search_type(plans.ctx, plans.caller, BASE, "Location", [*items, ("_count", "0")])  # type: ignore[list-item]
    with captured(plans.ctx.db) as paging:
        search_type(plans.ctx, plans.caller, BASE, "Location", [*items, ("_total", "none")])  # type: ignore[list-item]
    counts = [read for s in counting if "org_unit" in (read := tables_read(plans.ctx.db, s))]
    pages = [read for s in paging if "org_unit_body" in (read := tables_read(plans.ctx.db, s))]
    assert counts and pages, f"{query}: no count or no page of stored bodies was run"
    assert not [read for read in counts + pages if "org_unit_type" in read], f"{query}: {counts + pages}"


def test_the_second_source_is_what_last_updated_selects(plans: Plans) -> None:
    bundle = search_type(plans.ctx, plans.caller, BASE, "Location", [("_lastUpdated", f"ge{plans.values['since']}")])
    assert bundle["total"] == SECOND_SOURCE_UNITS


def test_the_check_sees_a_page_found_by_walking_the_unit_table(plans: Plans) -> None:
    """No condition at all: the page walks the id index, which the check must report."""
    with captured(plans.ctx.db) as statements:
        search_type(plans.ctx, plans.caller, BASE, "Location", [("_count", "5"), ("_total", "none")])
    assert any(full_scans(plans.ctx.db, s, "org_unit") for s in statements)
