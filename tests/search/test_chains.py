"""Chained parameters and reverse chaining (_has) on the real Iaso and DHIS2 Sierra Leone data, both backends: each
chained search against the unchained search that must give the same matches, as trusted and as scoped tokens (a
subtree, an account), _include/_revinclude across the reference parameters, what cannot be followed (400), the self
link, and the CapabilityStatement that declares it all. The tables of cases: tests.search.chain_cases."""
from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from server.access.mint import mint_token
from server.app import create_app
from server.engine.context import ServerContext
from server.engine import searches
from server.engine.caller import TRUSTED, Caller
from server.declare.rendered import materialized
from server.errors import FhirError, UnsupportedParameter
from tests.support.chained import (
    DHIS2,
    all_pages,
    ids,
    included,
    matched,
    named,
    real_context,
    subtree,
)
from tests.search.chain_cases import CASES, INCLUDES, REFUSED, REFUSED_OVER_HTTP, SCOPED
from tests.support.fixtures import client_fixture, context_fixture
from tests.support.searching import BASE, search
from tests.support.validators import assert_valid



ctx = context_fixture(real_context)


@pytest.fixture(scope="module")
def known(ctx: ServerContext) -> dict[str, str]:
    return ids(ctx)




@pytest.mark.parametrize(("rtype", "chained", "unchained", "total"), CASES)
def test_chained_matches_the_unchained_search(ctx: ServerContext, known: dict[str, str], rtype: str, chained: str,
                                              unchained: str | None, total: int) -> None:
    bundle = search(ctx, rtype, named(chained, known) + "&_count=100")
    assert bundle["total"] == total
    if unchained is not None:
        assert all_pages(ctx, rtype, named(chained, known) + "&_count=100") == \
            all_pages(ctx, rtype, named(unchained, known) + "&_count=100")
    assert_valid(bundle)




@pytest.mark.parametrize(("who", "rtype", "query", "total"), SCOPED)
def test_every_hop_applies_the_callers_scope(ctx: ServerContext, known: dict[str, str], who: tuple[str, ...] | Caller,
                                             rtype: str, query: str, total: int) -> None:
    caller = who if isinstance(who, Caller) else subtree(*(named(r, known) if r.startswith("{") else r for r in who))
    bundle = search(ctx, rtype, named(query, known) + "&_count=100", caller)
    assert bundle["total"] == total and len(matched(bundle)) == min(total, 100)




@pytest.mark.parametrize(("rtype", "query", "error"), REFUSED)
def test_what_cannot_be_followed_is_refused(ctx: ServerContext, rtype: str, query: str,
                                            error: type[FhirError]) -> None:
    with pytest.raises(error) as raised:
        search(ctx, rtype, query)
    assert raised.value.status == 400


@pytest.mark.parametrize("strict", [False, True], ids=["lenient", "strict"])
def test_a_chain_is_never_ignored(ctx: ServerContext, strict: bool) -> None:
    with pytest.raises(UnsupportedParameter):
        searches.search_type(ctx, TRUSTED, BASE, "Location", [("partof.colour", "x")], strict=strict)
    assert search(ctx, "Location", "partof.name=")["total"] == 1468  # an empty value is ignored, as any


def test_a_chain_over_a_type_not_served_is_refused(migrated_url: str, tmp_path: Path) -> None:
    alone = real_context(migrated_url, tmp_path, plugins={"organization": {"enabled": False}})
    try:
        for query in ("organization.name=Iaso", "_has:Organization:name:name=x"):
            with pytest.raises(UnsupportedParameter):
                search(alone, "Location", query)
        assert search(alone, "Location", "partof.identifier=CTtB0TPRvWc")["total"] == 9
    finally:
        alone.db.dispose()


def test_pages_and_self_links_keep_the_chain(ctx: ServerContext) -> None:
    query = f"partof.partof:Location.identifier={DHIS2}|O6uvpzGd5pu&_count=7"
    bundle = search(ctx, "Location", query)
    assert bundle["link"][0]["url"] == (f"{BASE}/Location?partof.partof:Location.identifier="
                                        f"{DHIS2}|O6uvpzGd5pu&_count=7")
    pages = all_pages(ctx, "Location", query)
    assert len(pages) == len(set(pages)) == bundle["total"] == 125  # Bo's facilities
    assert pages == all_pages(ctx, "Location", query.replace("_count=7", "_count=100"))




@pytest.mark.parametrize(("rtype", "query", "who", "matches", "includes"), INCLUDES)
def test_include_and_revinclude_across_the_references(ctx: ServerContext, known: dict[str, str], rtype: str,
                                                      query: str, who: Caller | str, matches: set[str] | None,
                                                      includes: set[str] | int) -> None:
    caller = subtree(named(who, known)) if isinstance(who, str) else who
    bundle = search(ctx, rtype, named(query, known), caller)
    if matches is not None:
        assert matched(bundle) == {named(f"{{{m}}}", known) for m in matches}
    got = included(bundle)
    assert len(got) == includes if isinstance(includes, int) else got == {named(i, known) for i in includes}


def test_an_operation_takes_chains(ctx: ServerContext, known: dict[str, str]) -> None:
    bundle = materialized(searches.run_operation(ctx, TRUSTED, BASE, "Location", known["awG7snlrjVy"], "children",
                                                 [("_has:Location:partof:identifier", "GpK1shB1nf4")]))
    assert [e["resource"]["id"] for e in bundle["entry"]] == [known["CTtB0TPRvWc"]]


def test_over_http(ctx: ServerContext, known: dict[str, str]) -> None:
    with TestClient(create_app(ctx.settings, context=ctx), base_url="http://testserver") as client:
        client.headers["Authorization"] = f"Bearer {mint_token(ctx.settings)}"
        answer = client.get("/fhir/Location", params={"partof.identifier": f"{DHIS2}|O6uvpzGd5pu", "_count": "0"})
        assert answer.status_code == 200 and answer.json()["total"] == 15
        refused = client.get("/fhir/Location?partof.partof.partof.partof.identifier=x")
        assert refused.status_code == 400 and refused.json()["resourceType"] == "OperationOutcome"
        scoped = mint_token(ctx.settings, roots=[f"Location/{known['CTtB0TPRvWc']}"])
        hidden = client.get("/fhir/Location?partof.identifier=awG7snlrjVy",
                            headers={"Authorization": f"Bearer {scoped}"})
        assert hidden.status_code == 200 and hidden.json()["total"] == 0


def test_the_capability_statement_declares_chains_and_has(ctx: ServerContext) -> None:
    statement = ctx.capability_statement
    assert_valid(statement)
    resources = {r["type"]: r for r in statement["rest"][0]["resource"]}
    location = {p["name"]: p for p in resources["Location"]["searchParam"]}
    organization = {p["name"]: p for p in resources["Organization"]["searchParam"]}
    for chained in ("partof.identifier", "partof.name", "partof.type", "partof.partof", "organization.identifier",
                    "organization.name"):
        assert chained in location[chained.partition(".")[0]]["documentation"]
    assert "at most 3 references" in location["partof"]["documentation"]
    assert location["_has"]["type"] == "special" and "_has:Location:partof:" in location["_has"]["documentation"]
    assert "_has:Location:organization:" in organization["_has"]["documentation"]
    assert "Location:organization" in resources["Organization"]["searchRevInclude"]
    assert set(resources["Location"]["searchInclude"]) == {"Location:partof", "Location:organization"}


client = client_fixture(authorized=True)


@pytest.mark.parametrize("prefer", ["handling=lenient", "handling=strict", None], ids=["lenient", "strict", "none"])
@pytest.mark.parametrize(("rtype", "query"), [pytest.param(*p.values[:2], id=p.id) for p in REFUSED]
                         + REFUSED_OVER_HTTP)
def test_what_cannot_be_followed_is_a_400_over_http(client: TestClient, rtype: str, query: str,
                                                    prefer: str | None) -> None:
    answer = client.get(f"/fhir/{rtype}?{query}", headers={"Prefer": prefer} if prefer else {})
    assert answer.status_code == 400, answer.text
    outcome = answer.json()
    assert outcome["resourceType"] == "OperationOutcome" and outcome["issue"][0]["severity"] == "error"
    assert_valid(outcome)
