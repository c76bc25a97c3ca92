"""More of issue 19's forms on the real Iaso and DHIS2 Sierra Leone data, both backends (tests.search.test_chains
holds the first tables): the README's examples, the modifiers of each parameter type on the last parameter of a
chain (reference :above, :missing, token :not, date prefixes, near), chains through both references, _has down to
the health facilities, scoped tokens on each of those forms (a chain never tells what lies outside the scope), the
includes of a scoped token, and what cannot be followed answered over HTTP as a 400 OperationOutcome whatever
`Prefer: handling` says."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from server.access.mint import mint_token
from server.app import create_app
from server.context import ServerContext
from server.engine.caller import TRUSTED, Caller
from tests.support.chained import (
    DHIS2,
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

# Iaso: DS Boromo (CTtB0TPRvWc, 9 health areas, 15 facilities) in Boucle du Mouhoun (awG7snlrjVy) in Burkina Faso
# (zmSNCYjqQGj); its area Siby (GpK1shB1nf4) holds CSPS Siby at 12.0464, -3.0803 and CSPS Secaco; 37 areas hold a
# facility (HF). DHIS2 Sierra Leone (ImspTQPwCqd): the district Bo (O6uvpzGd5pu), 15 chiefdoms, 125 facilities; each
# of the 152 chiefdoms (level 3) holds a facility (level 4).
SIBY = "12.0464|-3.0803"


@pytest.fixture(scope="module")
def ctx(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerContext]:
    context = real_context(backend_url, tmp_path_factory.mktemp("var"))
    yield context
    context.db.dispose()


@pytest.fixture(scope="module")
def known(ctx: ServerContext) -> dict[str, str]:
    return ids(ctx)


# type, chained query, the unchained query with the same matches (None: none), their total
CASES = [
    pytest.param("Location", "partof.name:exact=DS Boromo&type=AREA", "partof={CTtB0TPRvWc}&type=AREA", 9,
                 id="readme-areas-of-the-district-named"),
    pytest.param("Location", "partof.partof.identifier=CTtB0TPRvWc", "partof:below={CTtB0TPRvWc}&type=HF", 15,
                 id="facilities-of-a-district-by-its-uid"),
    pytest.param("Location", "partof.partof:above={GpK1shB1nf4}", "partof={CTtB0TPRvWc},{awG7snlrjVy},{zmSNCYjqQGj}",
                 16, id="reference-above"),
    pytest.param("Location", "partof.name:missing=false", "partof:missing=false", 1466, id="string-missing"),
    pytest.param("Location", "partof.identifier:missing=true", None, 0, id="token-missing"),
    pytest.param("Location", "partof.status=active", "partof:missing=false", 1466, id="status"),
    pytest.param("Location", "partof.status:not=active", None, 0, id="status-not"),
    pytest.param("Location", "partof._lastUpdated=gt2000-01-01", "partof:missing=false", 1466, id="date-prefix"),
    pytest.param("Location", "partof._lastUpdated=lt2000-01-01", None, 0, id="date-prefix-none"),
    pytest.param("Location", "partof.organization.identifier=iaso", "partof:missing=false&organization={org:iaso}",
                 135, id="through-both-references"),
    pytest.param("Location", "organization.identifier:not=iaso", "organization={org:sierra-leone}", 1332,
                 id="organization-identifier-not"),
    pytest.param("Location", "organization.name:contains=leone", "organization={org:sierra-leone}", 1332,
                 id="organization-name-contains"),
    pytest.param("Location", "organization._id={org:iaso}", "organization={org:iaso}", 136, id="organization-id"),
    pytest.param("Location", "organization:Organization.identifier=iaso", "organization={org:iaso}", 136,
                 id="organization-type-named"),
    pytest.param("Location", "organization.active=true", "_lastUpdated=gt2000-01-01", 1468, id="organization-active"),
    pytest.param("Location", "_has:Location:partof:type=HF", None, 37, id="has-a-facility"),
    pytest.param("Location", "_has:Location:partof:type=sierra-leone-l4", "type=sierra-leone-l3", 152,
                 id="has-a-dhis2-facility"),
    pytest.param("Location", f"_has:Location:partof:near={SIBY}|1", "_id={GpK1shB1nf4}", 1, id="has-near"),
    pytest.param("Location", f"_has:Location:partof:_has:Location:partof:near={SIBY}|1", "_id={CTtB0TPRvWc}", 1,
                 id="has-nested-near"),
    pytest.param("Location", "_has:Location:partof:type=HF&partof.identifier=CTtB0TPRvWc", None, 7,
                 id="has-and-chain-boromo"),
    pytest.param("Organization", "_has:Location:organization:type=HF", "_id={org:iaso}", 1, id="org-has-iaso-type"),
    pytest.param("Organization", "_has:Location:organization:type=sierra-leone-l4", "_id={org:sierra-leone}", 1,
                 id="org-has-dhis2-type"),
    pytest.param("Organization", "_has:Location:organization:_has:Location:partof:type=sierra-leone-l4",
                 "_id={org:sierra-leone}", 1, id="org-has-nested"),
    pytest.param("Organization", "_has:Location:organization:partof.partof.identifier=awG7snlrjVy", "_id={org:iaso}",
                 1, id="org-has-then-two-hops"),
    pytest.param("Organization", f"_has:Location:organization:near={SIBY}|1", "_id={org:iaso}", 1, id="org-has-near"),
    pytest.param("Organization", "_has:Location:organization:status:not=active", None, 0, id="org-has-token-not"),
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


ELSEWHERE = subtree(account="elsewhere")

# a token limited to subtrees (`{ref}`), to its account (()), or of another account; the same query with a value
# naming something outside the scope and one naming nothing at all answer alike
SCOPED = [
    pytest.param(("{CTtB0TPRvWc}",), "Location", "partof.type=DIST", 9, id="type-of-the-root"),
    pytest.param(("{CTtB0TPRvWc}",), "Location", "partof.type=REG", 0, id="type-of-the-parent-outside"),
    pytest.param(("{GpK1shB1nf4}",), "Location", "partof.type=DIST", 0, id="area-root-district-outside"),
    pytest.param(("{GpK1shB1nf4}",), "Location", "partof.type=AREA", 2, id="area-root-its-facilities"),
    pytest.param(("{CTtB0TPRvWc}",), "Location", "partof.name:exact=DS Boromo", 9, id="name-of-the-root"),
    pytest.param(("{CTtB0TPRvWc}",), "Location", "partof.name:exact=Boucle du Mouhoun", 0, id="name-outside"),
    pytest.param(("{CTtB0TPRvWc}",), "Location", "partof.name:contains=mouhoun", 0, id="name-contains-outside"),
    pytest.param(("{CTtB0TPRvWc}",), "Location", "partof.identifier:not=awG7snlrjVy", 24, id="not-the-parent-outside"),
    pytest.param(("{CTtB0TPRvWc}",), "Location", "partof.identifier:not=LatuEy3yR38", 24, id="not-another-unit"),
    pytest.param(("{CTtB0TPRvWc}",), "Location", "partof.identifier:not=nothing-has-this", 24, id="not-nothing"),
    pytest.param(("{CTtB0TPRvWc}",), "Location", "partof.partof.identifier=CTtB0TPRvWc", 15, id="two-hops-inside"),
    pytest.param(("{CTtB0TPRvWc}",), "Location", "partof.partof:above={GpK1shB1nf4}", 9, id="above-inside"),
    pytest.param(("{CTtB0TPRvWc}",), "Location", "_has:Location:partof:type=HF", 7, id="has-facility-inside"),
    pytest.param(("{CTtB0TPRvWc}",), "Location", "_has:Location:partof:type=AREA", 1, id="has-area-root"),
    pytest.param(("{GpK1shB1nf4}",), "Location", "_has:Location:partof:type=AREA", 0, id="has-area-parent-outside"),
    pytest.param(("{GpK1shB1nf4}",), "Location", f"_has:Location:partof:near={SIBY}|30", 1, id="has-near-inside"),
    pytest.param(("{GpK1shB1nf4}",), "Location", f"_has:Location:partof:_has:Location:partof:near={SIBY}|30", 0,
                 id="has-nested-near-outside"),
    pytest.param(("{O6uvpzGd5pu}",), "Location", "partof.name:exact=Bo", 15, id="bo-by-name"),
    pytest.param(("{O6uvpzGd5pu}",), "Location", "partof.name:exact=Sierra Leone", 0, id="bo-country-name"),
    pytest.param(("{O6uvpzGd5pu}",), "Location", "partof.type=sierra-leone-l1", 0, id="bo-country-type"),
    pytest.param(("{O6uvpzGd5pu}",), "Location", f"partof.partof.identifier={DHIS2}|O6uvpzGd5pu", 125,
                 id="bo-facilities"),
    pytest.param(("{O6uvpzGd5pu}",), "Location", "_has:Location:partof:type=sierra-leone-l4", 15,
                 id="bo-has-facility"),
    pytest.param(("{O6uvpzGd5pu}",), "Location", "organization.name=sierra", 0, id="subtree-no-organization-name"),
    pytest.param(("{CTtB0TPRvWc}",), "Organization", "_has:Location:organization:identifier=CTtB0TPRvWc", 0,
                 id="subtree-no-organization-of-its-root"),
    pytest.param((), "Location", "organization.name=sierra", 1332, id="account-organization-name"),
    pytest.param((), "Location", "partof.partof.partof.identifier=ImspTQPwCqd", 1166, id="account-three-hops"),
    pytest.param((), "Organization", "_has:Location:organization:type=HF", 1, id="account-organization-has"),
    pytest.param(ELSEWHERE, "Location", "partof.partof.identifier=CTtB0TPRvWc", 0, id="elsewhere-two-hops"),
    pytest.param(ELSEWHERE, "Location", "organization.name=sierra", 0, id="elsewhere-organization-name"),
    pytest.param(ELSEWHERE, "Location", "_has:Location:partof:type=HF", 0, id="elsewhere-has"),
    pytest.param(ELSEWHERE, "Organization", "_has:Location:organization:type=HF", 0, id="elsewhere-organization-has"),
]


@pytest.mark.parametrize(("who", "rtype", "query", "total"), SCOPED)
def test_every_hop_applies_the_callers_scope(ctx: ServerContext, known: dict[str, str], who: tuple[str, ...] | Caller,
                                             rtype: str, query: str, total: int) -> None:
    caller = who if isinstance(who, Caller) else subtree(*(named(r, known) for r in who))
    bundle = search(ctx, rtype, named(query, known) + "&_count=100", caller)
    assert bundle["total"] == total and len(matched(bundle)) == min(total, 100)


# type, query, the caller (a Caller, or a subtree root), the matches, the included resources (or how many)
INCLUDES = [
    pytest.param("Organization", "identifier=iaso&_revinclude=Location:organization", subtree(), {"org:iaso"}, 136,
                 id="account-revinclude-locations"),
    pytest.param("Organization", "identifier=iaso&_revinclude=Location:organization", "{CTtB0TPRvWc}", set(), 0,
                 id="subtree-revinclude-no-organization"),
    pytest.param("Organization", "identifier=iaso&_revinclude=Location:organization", ELSEWHERE, set(), 0,
                 id="elsewhere-revinclude"),
    pytest.param("Location", "_id={CTtB0TPRvWc}&_revinclude=Location:partof", "{CTtB0TPRvWc}", {"CTtB0TPRvWc"}, 9,
                 id="subtree-revinclude-partof"),
    pytest.param("Location", "_id={awG7snlrjVy}&_revinclude=Location:partof", "{CTtB0TPRvWc}", set(), 0,
                 id="subtree-revinclude-outside"),
    pytest.param("Location", "partof.identifier=awG7snlrjVy&_revinclude=Location:partof", TRUSTED, set(), 45,
                 id="chain-revinclude"),
    pytest.param("Location", f"partof.identifier={DHIS2}|O6uvpzGd5pu&_include=Location:partof", TRUSTED, set(),
                 {"Location/{O6uvpzGd5pu}"}, id="chain-include-dhis2-parent"),
    pytest.param("Location", "_has:Location:partof:identifier=GpK1shB1nf4&_revinclude=Location:partof",
                 "{CTtB0TPRvWc}", {"CTtB0TPRvWc"}, 9, id="has-revinclude-scoped"),
    pytest.param("Location", "partof.identifier=GpK1shB1nf4&_include=Location:partof", "{GpK1shB1nf4}", set(),
                 {"Location/{GpK1shB1nf4}"}, id="subtree-includes-its-root"),
]


@pytest.mark.parametrize(("rtype", "query", "who", "matches", "includes"), INCLUDES)
def test_include_and_revinclude_of_a_scoped_token(ctx: ServerContext, known: dict[str, str], rtype: str, query: str,
                                                  who: Caller | str, matches: set[str],
                                                  includes: set[str] | int) -> None:
    caller = subtree(named(who, known)) if isinstance(who, str) else who
    bundle = search(ctx, rtype, named(query, known), caller)
    if matches or bundle["total"] == 0:
        assert matched(bundle) == {named(f"{{{m}}}", known) for m in matches}
    got = included(bundle)
    assert len(got) == includes if isinstance(includes, int) else got == {named(i, known) for i in includes}


@pytest.fixture(scope="module")
def client(ctx: ServerContext) -> Iterator[TestClient]:
    with TestClient(create_app(ctx.settings, context=ctx), base_url="http://testserver") as http:
        http.headers["Authorization"] = f"Bearer {mint_token(ctx.settings)}"
        yield http


# type, query: what cannot be followed, each a 400 OperationOutcome over HTTP
REFUSED = [
    pytest.param("Location", "partof.colour=x", id="unknown-parameter-of-the-target"),
    pytest.param("Location", "name.identifier=x", id="not-a-reference"),
    pytest.param("Location", "partof:Patient.name=x", id="a-type-not-served"),
    pytest.param("Location", "organization:Location.name=x", id="organization-is-no-location"),
    pytest.param("Location", "organization.partof.name=x", id="organization-has-no-partof"),
    pytest.param("Location", "organization.near=1|1|1", id="organization-has-no-near"),
    pytest.param("Location", "partof.near:missing=true", id="near-takes-no-modifier"),
    pytest.param("Location", "partof.identifier:below=x", id="token-takes-no-below"),
    pytest.param("Location", "partof.name:not=x", id="string-takes-no-not"),
    pytest.param("Location", "partof.partof.partof.partof.partof=x", id="four-hops-to-a-reference"),
    pytest.param("Location", "partof.partof.partof.partof.identifier=x", id="four-hops"),
    pytest.param("Location", "_has:Location:organization:name=x", id="has-wrong-target"),
    pytest.param("Location", "_has:Patient:subject:name=x", id="has-a-type-not-served"),
    pytest.param("Location", "_has:Location:partof:_has=x", id="has-malformed-inside"),
    pytest.param("Organization", "name.name=x", id="organization-not-a-reference"),
    pytest.param("Organization", "partof.name=x", id="organization-unknown-reference"),
    pytest.param("Organization", "_has:Location:partof:name=x", id="organization-has-wrong-target"),
    pytest.param("Organization", "_has:Location:organization:_has:Location:partof:_has:Location:partof:"
                                 "_has:Location:partof:type=x", id="organization-four-has"),
]


@pytest.mark.parametrize("prefer", ["handling=lenient", "handling=strict", None], ids=["lenient", "strict", "none"])
@pytest.mark.parametrize(("rtype", "query"), REFUSED)
def test_what_cannot_be_followed_is_a_400_over_http(client: TestClient, rtype: str, query: str,
                                                    prefer: str | None) -> None:
    answer = client.get(f"/fhir/{rtype}?{query}", headers={"Prefer": prefer} if prefer else {})
    assert answer.status_code == 400, answer.text
    outcome = answer.json()
    assert outcome["resourceType"] == "OperationOutcome" and outcome["issue"][0]["severity"] == "error"
    assert_valid(outcome)
