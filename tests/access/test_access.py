"""Access control of Locations: tenants (accounts), subtree scopes and served source versions, on every
interaction, over the two-account universe of tests.support.scoping. Each caller sees exactly its part; probing
any other id answers as an unknown id does. Typed roots and the other scoping modes: test_scoping.py."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.engine.context import ServerContext, create_context
from server.errors import LoadError
from plugins.orgunits.versions import list_versions, set_default_version
from plugins.orgunits.writer import ensure_data_source, ensure_source_version, write_units
from plugins.orgunits.records import UnitRecord
from tests.support.contexts import SECRET, bearer, make_settings, pyramid_context
from tests.support.fixtures import client_fixture, context_fixture
from tests.support.data import NOW
from tests.support.scoping import ALPHA, BETA_V1, BETA_V2, DELETED, IDENTIFIER_3, NS, load_alpha, load_beta

SUBTREE_10 = {10, 20, 30, 31, 32}
SUBTREE_3 = {3}
UNIVERSE = ALPHA | BETA_V1 | BETA_V2 | {DELETED, 999_999}


ctx = context_fixture(lambda url, var: pyramid_context(url, var, load_alpha, load_beta))
app_client = client_fixture()


CALLERS = {
    "alpha": ({"account": "alpha"}, ALPHA),
    "beta": ({"account": "beta"}, BETA_V2),
    "alpha-subtree-10": ({"account": "alpha", "org_unit_roots": ["10"]}, SUBTREE_10),
    "alpha-subtree-typed": ({"account": "alpha", "org_unit_roots": ["Location/10"]}, SUBTREE_10),
    "alpha-subtree-by-identifier": ({"account": "alpha", "org_unit_roots": [IDENTIFIER_3]}, SUBTREE_3),
    "alpha-two-roots-nested": ({"account": "alpha", "org_unit_roots": ["10", "30", "Location/3"]},
                               SUBTREE_10 | SUBTREE_3),
    "alpha-root-of-another-type": ({"account": "alpha", "org_unit_roots": ["Organization/1"]}, set()),
    "alpha-root-of-beta": ({"account": "alpha", "org_unit_roots": ["201"]}, set()),
    "alpha-no-roots": ({"account": "alpha", "org_unit_roots": []}, set()),
    "alpha-null-roots": ({"account": "alpha", "org_unit_roots": None}, set()),
    "alpha-root-system-only": ({"account": "alpha", "org_unit_roots": [f"{NS}/fhir/sid/ministere-de-la-sante|"]},
                               set()),
    "alpha-root-value-only": ({"account": "alpha", "org_unit_roots": ["|HB0000000003"]}, set()),
    "unknown-account": ({"account": "gamma"}, set()),
}


def ids_of(bundle: dict[str, Any], mode: str = "match") -> set[int]:
    return {int(e["resource"]["id"]) for e in bundle.get("entry", [])
            if e["resource"]["resourceType"] == "Location" and e.get("search", {}).get("mode", "match") == mode}


def unknown_shape(response: Any, rid: int) -> tuple[int, str, Any]:
    """The response with the id taken out: what a prober can compare."""
    return response.status_code, response.headers["content-type"], \
        re.sub(rf"(?<=/){rid}\b", "ID", response.text)


@pytest.mark.parametrize("caller", CALLERS)
def test_search_shows_exactly_the_callers_units_with_their_total(app_client: TestClient, ctx: ServerContext,
                                                                 caller: str) -> None:
    claims, visible = CALLERS[caller]
    body = app_client.get("/fhir/Location?_count=100", headers=bearer(ctx.settings, **claims)).json()
    assert ids_of(body) == visible
    assert body["total"] == len(visible)


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("path", ["/fhir/Location/{id}", "/fhir/Location/{id}/_history/1",
                                  "/fhir/Location/{id}/_history", "/fhir/Location/{id}/$children"],
                         ids=["read", "vread", "history-instance", "children"])
def test_out_of_scope_ids_answer_exactly_as_unknown_ids(app_client: TestClient, ctx: ServerContext, caller: str,
                                                        path: str) -> None:
    claims, visible = CALLERS[caller]
    headers = bearer(ctx.settings, **claims)
    missing = unknown_shape(app_client.get(path.format(id=999_999), headers=headers), 999_999)
    assert missing[0] == 404
    deleted_here = {DELETED} if caller == "beta" else set()  # in its scope: 410 (read), its history (200)
    for rid in sorted(UNIVERSE - visible - deleted_here):
        assert unknown_shape(app_client.get(path.format(id=rid), headers=headers), rid) == missing, rid
    for rid in sorted(visible):
        assert app_client.get(path.format(id=rid), headers=headers).status_code == 200, rid


def test_deleted_unit_is_gone_for_its_account_and_unknown_for_others(app_client: TestClient,
                                                                     ctx: ServerContext) -> None:
    beta = app_client.get(f"/fhir/Location/{DELETED}", headers=bearer(ctx.settings, account="beta"))
    assert beta.status_code == 410
    alpha = app_client.get(f"/fhir/Location/{DELETED}", headers=bearer(ctx.settings, account="alpha"))
    missing = app_client.get("/fhir/Location/999999", headers=bearer(ctx.settings, account="alpha"))
    assert unknown_shape(alpha, DELETED) == unknown_shape(missing, 999_999)


@pytest.mark.parametrize("caller", CALLERS)
def test_history_of_the_type_holds_only_visible_units(app_client: TestClient, ctx: ServerContext,
                                                      caller: str) -> None:
    claims, visible = CALLERS[caller]
    body = app_client.get("/fhir/Location/_history?_count=100", headers=bearer(ctx.settings, **claims)).json()
    seen = {int(re.search(r"/Location/(\d+)", e["fullUrl"]).group(1)) for e in body.get("entry", [])}
    assert seen == visible | ({DELETED} if caller == "beta" else set())  # its deletion is in its history
    assert body["total"] == len(body.get("entry", []))


@pytest.mark.parametrize("caller, query, expected", [
    pytest.param("alpha-subtree-10", "_include=Location:partof", {10, 20, 30, 31, 32}, id="include-stops-at-root"),
    pytest.param("alpha-subtree-10", "_include:iterate=Location:partof", {10, 20, 30, 31, 32}, id="iterate"),
    pytest.param("alpha", "_id=10&_include:iterate=Location:partof", {10, 2, 1}, id="iterate-unscoped"),
    pytest.param("alpha-subtree-10", "_id=10&_revinclude=Location:partof", {10, 20, 32}, id="revinclude"),
    pytest.param("alpha-subtree-10", "partof:above=30", {10, 20}, id="above-stops-at-root"),
    pytest.param("alpha", "partof:above=30", {1, 2, 10, 20}, id="above-unscoped"),
    pytest.param("alpha-subtree-10", "partof:below=1", set(), id="below-outside-root-is-unknown"),
    pytest.param("alpha-subtree-10", "partof:below=10", {20, 30, 31, 32}, id="below-root"),
    pytest.param("alpha-subtree-10", "partof:above=1", set(), id="above-outside-root-is-unknown"),
    pytest.param("alpha-subtree-10", "partof=2", {10}, id="children-of-outside-parent"),
    pytest.param("beta", "partof:below=1", set(), id="below-other-account"),
    pytest.param("alpha", "name=Sierra", set(), id="name-of-other-account"),
    pytest.param("beta", "name=Bo", {202, 203}, id="name-served-version-only"),
    pytest.param("alpha", "_id=201,30", {30}, id="id-of-other-account"),
    # the roots a caller sees: its subtree roots when it is limited to subtrees (an explorer's first level)
    pytest.param("alpha", "partof:missing=true", {1}, id="roots-unscoped"),
    pytest.param("alpha-subtree-10", "partof:missing=true", {10}, id="roots-of-subtree"),
    pytest.param("alpha-subtree-10", "partof:missing=false", {20, 30, 31, 32}, id="not-roots-of-subtree"),
    pytest.param("alpha-two-roots-nested", "partof:missing=true", {10, 3}, id="roots-outermost-only"),
    pytest.param("alpha-two-roots-nested", "partof:missing=true&name=Bo", set(), id="roots-and-other-params"),
    pytest.param("alpha-no-roots", "partof:missing=true", set(), id="roots-of-empty-scope"),
    pytest.param("beta", "partof:missing=true", {201}, id="roots-other-account"),
    # a chain means what the parameter means unchained: its parent is one of the caller's roots
    pytest.param("alpha", "partof.partof:missing=true", {2, 3}, id="chained-roots-unscoped"),
    pytest.param("alpha-subtree-10", "partof.partof:missing=true", {20, 32}, id="chained-roots-of-subtree"),
    pytest.param("alpha-two-roots-nested", "partof.partof:missing=true", {20, 32}, id="chained-roots-nested"),
])
def test_search_features_stay_in_scope(app_client: TestClient, ctx: ServerContext, caller: str, query: str,
                                       expected: set[int]) -> None:
    claims, _ = CALLERS[caller]
    body = app_client.get(f"/fhir/Location?{query}&_count=100", headers=bearer(ctx.settings, **claims)).json()
    assert ids_of(body) | ids_of(body, "include") == expected


def test_parents_outside_the_scope_stay_references(app_client: TestClient, ctx: ServerContext) -> None:
    body = app_client.get("/fhir/Location/10", headers=bearer(ctx.settings, account="alpha", org_unit_roots=["10"]))
    assert body.json()["partOf"] == {"reference": "Location/2", "display": "Boucle du Mouhoun"}


@pytest.mark.parametrize("account, names", [
    pytest.param("alpha", {"Ministère de la Santé"}, id="alpha"),
    pytest.param("beta", {"DHIS2"}, id="beta"),
    pytest.param("gamma", set(), id="unknown"),
])
def test_organizations_are_the_accounts_data_sources(app_client: TestClient, ctx: ServerContext, account: str,
                                                     names: set[str]) -> None:
    headers = bearer(ctx.settings, account=account)
    body = app_client.get("/fhir/Organization", headers=headers).json()
    assert {e["resource"]["name"] for e in body.get("entry", [])} == names and body["total"] == len(names)
    missing = unknown_shape(app_client.get("/fhir/Organization/999999", headers=headers), 999_999)
    for org in (1, 2):
        response = app_client.get(f"/fhir/Organization/{org}", headers=headers)
        if response.status_code != 200:
            assert unknown_shape(response, org) == missing


def test_include_of_organization_is_scoped(app_client: TestClient, ctx: ServerContext) -> None:
    body = app_client.get("/fhir/Location?_id=30&_include=Location:organization",
                          headers=bearer(ctx.settings, account="alpha")).json()
    assert [e["resource"]["name"] for e in body["entry"] if e["search"]["mode"] == "include"] == \
        ["Ministère de la Santé"]


def test_a_token_without_account_sees_the_first_account_when_several_exist(app_client: TestClient,
                                                                           ctx: ServerContext) -> None:
    """Adding accounts never changes what a token without the claim sees: the first account loaded (issue 23)."""
    unnamed = app_client.get("/fhir/Location?_count=100", headers=bearer(ctx.settings)).json()
    first = app_client.get("/fhir/Location?_count=100", headers=bearer(ctx.settings, account="alpha")).json()
    assert unnamed["total"] == first["total"] > 0 and ids_of(unnamed) == ids_of(first)  # alpha: the oldest
    beta = app_client.get("/fhir/Location?_count=100", headers=bearer(ctx.settings, account="beta")).json()
    assert not ids_of(unnamed) & ids_of(beta)


def test_default_account_serves_a_token_without_account(ctx: ServerContext, tmp_path: Path) -> None:
    settings = make_settings(ctx.settings.database_url, tmp_path, auth={"secret": SECRET, "default_account": "beta"})
    other = create_context(settings)
    try:
        with TestClient(create_app(settings, context=other)) as c:
            body = c.get("/fhir/Location", headers=bearer(settings)).json()
        assert ids_of(body) == BETA_V2
    finally:
        other.db.dispose()


@pytest.mark.parametrize("claims", [
    pytest.param({"account": 5}, id="account-not-a-string"),
    pytest.param({"account": ""}, id="account-empty"),
    pytest.param({"account": "alpha", "org_unit_roots": {"a": 1}}, id="roots-not-a-list"),
    pytest.param({"account": "alpha", "org_unit_roots": [None]}, id="roots-null-item"),
    pytest.param({"account": "alpha", "org_unit_roots": [str(i) for i in range(101)]}, id="too-many-roots"),
    pytest.param({"account": "al\x00pha"}, id="account-nul"),
    pytest.param({"account": "alpha", "org_unit_roots": ["a|b\x00"]}, id="root-nul"),
])
def test_malformed_scope_claims_are_forbidden(app_client: TestClient, ctx: ServerContext,
                                              claims: dict[str, Any]) -> None:
    response = app_client.get("/fhir/Location", headers=bearer(ctx.settings, **claims))
    assert response.status_code == 403 and response.json()["resourceType"] == "OperationOutcome"


def test_served_version_switches_with_set_default(app_client: TestClient, ctx: ServerContext) -> None:
    headers = bearer(ctx.settings, account="beta")
    with ctx.db.connect() as conn:
        assert [(v.number, v.units, v.served) for v in list_versions(conn, "beta")] == [(1, 3, False), (2, 3, True)]
    try:
        with ctx.db.begin() as conn:
            set_default_version(conn, "DHIS2", 1, account="beta")
        ctx.freshness.expire()
        body = app_client.get("/fhir/Location?_count=100", headers=headers).json()
        assert ids_of(body) == BETA_V1 and body["total"] == 3
        # version 2's unit is withdrawn by the switch: a deletion its consumers receive (issue 37)
        assert app_client.get("/fhir/Location/201", headers=headers).status_code == 410
        org = app_client.get("/fhir/Organization", headers=headers).json()["entry"][0]["resource"]
        assert org["extension"][0]["valueInteger"] == 1  # the version served
    finally:
        with ctx.db.begin() as conn:
            set_default_version(conn, "DHIS2", None, account="beta")
        ctx.freshness.expire()
    assert ids_of(app_client.get("/fhir/Location?_count=100", headers=headers).json()) == BETA_V2


def test_same_data_source_name_in_two_accounts(ctx: ServerContext) -> None:
    with ctx.db.begin() as conn:
        first = ensure_data_source(conn, "Shared name", account="alpha")
        second = ensure_data_source(conn, "Shared name", account="beta")
        assert first != second
        assert ensure_data_source(conn, "Shared name", account="beta") == second
        conn.rollback()


def test_each_account_has_its_own_types(app_client: TestClient, ctx: ServerContext) -> None:
    """beta's type COUNTRY is "Pays": loading it renamed nothing of alpha's."""
    alpha = app_client.get("/fhir/Location/1", headers=bearer(ctx.settings, account="alpha")).json()
    beta = app_client.get("/fhir/Location/201", headers=bearer(ctx.settings, account="beta")).json()
    assert (alpha["type"][0]["text"], beta["type"][0]["text"]) == ("Country", "Pays")
    assert alpha["meta"]["versionId"] == "1"
    body = app_client.get("/fhir/Location?type=COUNTRY", headers=bearer(ctx.settings, account="beta")).json()
    assert ids_of(body) == {201}


@pytest.mark.parametrize("account, concepts", [
    pytest.param("alpha", {"COUNTRY": "Country", "REGION": "Region", "DISTRICT": "District", "AREA": "Aire de santé",
                           "CSPS": "Centre de santé", "CHR": "Hôpital"}, id="alpha"),
    pytest.param("beta", {"COUNTRY": "Pays", "SL-2": "District", "SL-3": "Clinic"}, id="beta"),
    pytest.param("gamma", {}, id="unknown-account"),
])
def test_type_code_system_lists_the_accounts_types(app_client: TestClient, ctx: ServerContext, account: str,
                                                   concepts: dict[str, str]) -> None:
    headers = bearer(ctx.settings, account=account)
    system = app_client.get("/fhir/CodeSystem/org-unit-type", headers=headers).json()
    assert {c["code"]: c["display"] for c in system.get("concept", [])} == concepts
    assert system["count"] == len(concepts)
    searched = app_client.get("/fhir/CodeSystem?url=" + system["url"], headers=headers).json()
    assert searched["entry"][0]["resource"] == system


def test_a_unit_cannot_hang_under_another_accounts_unit(ctx: ServerContext) -> None:
    with pytest.raises(LoadError, match="parent 10 does not exist"), ctx.db.begin() as conn:
        ds = ensure_data_source(conn, "DHIS2", account="beta")
        version = ensure_source_version(conn, ds, 2)
        write_units(conn, [UnitRecord(205, "Intruder", "SL-3", parent_id=10)], version, NOW)
