"""Chained parameters and reverse chaining (_has) on the real Iaso and DHIS2 Sierra Leone data, both backends: each
chained search against the unchained search that must give the same matches, as trusted and as scoped tokens (a
subtree, an account), _include/_revinclude across the reference parameters, what cannot be followed (400), the self
link, and the CapabilityStatement that declares it all."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from server.access.mint import mint_token
from server.app import create_app
from server.context import ServerContext
from server.engine import searches
from server.engine.caller import TRUSTED, Caller
from server.engine.rendered import materialized
from server.errors import FhirError, InvalidRequest, InvalidValue, UnsupportedParameter
from tests.support.chained import (
    ALIAS,
    BASE,
    DATA_SOURCE,
    DHIS2,
    IASO,
    all_pages,
    ids,
    included,
    matched,
    named,
    real_context,
    search,
    subtree,
)
from tests.support.validators import assert_valid

# Iaso: DS Boromo (CTtB0TPRvWc) in Boucle du Mouhoun (awG7snlrjVy), its 9 health areas (Siby: GpK1shB1nf4), DS
# Tougan (LatuEy3yR38). DHIS2 Sierra Leone (ImspTQPwCqd): the district Bo (O6uvpzGd5pu, code OU_264) and its 15
# chiefdoms, Bo's chiefdom Badjia (YuQRtpLP10I).


@pytest.fixture(scope="module")
def ctx(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerContext]:
    context = real_context(backend_url, tmp_path_factory.mktemp("var"))
    yield context
    context.db.dispose()


@pytest.fixture(scope="module")
def known(ctx: ServerContext) -> dict[str, str]:
    return ids(ctx)


# id, type, chained query, the unchained query with the same matches (None: none), their total
CASES = [
    pytest.param("Location", "partof.identifier=CTtB0TPRvWc", "partof={CTtB0TPRvWc}", 9,
                 id="health-areas-of-a-district-by-its-dhis2-uid"),
    pytest.param("Location", f"partof.identifier={IASO}|CTtB0TPRvWc", "partof={CTtB0TPRvWc}", 9, id="with-its-system"),
    pytest.param("Location", f"partof.identifier={DHIS2}|CTtB0TPRvWc", None, 0, id="under-another-system"),
    pytest.param("Location", f"partof.identifier={DHIS2}|O6uvpzGd5pu", "partof={O6uvpzGd5pu}", 15,
                 id="chiefdoms-of-bo-by-uid"),
    pytest.param("Location", f"partof.identifier={ALIAS}|OU_264", "partof={O6uvpzGd5pu}", 15, id="by-dhis2-code"),
    pytest.param("Location", "partof.identifier=CTtB0TPRvWc,O6uvpzGd5pu", "partof={CTtB0TPRvWc},{O6uvpzGd5pu}", 24,
                 id="values-or-ed"),
    pytest.param("Location", "partof.identifier:text=cttb0", "partof={CTtB0TPRvWc}", 9, id="identifier-text"),
    pytest.param("Location", "partof.identifier:not=CTtB0TPRvWc&organization.identifier=iaso", None, 135 - 9,
                 id="identifier-not"),
    pytest.param("Location", "partof.name:exact=Bo", "partof={O6uvpzGd5pu}", 15, id="name-exact"),
    pytest.param("Location", "partof.name=ds boro", "partof={CTtB0TPRvWc}", 9, id="name-starts-with"),
    pytest.param("Location", "partof.name:contains=mouhoun", "partof={awG7snlrjVy}", 6, id="name-contains"),
    pytest.param("Location", "partof.type=DIST", "partof:below={awG7snlrjVy}&type=AREA", 45, id="type"),
    pytest.param("Location", "partof.type:text=level 2", "type=sierra-leone-l3", 152, id="type-text"),
    pytest.param("Location", "partof.type:not=DIST&organization.identifier=iaso",
                 "organization={org:iaso}&partof:missing=false&type:not=AREA", 90, id="type-not"),
    pytest.param("Location", "partof.partof:missing=true", "partof={zmSNCYjqQGj},{ImspTQPwCqd}", 1 + 13,
                 id="children-of-the-roots"),
    pytest.param("Location", "partof._id={CTtB0TPRvWc}", "partof={CTtB0TPRvWc}", 9, id="id"),
    pytest.param("Location", "partof:Location.identifier=CTtB0TPRvWc", "partof={CTtB0TPRvWc}", 9, id="type-named"),
    pytest.param("Location", "partof.identifier=CTtB0TPRvWc&name=b", "partof={CTtB0TPRvWc}&name=b", 2,
                 id="and-a-plain-parameter"),
    pytest.param("Location", "partof.partof.identifier=awG7snlrjVy", "partof:below={awG7snlrjVy}&type=AREA", 45,
                 id="two-hops"),
    pytest.param("Location", "partof.partof={awG7snlrjVy}", "partof:below={awG7snlrjVy}&type=AREA", 45,
                 id="two-hops-to-a-reference"),
    pytest.param("Location", "partof.partof.partof.identifier=ImspTQPwCqd", "type=sierra-leone-l4", 1166,
                 id="three-hops"),
    pytest.param("Location", "partof.partof:below={ImspTQPwCqd}",
                 "partof:below={ImspTQPwCqd}&type:not=sierra-leone-l2", 1331 - 13, id="parent-below"),
    pytest.param("Location", "organization.identifier=iaso", "organization={org:iaso}", 136, id="organization"),
    pytest.param("Location", f"organization.identifier={DATA_SOURCE}|sierra-leone", "organization={org:sierra-leone}",
                 1332, id="organization-with-system"),
    pytest.param("Location", "organization.name=sierra", "organization={org:sierra-leone}", 1332,
                 id="organization-name"),
    pytest.param("Location", "organization.name:exact=Iaso", "organization={org:iaso}", 136, id="organization-exact"),
    pytest.param("Location", "organization.identifier=iaso&partof.type=DIST", "partof:below={awG7snlrjVy}&type=AREA",
                 45, id="organization-and-partof"),
    pytest.param("Location", "_has:Location:partof:type=DIST", "_id={awG7snlrjVy}", 1, id="has-a-district"),
    pytest.param("Location", "_has:Location:partof:identifier=GpK1shB1nf4", "_id={CTtB0TPRvWc}", 1,
                 id="has-a-child-by-uid"),
    pytest.param("Location", f"_has:Location:partof:identifier={DHIS2}|O6uvpzGd5pu", "_id={ImspTQPwCqd}", 1,
                 id="has-sierra-leone"),
    pytest.param("Location", "_has:Location:partof:_has:Location:partof:type=AREA", "_id={awG7snlrjVy}", 1,
                 id="has-nested"),
    pytest.param("Location", "_has:Location:partof:partof.identifier=awG7snlrjVy", "_id={awG7snlrjVy}", 1,
                 id="has-then-chain"),
    pytest.param("Location", "_has:Location:partof:type=AREA&partof.identifier=awG7snlrjVy", "partof={awG7snlrjVy}", 6,
                 id="has-and-chain"),
    pytest.param("Location", "partof._has:Location:partof:identifier=GpK1shB1nf4", "partof={CTtB0TPRvWc}", 9,
                 id="chain-then-has"),
    pytest.param("Organization", "_has:Location:organization:status=active", "_id={org:iaso},{org:sierra-leone}", 2,
                 id="organizations-with-an-active-location"),
    pytest.param("Organization", "_has:Location:organization:status=inactive", None, 0, id="organizations-none"),
    pytest.param("Organization", f"_has:Location:organization:partof.identifier={DHIS2}|O6uvpzGd5pu",
                 "_id={org:sierra-leone}", 1, id="organization-of-bo-s-chiefdoms"),
    pytest.param("Organization", "_has:Location:organization:identifier=CTtB0TPRvWc", "_id={org:iaso}", 1,
                 id="organization-of-a-unit"),
    pytest.param("Organization", "_has:Location:organization:_has:Location:partof:identifier=GpK1shB1nf4",
                 "_id={org:iaso}", 1, id="organization-nested"),
]


@pytest.mark.parametrize(("rtype", "chained", "unchained", "total"), CASES)
def test_chained_matches_the_unchained_search(ctx: ServerContext, known: dict[str, str], rtype: str, chained: str,
                                              unchained: str | None, total: int) -> None:
    bundle = search(ctx, rtype, named(chained, known) + "&_count=100")
    assert bundle["total"] == total
    if unchained is not None:
        assert all_pages(ctx, rtype, named(chained, known) + "&_count=100") == \
            all_pages(ctx, rtype, named(unchained, known) + "&_count=100")
    assert_valid(bundle)


# a token limited to subtrees (roots as ids or as identifiers), to its account, or of another account
SCOPED = [
    pytest.param(("{CTtB0TPRvWc}",), "Location", "partof.identifier=CTtB0TPRvWc", 9, id="district-sees-its-areas"),
    pytest.param((f"{IASO}|CTtB0TPRvWc",), "Location", "partof.identifier=CTtB0TPRvWc", 9, id="root-by-identifier"),
    pytest.param(("{CTtB0TPRvWc}",), "Location", "partof.identifier=awG7snlrjVy", 0,
                 id="parent-outside-the-subtree"),
    pytest.param(("{CTtB0TPRvWc}",), "Location", "partof.partof.identifier=awG7snlrjVy", 0,
                 id="grandparent-outside-the-subtree"),
    pytest.param(("{awG7snlrjVy}",), "Location", "partof.partof.identifier=awG7snlrjVy", 45, id="region-sees-two-hops"),
    pytest.param(("{LatuEy3yR38}",), "Location", "partof.identifier=CTtB0TPRvWc", 0, id="another-district"),
    pytest.param(("{CTtB0TPRvWc}",), "Location", "_has:Location:partof:identifier=GpK1shB1nf4", 1,
                 id="has-inside"),
    pytest.param(("{GpK1shB1nf4}",), "Location", "_has:Location:partof:identifier=GpK1shB1nf4", 0,
                 id="has-parent-outside"),
    pytest.param(("{CTtB0TPRvWc}",), "Location", "_has:Location:partof:_has:Location:partof:type=AREA", 0,
                 id="has-nested-outside"),
    pytest.param(("{O6uvpzGd5pu}",), "Location", f"partof.identifier={DHIS2}|O6uvpzGd5pu", 15, id="bo"),
    pytest.param(("{O6uvpzGd5pu}",), "Location", "partof.partof.identifier=ImspTQPwCqd", 0, id="bo-country-outside"),
    pytest.param(("{CTtB0TPRvWc}",), "Location", "organization.identifier=iaso", 0,
                 id="subtree-sees-no-organization"),
    pytest.param((), "Location", "organization.identifier=iaso", 136, id="account-sees-its-organizations"),
    pytest.param(("{O6uvpzGd5pu}",), "Organization", "_has:Location:organization:status=active", 0,
                 id="subtree-no-organization-has"),
    pytest.param((), "Organization", "_has:Location:organization:status=active", 2, id="account-organization-has"),
    pytest.param((), "Organization", f"_has:Location:organization:partof.identifier={DHIS2}|O6uvpzGd5pu", 1,
                 id="account-organization-has-chained"),
]


@pytest.mark.parametrize(("roots", "rtype", "query", "total"), SCOPED)
def test_every_hop_applies_the_callers_scope(ctx: ServerContext, known: dict[str, str], roots: tuple[str, ...],
                                             rtype: str, query: str, total: int) -> None:
    caller = subtree(*(named(r, known) if r.startswith("{") else r for r in roots))
    bundle = search(ctx, rtype, named(query, known) + "&_count=100", caller)
    assert bundle["total"] == total and len(matched(bundle)) == min(total, 100)


def test_another_account_sees_nothing_through_a_chain(ctx: ServerContext) -> None:
    elsewhere = subtree(account="elsewhere")
    for rtype, query in (("Location", "partof.identifier=CTtB0TPRvWc"), ("Location", "organization.identifier=iaso"),
                         ("Organization", "_has:Location:organization:status=active")):
        assert search(ctx, rtype, query, elsewhere)["total"] == 0


REFUSED = [
    pytest.param("Location", "partof.colour=x", UnsupportedParameter, id="unknown-parameter-of-the-target"),
    pytest.param("Location", "name.identifier=x", UnsupportedParameter, id="not-a-reference"),
    pytest.param("Location", "colour.name=x", UnsupportedParameter, id="unknown-reference"),
    pytest.param("Location", "partof:Organization.name=x", UnsupportedParameter, id="another-type-named"),
    pytest.param("Location", "partof:Patient.name=x", UnsupportedParameter, id="a-type-not-served"),
    pytest.param("Location", "partof.partof.partof.partof.identifier=x", InvalidRequest, id="four-hops"),
    pytest.param("Location", "_has:Location:partof:_has:Location:partof:_has:Location:partof:_has:Location:partof:"
                             "type=x", InvalidRequest, id="four-has"),
    pytest.param("Location", "partof.partof._has:Location:partof:_has:Location:partof:type=x", InvalidRequest,
                 id="four-mixed"),
    pytest.param("Location", "_has:Patient:subject:name=x", UnsupportedParameter, id="has-a-type-not-served"),
    pytest.param("Location", "_has:Location:organization:name=x", UnsupportedParameter, id="has-wrong-target"),
    pytest.param("Location", "_has:Location:name:name=x", UnsupportedParameter, id="has-not-a-reference"),
    pytest.param("Location", "_has:Location:partof=x", InvalidRequest, id="has-malformed"),
    pytest.param("Location", "_has=x", InvalidRequest, id="has-alone"),
    pytest.param("Location", "partof.=x", InvalidRequest, id="nothing-after-the-dot"),
    pytest.param("Location", ".name=x", UnsupportedParameter, id="nothing-before-the-dot"),
    pytest.param("Location", "partof.name:sounds=x", UnsupportedParameter, id="modifier-the-target-lacks"),
    pytest.param("Location", "partof.status=bogus", InvalidValue, id="value-the-target-refuses"),
    pytest.param("Location", "partof._sort=name", UnsupportedParameter, id="result-parameter"),
    pytest.param("Organization", "name.name=x", UnsupportedParameter, id="organization-not-a-reference"),
]


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


INCLUDES = [
    pytest.param("Organization", "identifier=iaso&_revinclude=Location:organization", TRUSTED, {"org:iaso"}, 136,
                 id="organization-revinclude-locations"),
    pytest.param("Location", "partof.identifier=CTtB0TPRvWc&_include=Location:organization", TRUSTED,
                 set(), {"Organization/{org:iaso}"}, id="include-organization"),
    pytest.param("Location", "_id={GpK1shB1nf4}&_include=Location:partof", TRUSTED, set(), {"Location/{CTtB0TPRvWc}"},
                 id="include-partof"),
    pytest.param("Location", "_id={CTtB0TPRvWc}&_revinclude=Location:partof", TRUSTED, set(), 9,
                 id="revinclude-partof"),
    pytest.param("Location", "partof.identifier=CTtB0TPRvWc&_include=Location:organization", "{CTtB0TPRvWc}", set(),
                 set(), id="subtree-token-includes-no-organization"),
    pytest.param("Location", "_id={CTtB0TPRvWc}&_include=Location:partof", "{CTtB0TPRvWc}", set(), set(),
                 id="subtree-token-includes-no-parent-outside"),
]


@pytest.mark.parametrize(("rtype", "query", "who", "matches", "includes"), INCLUDES)
def test_include_and_revinclude_across_the_references(ctx: ServerContext, known: dict[str, str], rtype: str,
                                                      query: str, who: Caller | str, matches: set[str],
                                                      includes: set[str] | int) -> None:
    caller = subtree(named(who, known)) if isinstance(who, str) else who
    bundle = search(ctx, rtype, named(query, known), caller)
    if matches:
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
