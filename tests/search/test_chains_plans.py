"""Each chained and _has search is answered through indexes in the statements its unchained counterpart runs, on
both backends: no more statements (no round trip per hop: the chain is a subquery of the search's own statement),
no large table read whole that the unchained search does not read whole, and none at all when the chain selects
few rows. Database: a 3000-unit demo pyramid, Iaso and DHIS2 Sierra Leone, analyzed (tests.support.query_plans)."""
from __future__ import annotations


import pytest
from sqlalchemy import text

from server.engine.context import ServerContext
from server.engine.caller import TRUSTED
from tests.support.chained import DHIS2, ids, named, subtree
from tests.support.fixtures import context_fixture
from tests.support.query_plans import plan_context, scanned, statements


ctx = context_fixture(plan_context)


@pytest.fixture(scope="module")
def known(ctx: ServerContext) -> dict[str, str]:
    """Besides the real units: a demo region (`region`), its first district (`district`) and their names."""
    found = ids(ctx)
    with ctx.db.connect() as conn:
        region, region_ref = conn.exec_driver_sql(
            "SELECT u.id, u.source_ref FROM org_unit u JOIN org_unit_type t ON t.id = u.org_unit_type_id "
            "WHERE t.short_name = 'REGION' ORDER BY u.id LIMIT 1").one()
        district, district_ref, district_name = conn.execute(text(
            "SELECT id, source_ref, name FROM org_unit WHERE parent_id = :region ORDER BY id LIMIT 1"),
            {"region": region}).one()
    return {**found, "region": str(region), "region_ref": region_ref, "district": str(district),
            "district_ref": district_ref, "district_name": district_name}


# type, chained, the unchained search of the same matches (or size), and the search whose plans (its count
# included) the chain's may share full scans with (None: none allowed; the unchained search when the chain selects
# many rows, as it does; the target parameter unchained when it plans a scan itself)
CHAINS = [
    pytest.param("Location", "partof.identifier={district_ref}", "partof={district}", None, id="partof.identifier"),
    pytest.param("Location", f"partof.identifier={DHIS2}|O6uvpzGd5pu", "partof={O6uvpzGd5pu}",
                 f"identifier={DHIS2}|O6uvpzGd5pu", id="partof.identifier-system"),
    pytest.param("Location", "partof.name:exact={district_name}", "partof={district}", None, id="partof.name"),
    pytest.param("Location", "partof.name=ds boro", "partof={CTtB0TPRvWc}", None, id="partof.name-prefix"),
    pytest.param("Location", "partof.type=REGION", "type=DISTRICT", None, id="partof.type"),
    pytest.param("Location", "partof.partof.identifier={region_ref}", "partof:below={region}&type=HEALTH_AREA", None,
                 id="partof.partof.identifier"),
    pytest.param("Location", "partof.partof.partof.identifier=ImspTQPwCqd", "type=sierra-leone-l4",
                 "type=sierra-leone-l4", id="three-hops"),
    pytest.param("Location", "organization.identifier=iaso", "organization={org:iaso}", None,
                 id="organization.identifier"),
    pytest.param("Location", "organization.name=sierra", "organization={org:sierra-leone}",
                 "organization={org:sierra-leone}", id="organization.name"),
    pytest.param("Location", "partof.identifier:text=cttb0", "partof={CTtB0TPRvWc}", "identifier:text=cttb0",
                 id="partof.identifier-text"),
    pytest.param("Location", "partof.name:contains=mouhoun", "partof={awG7snlrjVy}", "name:contains=mouhoun",
                 id="partof.name-contains"),
    pytest.param("Location", "partof.type:not=REGION", "type:not=DISTRICT", "type:not=DISTRICT", id="partof.type-not"),
    pytest.param("Location", "partof.partof:above={GpK1shB1nf4}", "partof={CTtB0TPRvWc},{awG7snlrjVy}", None,
                 id="partof.partof-above"),
    pytest.param("Location", "organization.identifier:not=iaso", "organization={org:demo},{org:sierra-leone}",
                 "organization={org:demo},{org:sierra-leone}", id="organization.identifier-not"),
    # 1 km: Iaso's unit only (the demo's districts, with a boundary, are rendered per request: one more statement)
    pytest.param("Location", "_has:Location:partof:near=12.0464|-3.0803|1", "_id={GpK1shB1nf4}",
                 "near=12.0464|-3.0803|30", id="has-near"),
    pytest.param("Location", "_has:Location:partof:type=CHR", "type=CHR", None, id="has"),
    pytest.param("Location", "_has:Location:partof:_has:Location:partof:type=CHR", "type=DISTRICT", None,
                 id="has-nested"),
    pytest.param("Location", "_has:Location:partof:identifier=GpK1shB1nf4", "_id={CTtB0TPRvWc}", None,
                 id="has-identifier"),
    pytest.param("Organization", "_has:Location:organization:status=active", "active=true", None,
                 id="organization-has"),
    pytest.param("Organization", "_has:Location:organization:type=HF", "identifier=iaso", None,
                 id="organization-has-type"),
    pytest.param("Organization", f"_has:Location:organization:partof.identifier={DHIS2}|O6uvpzGd5pu",
                 "identifier=sierra-leone", f"Location?identifier={DHIS2}|O6uvpzGd5pu", id="organization-has-chained"),
]
CALLERS = [pytest.param(None, id="trusted"), pytest.param("{region}", id="subtree"), pytest.param("", id="account")]


@pytest.mark.parametrize("root", CALLERS)
@pytest.mark.parametrize(("rtype", "chained", "unchained", "baseline"), CHAINS)
def test_a_chain_is_one_statement_through_indexes(ctx: ServerContext, known: dict[str, str], root: str | None,
                                                  rtype: str, chained: str, unchained: str,
                                                  baseline: str | None) -> None:
    caller = TRUSTED if root is None else subtree(named(root, known)) if root else subtree()
    with_chain = statements(ctx, rtype, named(chained, known), caller)
    without = statements(ctx, rtype, named(unchained, known), caller)
    # a count is run each time when a type the chain crosses keeps no versions (its changes would go unseen), with
    # the look-ups its condition needs (a search seen before runs its kept page statement alone)
    recounted = 2 if rtype == "Location" and chained.startswith("organization.") else 0
    assert len(with_chain) <= len(without) + recounted, [s.sql for s in with_chain]
    btype, _, bquery = baseline.rpartition("?") if baseline else ("", "", "")
    allowed = scanned(ctx, statements(ctx, btype or rtype, named(bquery, known), caller, counted=True)) \
        if baseline else set()
    assert scanned(ctx, with_chain) <= allowed
    # the first request after a load also builds the chain's conditions: their look-ups go by indexes too
    assert scanned(ctx, statements(ctx, rtype, named(chained, known), caller, cold=True)) <= allowed
