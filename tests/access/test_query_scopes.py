"""SMART v2 granular scopes (issue 30): a token whose scope carries a query sees, through every interaction,
exactly what that search returns to a trusted caller (and what is scoped through it), combined with its subtree
roots; several scopes on one type are a union; a query the server cannot apply fails the token closed (401 naming
the scope). Data: the small pyramid with the proof package's services (tests/proof/contract_samples.py)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from server.contract.answers import entries, every_page
from server.contract.context import contract_context
from server.engine.context import ServerContext
from plugins.orgunits.contract_samples import SUBJECT as ORGUNITS
from tests.proof.contract_samples import SUBJECT as PROOF
from tests.support.bulk import deleted_ids, export
from tests.support.contexts import bearer
from tests.support.fixtures import client_fixture, context_fixture

ctx = context_fixture(lambda url, var: contract_context(url, var, (ORGUNITS, PROOF)))
api = client_fixture()

EVERY = "system/*.rs"


def _ids(api: TestClient, url: str, headers: dict[str, str], mode: str = "match") -> set[str]:
    pages = every_page(api, url, headers)
    return {rid for page in pages for _, rid in entries(page, mode)}


def _trusted(api: TestClient, ctx: ServerContext, url: str) -> set[str]:
    return _ids(api, url, bearer(ctx.settings))


def _token(ctx: ServerContext, scopes: Sequence[str], roots: Sequence[str] | None = None) -> dict[str, str]:
    claims: dict[str, Any] = {"scope": " ".join(scopes)}
    if roots is not None:
        claims["org_unit_roots"] = list(roots)
    return bearer(ctx.settings, **claims)


# (scopes, roots, the trusted searches whose union the token sees of Location)
MATRIX = [
    pytest.param(["system/Location.rs?partof:below=Location/10", "system/HealthcareService.rs"], None,
                 ["partof:below=10"], id="a-district-below"),
    pytest.param(["system/Location.rs?type=CSPS", "system/HealthcareService.rs"], None, ["type=CSPS"],
                 id="a-type"),
    pytest.param(["system/Location.rs?_id=20", "system/Location.rs?_id=3", "system/HealthcareService.rs"], None,
                 ["_id=20", "_id=3"], id="two-scopes-a-union"),
    pytest.param(["system/Location.rs?status=active&partof=Location/20", "system/HealthcareService.rs"], None,
                 ["status=active&partof=20"], id="two-parameters-both-apply"),
    pytest.param(["system/Location.rs?type=CSPS", "system/Location.rs", "system/HealthcareService.rs"], None,
                 [""], id="an-unfiltered-scope-grants-all"),
    pytest.param(["system/Location.rs?partof:below=Location/10", "system/HealthcareService.rs"],
                 ["Location/10", "Location/3"], ["partof:below=10"], id="with-subtree-roots-both-apply"),
    pytest.param(["system/Location.rs?partof.name=DS%20Boromo", "system/HealthcareService.rs"], None,
                 ["partof.name=DS Boromo"], id="a-chain"),
    pytest.param(["system/Location.rs?_has:HealthcareService:location:active=false", "system/HealthcareService.rs"],
                 None, ["_has:HealthcareService:location:active=false"], id="has"),
]


@pytest.mark.parametrize(("scopes", "roots", "searches"), MATRIX)
def test_a_query_scope_sees_exactly_what_its_search_returns_through_every_interaction(
        api: TestClient, ctx: ServerContext, scopes: list[str], roots: list[str] | None, searches: list[str]) -> None:
    expected = set().union(*(_trusted(api, ctx, f"/fhir/Location?{s}") for s in searches))
    every = _trusted(api, ctx, "/fhir/Location")
    assert expected and expected != every or searches == [""], "a case that tells nothing"
    headers = _token(ctx, scopes, roots)
    for _ in ("cold", "warm"):
        assert _ids(api, "/fhir/Location?_count=3", headers) == expected
        for rid in sorted(every):
            assert api.get(f"/fhir/Location/{rid}", headers=headers).status_code == (200 if rid in expected else 404)
            vread = api.get(f"/fhir/Location/{rid}/_history/1", headers=headers).status_code
            assert (vread in (200, 410)) is (rid in expected) or vread == 404 and rid not in expected
        history = _ids(api, "/fhir/Location/_history?_count=50", headers)
        assert {rid for rid in history} <= expected
        included = _ids(api, "/fhir/Location?_include=Location:partof", headers, "include")
        assert included <= expected
        assert _ids(api, "/fhir/Location?_has:HealthcareService:location:active=true", headers) == \
            expected & _trusted(api, ctx, "/fhir/Location?_has:HealthcareService:location:active=true")
        # what is scoped through Locations follows them: the services at one of the Locations it sees (and, to a
        # token seeing the whole account, every service of it: one at no Location too)
        services = _trusted(api, ctx, f"/fhir/HealthcareService?location={','.join(sorted(expected))}") | (
            _trusted(api, ctx, "/fhir/HealthcareService") if expected == every and roots is None else set())
        assert _ids(api, "/fhir/HealthcareService", headers) == services
        assert _ids(api, "/fhir/HealthcareService?_include=HealthcareService:location", headers, "include") <= expected


@pytest.mark.parametrize("scope", [
    pytest.param("system/Location.rs?nmae=Boromo", id="unknown-parameter"),
    pytest.param("system/Location.rs?_count=10", id="result-parameter-count"),
    pytest.param("system/Location.rs?_sort=name", id="result-parameter-sort"),
    pytest.param("system/Location.rs?_include=Location:partof", id="result-parameter-include"),
    pytest.param("system/Location.rs?_summary=count", id="result-parameter-summary"),
    pytest.param("system/Location.rs?partof.nmae=Boromo", id="a-chain-with-a-typo"),
    pytest.param("system/Location.rs?_has:HealthcareService:location:actve=true", id="has-with-a-typo"),
    pytest.param("system/Location.rs?_lastUpdated=yesterday", id="a-bad-value"),
    pytest.param("system/Location.rs?name:nope=x", id="an-unknown-modifier"),
    pytest.param("system/Location.rs?", id="an-empty-query"),
    pytest.param("system/Location.rs?partof", id="not-name-value"),
    pytest.param("system/CodeSystem.rs?url=x", id="a-type-not-searchable-by-parameters"),
    pytest.param("system/*.rs?name=x", id="a-wildcard-query-some-type-lacks"),
    # the canonical resources (CodeSystem...) are searched in memory, by _id and url only: not filtered
    pytest.param("system/*.rs?_id=20", id="a-wildcard-query-over-types-not-searchable-by-parameters"),
])
def test_a_query_the_server_cannot_apply_fails_the_token_closed(api: TestClient, ctx: ServerContext,
                                                                 scope: str) -> None:
    for url in ("/fhir/Location", "/fhir/Location/10", "/fhir/metadata?_summary=true"):
        answer = api.get(url, headers=_token(ctx, [scope, "system/HealthcareService.rs"]))
        if url.startswith("/fhir/metadata"):
            continue  # the capability statement is public
        assert answer.status_code == 401, (url, answer.text)
        assert answer.headers["www-authenticate"].startswith("Bearer")
        assert 'error="invalid_token"' in answer.headers["www-authenticate"]
        diagnostics = answer.json()["issue"][0]["diagnostics"]
        assert scope.rstrip("?")[:40] in diagnostics or "query" in diagnostics, diagnostics


def test_an_export_keeps_to_the_query_scope(api: TestClient, ctx: ServerContext) -> None:
    headers = {**_token(ctx, ["system/Location.rs?type=CSPS"]), "Prefer": "respond-async",
               "Accept": "application/fhir+json"}
    kickoff = api.get("/fhir/Location/$export", headers=headers)
    assert kickoff.status_code == 202, kickoff.text
    status_url = kickoff.headers["content-location"]
    for _ in range(200):
        polled = api.get(status_url, headers=headers)
        if polled.status_code == 200:
            break
    assert polled.status_code == 200, polled.text
    exported: set[str] = set()
    for output in polled.json()["output"]:
        body = api.get(output["url"], headers={"Authorization": headers["Authorization"]}).text
        exported |= {line.split('"id":"')[1].split('"')[0] for line in body.splitlines() if line}
    assert exported == _trusted(api, ctx, "/fhir/Location?type=CSPS")


@pytest.mark.parametrize(("scopes", "read", "searched"), [
    pytest.param(["system/Location.r?type=CSPS", "system/Location.s?type=CHR"], "type=CSPS", "type=CHR",
                 id="each-letter-its-own-query"),
    pytest.param(["system/Location.rs?type=CSPS", "system/Location.s"], "type=CSPS", "", id="search-lifted-only"),
    pytest.param(["system/Location.r", "system/Location.rs?type=CHR"], "", "type=CHR", id="read-lifted-only"),
])
def test_each_letter_keeps_to_its_own_scopes_queries(api: TestClient, ctx: ServerContext, scopes: list[str],
                                                     read: str, searched: str) -> None:
    headers = _token(ctx, scopes)
    readable, findable = (_trusted(api, ctx, f"/fhir/Location?{q}") for q in (read, searched))
    for rid in sorted(_trusted(api, ctx, "/fhir/Location")):
        assert api.get(f"/fhir/Location/{rid}", headers=headers).status_code == (200 if rid in readable else 404)
        assert (api.get(f"/fhir/Location/{rid}/_history", headers=headers).status_code == 200) is (rid in readable)
    assert _ids(api, "/fhir/Location", headers) == findable
    assert _ids(api, "/fhir/Location/_history", headers) <= readable


def test_a_deletion_stays_seen_where_its_resource_was(api: TestClient, ctx: ServerContext) -> None:
    """A deleted resource's current row keeps what it held: a query scope matching it sees it go (410, its
    DELETE in _history), as an Update client must. A query is proven on the current row only: of the history, such
    a token sees the current version (the deletion) alone (issue 36: never a version it could not have read while
    current); a token without the query sees every version."""
    headers = _token(ctx, ["system/HealthcareService.rs?service-category=http://terminology.hl7.org/CodeSystem/"
                           "service-category|17"])
    assert api.get("/fhir/HealthcareService/7", headers=headers).status_code == 410
    history = api.get("/fhir/HealthcareService/7/_history", headers=headers).json()
    assert [e["request"]["method"] for e in history["entry"]] == ["DELETE"]
    assert api.get("/fhir/HealthcareService/7/_history/1", headers=headers).status_code == 404
    assert api.get("/fhir/HealthcareService/4", headers=headers).status_code == 404  # category 35
    whole = api.get("/fhir/HealthcareService/7/_history", headers=bearer(ctx.settings)).json()
    assert [e["request"]["method"] for e in whole["entry"]] == ["DELETE", "POST"]


def test_below_a_unit_the_scope_leaves_out_and_the_top_of_what_it_sees(api: TestClient, ctx: ServerContext) -> None:
    """`partof:below=10` leaves 10 out: the token's own query still finds its units (its look-ups read what its
    account holds), and the explorer's roots (`partof:missing=true`) are the top of what it sees."""
    headers = _token(ctx, ["system/Location.rs?partof:below=Location/10"])
    below = _trusted(api, ctx, "/fhir/Location?partof:below=10")
    assert _ids(api, "/fhir/Location?partof:below=10", headers) == below == _ids(api, "/fhir/Location", headers)
    tops = _ids(api, "/fhir/Location?partof:missing=true", headers)
    assert tops == _trusted(api, ctx, "/fhir/Location?partof=10") and tops
    assert _ids(api, "/fhir/Location?partof:missing=false", headers) == below - tops


# (a search through another type's tree, the token's own searches of that type whose units it matches through)
THROUGH = [
    pytest.param("location:below=Location/3", ["_id=3", "partof:below=Location/3"], id="below-a-unit-it-cannot-see"),
    pytest.param("location:above=Location/20", ["_id=20", "partof:above=Location/20"], id="above-a-unit-it-cannot-see"),
]


@pytest.mark.parametrize(("searched", "within"), THROUGH)
def test_a_match_through_another_types_tree_keeps_to_the_units_the_token_sees(
        api: TestClient, ctx: ServerContext, searched: str, within: list[str]) -> None:
    """A token narrowed to the CSPS finds the unit a :below or :above names though it cannot see it (its look-ups
    read what its account holds), but a service matches through a unit it sees only: one it cannot read grants
    nothing, as a search of that type keeps to what the token sees."""
    headers = _token(ctx, ["system/Location.rs?type=CSPS", "system/HealthcareService.rs"])
    units = set().union(*(_ids(api, f"/fhir/Location?{q}", headers) for q in within))
    expected = _ids(api, f"/fhir/HealthcareService?location={','.join(sorted(units))}", headers) if units else set()
    through_unseen = (_trusted(api, ctx, f"/fhir/HealthcareService?{searched}")
                      & _ids(api, "/fhir/HealthcareService", headers)) - expected
    assert through_unseen, "a case that tells nothing"  # services the token sees, matched through units it does not
    assert _ids(api, f"/fhir/HealthcareService?{searched}", headers) == expected


@pytest.mark.parametrize(("claims", "named"), [
    pytest.param({"scp": ["system/Location.rs?partof.name=DS Boromo"]}, "holds white space",
                 id="a-list-element-with-a-space"),
    pytest.param({"scope": "system/Location.rs?name=%20"}, "not a query string", id="a-blank-value"),
    pytest.param({"scope": "system/Location.read?type=CSPS"}, "v1 scope with a query", id="v1-with-a-query"),
    pytest.param({"scope": "system/Location.rs?type"}, "'system/Location.rs?type'", id="named"),
])
def test_a_scope_that_cannot_be_read_as_one_refuses_the_token_and_is_named(api: TestClient, ctx: ServerContext,
                                                                           claims: dict[str, Any],
                                                                           named: str) -> None:
    answer = api.get("/fhir/Location", headers=bearer(ctx.settings, **claims))
    assert answer.status_code == 401, answer.text
    assert named in answer.json()["issue"][0]["diagnostics"]
    assert answer.headers["www-authenticate"].endswith('error_description="a SMART scope cannot be read"')


def test_a_list_element_with_an_encoded_space_is_one_scope(api: TestClient, ctx: ServerContext) -> None:
    headers = bearer(ctx.settings, scp=["system/Location.rs?partof.name=DS%20Boromo"])
    assert _ids(api, "/fhir/Location", headers) == _trusted(api, ctx, "/fhir/Location?partof.name=DS Boromo")


# (roots, query, what the search finds for that caller): issue 36 item 3, a scope's query means what the same search
# means for the same caller (its look-ups, chains and :missing among what that caller sees). Compiled apart, the
# first four saw [10], [10], 5 and nothing: a parent outside the roots matched, and :missing ignored them.
SAME_MEANING = [
    pytest.param(["Location/10"], "partof.name=Boucle du Mouhoun", set(), id="roots-a-chain-to-a-parent-outside"),
    pytest.param(["Location/10"], "partof.partof.name=Burkina Faso", set(), id="roots-two-hops-outside"),
    pytest.param(["Location/10"], "partof:missing=false", {"20", "30", "31", "32"}, id="roots-missing-false"),
    pytest.param(["Location/10"], "partof:missing=true", {"10"}, id="roots-missing-true"),
    pytest.param(["Location/10"], "partof.name=DS Boromo", {"20", "32"}, id="roots-a-chain-inside"),
    pytest.param(None, "partof.name=Boucle du Mouhoun", {"10", "11"}, id="whole-a-chain"),
    pytest.param(None, "partof:missing=true", {"1"}, id="whole-missing-true"),
    pytest.param(None, "_has:HealthcareService:location:active=false", {"3"}, id="whole-has"),
    # a chain ends as its parameter unchained: a parent the caller cannot see is as missing at its far end too
    pytest.param(["Location/10"], "partof.partof:missing=true", {"20", "32"}, id="roots-chained-missing-true"),
    pytest.param(None, "partof.partof:missing=true", {"2", "3"}, id="whole-chained-missing-true"),
]


@pytest.mark.parametrize(("roots", "query", "found"), SAME_MEANING)
def test_a_scopes_query_means_what_its_search_means_for_the_same_caller(api: TestClient, ctx: ServerContext,
                                                                        roots: list[str] | None, query: str,
                                                                        found: set[str]) -> None:
    searching = _token(ctx, ["system/Location.rs", "system/HealthcareService.rs"], roots)
    assert _ids(api, f"/fhir/Location?{query}", searching) == found
    scoped = _token(ctx, [f"system/Location.rs?{quote(query, safe='=:.')}", "system/HealthcareService.rs"], roots)
    assert _ids(api, "/fhir/Location", scoped) == found
    for rid in ("1", "2", "3", "10", "11", "20", "30", "31", "32"):
        assert api.get(f"/fhir/Location/{rid}", headers=scoped).status_code == (200 if rid in found else 404), rid


# a query-scoped token's `_since` sync is told, as a deletion, what no longer matches its query among what it may hold
# (issue 37): a resource with a version before `_since`. One whose every version is later cannot be in its copy:
# telling it only named ids outside its query (a `_since` of 2000 listed every unit of the account as a DELETE)
@pytest.mark.parametrize("since", [pytest.param("2000-01-01T00:00:00Z", id="before-everything"),
                                   pytest.param("1970-01-01", id="a-date")])
def test_a_sync_from_before_everything_names_no_id_outside_the_query(api: TestClient, ctx: ServerContext,
                                                                     since: str) -> None:
    headers = _token(ctx, ["system/Location.rs?type=CSPS"])
    matching = _trusted(api, ctx, "/fhir/Location?type=CSPS")
    walked = [page for page in every_page(api, f"/fhir/Location/_history?_since={since}&_count=3", headers)]
    named = {e["fullUrl"].rsplit("/", 1)[1] for page in walked for e in page.get("entry", ())}
    assert named == matching  # their versions and deletions; nothing of the others
    exported = export(api, "/fhir/Location/$export", headers, _since=since)
    assert {url.rsplit("/", 1)[1] for url in deleted_ids(api, exported, headers)} <= matching
