"""SMART scopes: v1 (system/Location.read) and v2 (system/Location.rs) from `scope` or `scp` narrow a token per
resource type and interaction; the permission is still required; _include/_revinclude never return a type the token
may not see; a scope with a query filters its type (tests/access/test_query_scopes.py); auth.smart_scopes: false ignores scopes. On both backends."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.access.claims import permissions_of
from server.access.smart_scopes import READ, SEARCH, Grant, ScopeRefused, SmartScopes, parse_scopes, scope_tokens
from server.app import create_app
from server.engine.context import ServerContext, create_context
from server.settings import Settings
from tests.support.contexts import SECRET, bearer, make_settings, pyramid_context
from tests.support.fixtures import client_fixture, context_fixture
from tests.support.records import recording

ALL = {"Location", "Organization", "CodeSystem"}

PARSE_CASES = [
    pytest.param("", None, id="no-scope: not narrowed"),
    pytest.param("openid offline_access launch service_org_units", None, id="non-resource-scopes: not narrowed"),
    pytest.param("system/Location.rs", {("Location", READ), ("Location", SEARCH)}, id="v2-rs"),
    pytest.param("system/Location.r", {("Location", READ)}, id="v2-r-only"),
    pytest.param("system/Location.s", {("Location", SEARCH)}, id="v2-s-only"),
    pytest.param("system/Location.cruds", {("Location", READ), ("Location", SEARCH)}, id="v2-cruds"),
    pytest.param("system/Location.cud", set(), id="v2-write-only: nothing"),
    pytest.param("system/Location.read", {("Location", READ), ("Location", SEARCH)}, id="v1-read"),
    pytest.param("system/Location.*", {("Location", READ), ("Location", SEARCH)}, id="v1-star"),
    pytest.param("system/Location.write", set(), id="v1-write: nothing"),
    pytest.param("system/*.rs", {(t, x) for t in ALL for x in (READ, SEARCH)}, id="v2-wildcard"),
    pytest.param("system/*.read", {(t, x) for t in ALL for x in (READ, SEARCH)}, id="v1-wildcard"),
    pytest.param("user/Location.rs", {("Location", READ), ("Location", SEARCH)}, id="user-as-system"),
    pytest.param("patient/Location.rs", set(), id="patient: nothing"),
    pytest.param("system/Location.r system/Organization.s", {("Location", READ), ("Organization", SEARCH)},
                 id="two-scopes"),
]


@pytest.mark.parametrize("scope, granted", PARSE_CASES)
def test_scopes_grant_per_type_and_interaction(scope: str, granted: set[tuple[str, str]] | None) -> None:
    scopes = parse_scopes(scope.split())
    if granted is None:
        assert scopes is None
        return
    assert scopes is not None
    assert {(t, x) for t in ALL for x in (READ, SEARCH) if scopes.allows(t, x)} == granted


@pytest.mark.parametrize(("scope", "location", "every_type"), [
    pytest.param("system/Location.rs?type=CSPS", ((("type", "CSPS"),),), None, id="a-query"),
    pytest.param("system/Location.rs?partof:below=Location%2F12&status=active",
                 ((("partof:below", "Location/12"), ("status", "active")),), None, id="decoded-pairs"),
    pytest.param("system/*.rs?_id=1", ((("_id", "1"),),), ((("_id", "1"),),), id="wildcard"),
    pytest.param("system/Location.rs?type=CSPS system/Location.s", None, None, id="an-unfiltered-grant-lifts-it"),
    pytest.param("system/Location.rs?type=CSPS system/Location.rs?type=CHR", ((("type", "CSPS"),), (("type", "CHR"),)),
                 None, id="two-a-union"),
    pytest.param("patient/Location.rs?type=CSPS", None, None, id="patient-grants-nothing"),
])
def test_a_scope_with_a_query_filters_its_type(scope: str, location: Any, every_type: Any) -> None:
    scopes = parse_scopes(["system/Organization.rs", *scope.split()])
    assert scopes is not None
    grants = scopes.filters("Location", "s")
    assert (tuple(g.query for g in grants) if grants is not None else None) == location
    grants = scopes.filters("HealthcareService", "s")  # a type of no grant but the wildcard's
    assert (tuple(g.query for g in grants) if grants is not None else None) == every_type


@pytest.mark.parametrize("scope", [
    pytest.param("system/Location.r?", id="empty-query"), pytest.param("system/Location.rs?type", id="no-value"),
    pytest.param("system/Location.rs?=x", id="no-name"), pytest.param("system/Location.rs?type=&x=1", id="blank"),
    pytest.param("system/Location.read?type=CSPS", id="v1-with-a-query"),
    pytest.param("system/Location.sr", id="letters-out-of-order"),
    pytest.param("system/location.rs", id="lower-case-type"), pytest.param("system/Location", id="no-letters"),
    pytest.param("system/Location.", id="empty-letters"), pytest.param("system/Location.RS", id="upper-case-letters"),
])
def test_a_resource_scope_that_does_not_parse_is_refused(scope: str) -> None:
    """Not "grants nothing": the partner learns from the 401 which scope its identity provider wrote wrong."""
    with pytest.raises(ScopeRefused, match="SMART scope"):
        parse_scopes(["system/Organization.rs", scope])


@pytest.mark.parametrize("claims, names, tokens", [
    pytest.param({"scope": "a b  c"}, ("scope", "scp"), ["a", "b", "c"], id="scope-string"),
    pytest.param({"scp": ["a", "b", "c"]}, ("scope", "scp"), ["a", "b", "c"], id="scp-list"),
    pytest.param({"scope": "a", "scp": ["b"]}, ("scope", "scp"), ["a", "b"], id="both"),
    pytest.param({"scope": ["a"], "scp": "b c"}, ("scope", "scp"), ["a", "b", "c"], id="either-shape-in-either"),
    pytest.param({"ext": {"smart": "a"}}, ("ext.smart",), ["a"], id="dotted"),
    pytest.param({"scope": None, "scp": []}, ("scope", "scp"), [], id="null-and-empty"),
    pytest.param({"ext": {"smart": "a", "Smarter": "b"}, "SMART": 1}, ("ext.smart",), ["a"],
                 id="dotted-siblings-of-other-names"),
])
def test_scope_tokens_come_from_the_configured_claims(claims: dict[str, Any], names: tuple[str, ...],
                                                      tokens: list[str]) -> None:
    assert scope_tokens(claims, names) == tokens


@pytest.mark.parametrize("claims, names", [
    pytest.param({"Scope": "a"}, ("scope",), id="top-level"),
    pytest.param({"ext": {"SMART": "a"}}, ("ext.smart",), id="dotted"),
])
def test_a_claim_named_as_a_scope_claim_but_for_its_case_refuses_the_token(claims: dict[str, Any],
                                                                           names: tuple[str, ...]) -> None:
    with pytest.raises(ScopeRefused, match="but for its case"):
        scope_tokens(claims, names)


def test_the_permission_is_read_among_the_scopes() -> None:
    claims = {"permissions": "a b", "scp": ["service_org_units", "system/Location.rs"]}
    assert permissions_of(claims, "permissions", scope_tokens(claims, ("scope", "scp"))) == {
        "a", "b", "service_org_units", "system/Location.rs"}


def test_the_denial_names_the_missing_scope() -> None:
    scopes = SmartScopes((Grant("Location", frozenset("rs")),))
    assert scopes.denial("search-type", "Location") is None
    assert scopes.denial("capabilities", None) is None
    denial = scopes.denial("read", "Organization")
    assert denial is not None and "system/Organization.r" in denial and "system/Organization.read" in denial


# ------------------------------------------------------------------ over HTTP, on both backends

ctx = context_fixture(pyramid_context)
app_client = client_fixture()


REQUESTS = {
    "read": "/fhir/Location/30",
    "vread": "/fhir/Location/30/_history/1",
    "history-instance": "/fhir/Location/30/_history",
    "history-type": "/fhir/Location/_history",
    "search": "/fhir/Location?name=csps",
    "operation": "/fhir/Location/10/$children",
    "organization-search": "/fhir/Organization",
    "organization-read": "/fhir/Organization/1",
    "codesystem-read": "/fhir/CodeSystem/org-unit-type",
    "metadata": "/fhir/metadata",
}
LOCATION = {"read", "vread", "history-instance", "history-type", "search", "operation", "metadata"}

ACCESS_CASES = [
    pytest.param({}, set(REQUESTS), id="permission-only: not narrowed"),
    pytest.param({"scope": "system/Location.rs"}, LOCATION, id="v2-Location.rs"),
    pytest.param({"scope": "system/Location.read"}, LOCATION, id="v1-Location.read"),
    pytest.param({"scp": ["system/Location.rs"]}, LOCATION, id="scp-list"),
    pytest.param({"scope": "system/Location.r"}, {"read", "vread", "history-instance", "history-type", "metadata"},
                 id="v2-r: no search, no operation"),
    pytest.param({"scope": "system/Location.s"}, {"search", "operation", "metadata"}, id="v2-s: no read, no history"),
    pytest.param({"scope": "system/Location.rs system/Organization.s"}, LOCATION | {"organization-search"},
                 id="two-types"),
    pytest.param({"scope": "system/*.rs"}, set(REQUESTS), id="v2-wildcard"),
    pytest.param({"scope": "system/*.read"}, set(REQUESTS), id="v1-wildcard"),
    pytest.param({"scope": "patient/*.read"}, {"metadata"}, id="patient-scopes: nothing"),
    pytest.param({"scope": "system/Location.write"}, {"metadata"}, id="write-only: nothing"),
]


@pytest.mark.parametrize("claims, allowed", ACCESS_CASES)
def test_scopes_narrow_the_token_per_type_and_interaction(app_client: TestClient, ctx: ServerContext,
                                                          claims: dict[str, Any], allowed: set[str]) -> None:
    headers = bearer(ctx.settings, **claims)
    for name, path in REQUESTS.items():
        response = app_client.get(path, headers=headers)
        assert response.status_code == (200 if name in allowed else 403), (name, response.text)
        if response.status_code == 403:
            outcome = response.json()
            assert outcome["resourceType"] == "OperationOutcome" and outcome["issue"][0]["code"] == "forbidden"
            rtype = path.split("/")[2].split("?")[0]
            assert f"system/{rtype}." in outcome["issue"][0]["diagnostics"]


def test_the_403_names_the_scope_it_lacks(app_client: TestClient, ctx: ServerContext) -> None:
    response = app_client.get("/fhir/Organization", headers=bearer(ctx.settings, scope="system/Location.rs"))
    assert response.status_code == 403
    assert response.json()["issue"][0]["diagnostics"] == (
        "the token's SMART scopes do not grant search-type on Organization: it lacks the scope system/Organization.s "
        "(search and operations; or system/Organization.read in SMART v1)")


@pytest.mark.parametrize("permissions, claims, status", [
    pytest.param([], {"scope": "service_org_units system/Location.rs"}, 200, id="permission-as-a-scope-token"),
    pytest.param([], {"scp": ["service_org_units", "system/Location.rs"]}, 200, id="permission-in-scp"),
    pytest.param([], {"scope": "system/Location.rs"}, 403, id="scopes-without-the-permission"),
    pytest.param([], {"scope": "system/*.rs"}, 403, id="wildcard-without-the-permission"),
])
def test_the_permission_is_still_required(app_client: TestClient, ctx: ServerContext, permissions: list[str],
                                          claims: dict[str, Any], status: int) -> None:
    response = app_client.get("/fhir/Location", headers=bearer(ctx.settings, permissions=permissions, **claims))
    assert response.status_code == status, response.text
    if status == 403:
        assert "lacks the permission 'service_org_units'" in response.text


def types_in(bundle: dict[str, Any], mode: str) -> set[str]:
    return {e["resource"]["resourceType"] for e in bundle.get("entry", []) if e["search"]["mode"] == mode}


INCLUDE_CASES = [
    pytest.param("/fhir/Location?_include=Location:organization", "system/Location.rs", {"Location"}, set(),
                 id="include-of-a-type-not-granted"),
    pytest.param("/fhir/Location?_include=Location:organization", "system/Location.rs system/Organization.r",
                 {"Location"}, {"Organization"}, id="include-of-a-granted-type"),
    pytest.param("/fhir/Location?_include=Location:organization", "system/Location.rs system/Organization.s",
                 {"Location"}, {"Organization"}, id="include-of-a-searchable-type"),
    pytest.param("/fhir/Location?_id=30&_include=Location:partof", "system/Location.s", {"Location"}, {"Location"},
                 id="include-of-its-own-type"),
    pytest.param("/fhir/Organization?_revinclude=Location:organization", "system/Organization.rs",
                 {"Organization"}, set(), id="revinclude-of-a-type-not-granted"),
    pytest.param("/fhir/Organization?_revinclude=Location:organization", "system/*.rs", {"Organization"},
                 {"Location"}, id="revinclude-with-wildcard"),
]


@pytest.mark.parametrize("path, scope, matches, included", INCLUDE_CASES)
def test_includes_never_return_a_type_the_token_may_not_see(app_client: TestClient, ctx: ServerContext, path: str,
                                                            scope: str, matches: set[str], included: set[str]) -> None:
    response = app_client.get(path, headers=bearer(ctx.settings, scope=scope))
    assert response.status_code == 200, response.text
    assert types_in(response.json(), "match") == matches
    assert types_in(response.json(), "include") == included


@pytest.mark.parametrize("claims", [
    pytest.param({"scope": "system/Location.rs?type"}, id="query-in-scope"),
    pytest.param({"scp": ["system/Organization.rs", "system/Location.rs?"]}, id="query-in-scp"),
])
def test_a_token_with_a_malformed_query_scope_is_refused_at_verification(app_client: TestClient, ctx: ServerContext,
                                                                         claims: dict[str, Any]) -> None:
    response = app_client.get("/fhir/Organization", headers=bearer(ctx.settings, **claims))
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    assert "not a query string" in response.json()["issue"][0]["diagnostics"]


@pytest.fixture(scope="module")
def off_client(ctx: ServerContext, backend_url: str, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[tuple[TestClient, Settings]]:
    """The same data, served with auth.smart_scopes: false."""
    settings = make_settings(backend_url, tmp_path_factory.mktemp("off"),
                             auth={"secret": SECRET, "smart_scopes": False})
    context = create_context(settings)
    with TestClient(create_app(settings, context=context), base_url="http://testserver") as c:
        yield c, settings
    context.db.dispose()


@pytest.mark.parametrize("claims", [
    pytest.param({"scope": "system/Location.rs"}, id="narrow-scope"),
    pytest.param({"scope": "system/Location.rs?type=CSPS"}, id="query-scope"),
    pytest.param({"scope": "patient/*.read"}, id="patient-scope"),
])
def test_scopes_are_not_honoured_when_turned_off(off_client: tuple[TestClient, Settings],
                                                 claims: dict[str, Any]) -> None:
    client, settings = off_client
    for path in ("/fhir/Organization", "/fhir/Location/30", "/fhir/Organization?_revinclude=Location:organization"):
        assert client.get(path, headers=bearer(settings, **claims)).status_code == 200, path
    bundle = client.get("/fhir/Organization?_revinclude=Location:organization",
                        headers=bearer(settings, **claims)).json()
    assert types_in(bundle, "include") == {"Location"}


def test_a_custom_scope_claim(backend_url: str, tmp_path_factory: pytest.TempPathFactory,
                              ctx: ServerContext) -> None:
    settings = make_settings(backend_url, tmp_path_factory.mktemp("claim"),
                             auth={"secret": SECRET, "scope_claims": ["ext.smart_scopes"]})
    context = create_context(settings)
    try:
        with TestClient(create_app(settings, context=context), base_url="http://testserver") as client:
            narrowed = bearer(settings, ext={"smart_scopes": ["system/Location.rs"]})
            assert client.get("/fhir/Location/30", headers=narrowed).status_code == 200
            assert client.get("/fhir/Organization", headers=narrowed).status_code == 403
            # `scope` is not one of the configured claims here: its scopes narrow nothing
            assert client.get("/fhir/Organization", headers=bearer(settings, scope="system/Location.rs")
                              ).status_code == 200
    finally:
        context.db.dispose()


def test_the_audit_line_names_the_scopes_granted(app_client: TestClient, ctx: ServerContext) -> None:
    with recording(app_client.app) as recorded:  # type: ignore[arg-type]
        app_client.get("/fhir/Location/30", headers=bearer(ctx.settings, scope="openid system/Location.read"))
        app_client.get("/fhir/Location/30", headers=bearer(ctx.settings))
    narrowed, plain = recorded.of("orgunit_fhir.audit")
    assert narrowed["smart_scopes"] == ["system/Location.rs"] and narrowed["status"] == 200
    assert "smart_scopes" not in plain


@pytest.mark.parametrize("kind, rtype, denied", [
    pytest.param("capabilities", None, False, id="capabilities"),
    pytest.param("operation", None, False, id="system-level"),
    pytest.param("search-type", "Location", False, id="granted"),
    pytest.param("read", "Organization", True, id="not-granted"),
    pytest.param("patch", "Location", True, id="unknown-kind: fails closed"),
])
def test_denials_per_kind(kind: str, rtype: str | None, denied: bool) -> None:
    scopes = SmartScopes((Grant("Location", frozenset("rs")),))
    assert (scopes.denial(kind, rtype) is not None) == denied
