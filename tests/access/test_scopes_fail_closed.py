"""Issue 36, item 2: a SMART scope the server cannot read never widens a token. Once a token carries a scope claim
(`scope`, `scp`), it is granted only what its recognised SMART scopes grant: a claim of a shape the server cannot
read, a list element that would be split or merged, a resource scope mis-cased, encoded or malformed, or an unknown
scope beside one with a query refuses the token (401 naming the claim or scope); each case that is not refused sees
exactly what its recognised scopes grant. Over HTTP, on both backends (the small pyramid: 10 and 11 are the
districts "DS Boromo" and "DS Dédougou")."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.access.smart_scopes import CLAIM_REFUSED, SCOPE_REFUSED
from server.app import create_app
from server.engine.context import ServerContext, create_context
from server.errors import ConfigError
from tests.support.contexts import SECRET, bearer, make_settings, pyramid_context
from tests.support.fixtures import client_fixture, context_fixture

ctx = context_fixture(pyramid_context)
app_client = client_fixture()

BELOW = "system/Location.rs?partof:below=Location/10"  # the issue's `partof:below=Location/8`, on this pyramid
EVERYTHING = "/fhir/Location"
PATHS = ("/fhir/Location", "/fhir/Location/3", "/fhir/Location/30", "/fhir/Location/10/$children",
         "/fhir/Organization", "/fhir/Location/_history")


def _ids(client: TestClient, path: str, headers: dict[str, str]) -> set[str]:
    answer = client.get(f"{path}{'&' if '?' in path else '?'}_count=100", headers=headers)
    assert answer.status_code == 200, answer.text
    return {e["resource"]["id"] for e in answer.json().get("entry", ())}


# (claims, refused with this header description and these words in the diagnostics)
REFUSED = [
    # the issue's shapes, as written
    pytest.param({"scope": "System/Location.rs?partof:below=Location/10"}, SCOPE_REFUSED, "'System/Location.rs?",
                 id="capital-S"),
    pytest.param({"scope": "SYSTEM/Location.rs?partof:below=Location/10"}, SCOPE_REFUSED, "'SYSTEM/Location.rs?",
                 id="SYSTEM"),
    pytest.param({"scope": "system%2FLocation.rs%3Fpartof%3Abelow%3DLocation%2F10"}, SCOPE_REFUSED,
                 "only once lower-cased or decoded", id="percent-encoded"),
    pytest.param({"scope": "system%2FLocation.rs%3Fpartof%3Abelow%3DLocation%2F10 service_org_units"}, SCOPE_REFUSED,
                 "'system%2FLocation.rs", id="percent-encoded-beside-the-permission"),
    pytest.param({"scope": 5}, CLAIM_REFUSED, "the scope claim 'scope' holds 5", id="scope-a-number"),
    pytest.param({"scp": {"system/Location.rs": True}}, CLAIM_REFUSED,
                 "the scope claim 'scp' holds {\"system/Location.rs\": true}", id="scp-an-object"),
    pytest.param({"scp": ["system/Location.rs?partof.name=DS", "Boromo"]}, SCOPE_REFUSED,
                 "'Boromo' is not a scope this server knows", id="a-query-value-split-at-its-space"),
    # other shapes of a claim
    pytest.param({"scope": True}, CLAIM_REFUSED, "holds true", id="scope-a-bool"),
    pytest.param({"scope": 1.5}, CLAIM_REFUSED, "holds 1.5", id="scope-a-float"),
    pytest.param({"scp": [["system/Location.rs?_id=10"]]}, CLAIM_REFUSED, "holds the element [\"system/Location.rs",
                 id="a-list-of-lists"),
    pytest.param({"scp": ["system/Location.rs", None]}, CLAIM_REFUSED, "holds the element null", id="null-element"),
    pytest.param({"scp": ["system/Location.rs", 5]}, CLAIM_REFUSED, "holds the element 5", id="number-element"),
    pytest.param({"scp": [BELOW, {"a": 1}]}, CLAIM_REFUSED, "holds the element {\"a\": 1}", id="object-element"),
    pytest.param({"scope": BELOW, "scp": 5}, CLAIM_REFUSED, "'scp' holds 5", id="one-claim-readable-one-not"),
    pytest.param({"Scope": BELOW}, CLAIM_REFUSED, "the claim 'Scope' is named as the scope claim 'scope'",
                 id="a-mis-cased-claim-name"),
    pytest.param({"scope": BELOW, "SCP": ["system/*.rs"]}, CLAIM_REFUSED, "'SCP'", id="a-mis-cased-claim-beside"),
    pytest.param({"scp": {"x": "y" * 300}}, CLAIM_REFUSED, "y" * 50, id="what-it-holds-truncated"),
    # list elements: one scope each, never split nor merged
    pytest.param({"scp": ["system/Location.rs?partof.name=DS Boromo"]}, SCOPE_REFUSED, "holds white space",
                 id="an-element-with-a-space"),
    pytest.param({"scp": ["service_org_units system/Location.rs"]}, SCOPE_REFUSED, "never split nor merged",
                 id="two-scopes-in-one-element"),
    pytest.param({"scp": ["system/Location.rs?partof.name=DS\tBoromo"]}, SCOPE_REFUSED, "holds white space",
                 id="a-tab-in-an-element"),
    pytest.param({"scp": [""]}, SCOPE_REFUSED, "is empty", id="an-empty-element"),
    pytest.param({"scp": ["system/Location.rs?partof.name=DS\u00a0Boromo"]}, SCOPE_REFUSED, "holds white space",
                 id="a-no-break-space-in-an-element"),
    # scope strings: RFC 6749 scope tokens only
    pytest.param({"scope": "system/Location.rs?partof.name=DS\tBoromo"}, SCOPE_REFUSED, "is not a scope token",
                 id="a-tab-in-a-string"),
    pytest.param({"scope": "system/Location.rs?partof.name=DS Boromo"}, SCOPE_REFUSED,
                 "'Boromo' is not a scope this server knows", id="a-space-in-a-string-query"),
    pytest.param({"scope": "\uff53ystem/Location.rs?partof:below=Location/10"}, SCOPE_REFUSED, "not a scope token",
                 id="fullwidth-s"),
    pytest.param({"scope": "\u0455ystem/Location.rs?partof:below=Location/10"}, SCOPE_REFUSED, "not a scope token",
                 id="cyrillic-dze"),
    pytest.param({"scope": "sys\u200btem/Location.rs"}, SCOPE_REFUSED, "not a scope token", id="zero-width-space"),
    pytest.param({"scope": "system/Location.rs\x00"}, SCOPE_REFUSED, "not a scope token", id="nul"),
    pytest.param({"scope": 'system/Location.rs?name="DS"'}, SCOPE_REFUSED, "not a scope token", id="a-quote"),
    # resource scopes in a form the server does not read
    pytest.param({"scope": "User/Location.rs"}, SCOPE_REFUSED, "'User/Location.rs'", id="capital-U"),
    pytest.param({"scope": "pAtient/*.read"}, SCOPE_REFUSED, "'pAtient/*.read'", id="mixed-case-patient"),
    pytest.param({"scope": "system%252FLocation.rs"}, SCOPE_REFUSED, "decoded", id="double-encoded"),
    pytest.param({"scope": "%73ystem/Location.rs"}, SCOPE_REFUSED, "decoded", id="an-encoded-letter"),
    pytest.param({"scope": "system&#47;Location.rs"}, SCOPE_REFUSED, "decoded", id="html-entity"),
    pytest.param({"scope": "openid,system/Location.rs?partof:below=Location/10"}, SCOPE_REFUSED,
                 "'openid,system/", id="comma-joined"),
    pytest.param({"scope": "sytem/Location.rs?partof:below=Location/10"}, SCOPE_REFUSED, "'sytem/", id="typo"),
    pytest.param({"scope": "Location.rs?partof:below=Location/10"}, SCOPE_REFUSED, "'Location.rs?",
                 id="no-context"),
    pytest.param({"scope": "system:Location.rs"}, SCOPE_REFUSED, "'system:Location.rs'", id="colon-for-slash"),
    pytest.param({"scope": "system/Location.sr"}, SCOPE_REFUSED, "letters of cruds in that order",
                 id="letters-out-of-order"),
    pytest.param({"scope": "system/location.rs"}, SCOPE_REFUSED, "names no resource type", id="lower-case-type"),
    pytest.param({"scope": "system/Location"}, SCOPE_REFUSED, "cannot be read", id="no-letters"),
    pytest.param({"scope": "system/Location.rs,"}, SCOPE_REFUSED, "cannot be read", id="trailing-comma"),
    pytest.param({"scope": "system/Location.rs?partof:below=Location/10 system/Organization.RS"}, SCOPE_REFUSED,
                 "'system/Organization.RS'", id="one-good-one-not"),
    # beside a scope with a query, only scopes the server knows
    pytest.param({"scope": f"{BELOW} roles"}, SCOPE_REFUSED, "auth.other_scopes", id="an-idp-scope-not-listed"),
    pytest.param({"scp": [BELOW, "Diko"]}, SCOPE_REFUSED, "must be encoded (%20)", id="the-issue's-Diko"),
    pytest.param({"scope": f"{BELOW} OPENID"}, SCOPE_REFUSED, "'OPENID'", id="a-standard-scope-mis-cased"),
]


@pytest.mark.parametrize("claims, description, named", REFUSED)
def test_a_token_the_server_cannot_read_is_refused_everywhere(app_client: TestClient, ctx: ServerContext,
                                                              claims: dict[str, Any], description: str,
                                                              named: str) -> None:
    headers = bearer(ctx.settings, **claims)
    for path in PATHS:
        answer = app_client.get(path, headers=headers)
        assert answer.status_code == 401, (path, answer.text)
        assert answer.headers["www-authenticate"] == (
            f'Bearer realm="orgunit-fhir", error="invalid_token", error_description="{description}"')
        outcome = answer.json()
        assert outcome["resourceType"] == "OperationOutcome"
        diagnostics = outcome["issue"][0]["diagnostics"]
        assert named in diagnostics and "refused rather than the scope ignored" in diagnostics, diagnostics
        assert len(diagnostics) < 600


# (claims, the trusted search whose matches the token sees of Location; None: a 403, it may see none)
NARROWED = [
    pytest.param({"scp": "system/Location.rs?partof:below=Location/10"}, "partof:below=10", id="scp-a-string"),
    pytest.param({"scope": ["system/Location.rs?partof:below=Location/10"]}, "partof:below=10", id="scope-a-list"),
    pytest.param({"scope": BELOW, "scp": [BELOW]}, "partof:below=10", id="the-same-in-scope-and-scp"),
    pytest.param({"scope": BELOW, "scp": ["system/Location.rs?_id=3"]}, "_id=3,20,30,31,32",
                 id="scope-and-scp-a-union"),
    pytest.param({"scope": f"{BELOW} offline_access"}, "partof:below=10", id="beside-offline_access"),
    pytest.param({"scope": f"openid profile email {BELOW} launch/patient fhirUser"}, "partof:below=10",
                 id="beside-standard-scopes"),
    pytest.param({"scp": ["service_org_units", BELOW]}, "partof:below=10", id="beside-the-permission"),
    pytest.param({"scope": f"  {BELOW}  "}, "partof:below=10", id="spaces-around"),
    pytest.param({"scp": ["system/Location.rs?partof.name=DS%20Boromo"]}, "partof.name=DS Boromo",
                 id="an-encoded-space"),
    pytest.param({"scope": "system/Location.rs?partof.name=DS+Boromo"}, "partof.name=DS Boromo",
                 id="a-plus-for-the-space"),
    pytest.param({"scope": "system/Location.rs roles web-origins"}, "", id="unknown-scopes-beside-no-query"),
    pytest.param({"scope": "patient/Location.rs"}, None, id="patient-scopes-grant-nothing"),
    pytest.param({"scope": "system/Location.cud"}, None, id="write-letters-grant-nothing"),
    pytest.param({"scope": "system/Organization.rs User.Read"}, None, id="beside-a-scope-of-another-api"),
    # no resource scope at all: not narrowed, as before scopes existed
    pytest.param({"scope": "openid profile service_org_units"}, "", id="no-resource-scope"),
    pytest.param({"scope": ""}, "", id="an-empty-string"),
    pytest.param({"scp": []}, "", id="an-empty-list"),
    pytest.param({"scope": "x" * 300}, "", id="a-long-unknown-scope-alone"),
    pytest.param({"scope": None, "scp": None}, "", id="null-claims"),
]


@pytest.mark.parametrize("claims, trusted", NARROWED)
def test_a_token_sees_what_its_recognised_scopes_grant_and_no_more(app_client: TestClient, ctx: ServerContext,
                                                                  claims: dict[str, Any], trusted: str | None) -> None:
    headers = bearer(ctx.settings, **claims)
    if trusted is None:
        assert app_client.get(EVERYTHING, headers=headers).status_code == 403
        assert app_client.get("/fhir/Location/30", headers=headers).status_code == 403
        return
    seen = _ids(app_client, EVERYTHING, headers)
    assert seen == _ids(app_client, f"{EVERYTHING}?{trusted}", bearer(ctx.settings)), seen
    for unit in {"1", "2", "3", "10", "11", "20", "30", "31", "32"} - seen:
        assert app_client.get(f"/fhir/Location/{unit}", headers=headers).status_code == 404


@pytest.fixture(scope="module")
def idp_client(ctx: ServerContext, backend_url: str, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[tuple[TestClient, ServerContext]]:
    """The same data, served with auth.other_scopes naming Keycloak's `roles` and `web-origins`."""
    settings = make_settings(backend_url, tmp_path_factory.mktemp("other"),
                             auth={"secret": SECRET, "other_scopes": ["roles", "web-origins"]})
    context = create_context(settings)
    with TestClient(create_app(settings, context=context), base_url="http://testserver") as client:
        yield client, context
    context.db.dispose()


@pytest.mark.parametrize("scope, status", [
    pytest.param(f"{BELOW} roles web-origins", 200, id="listed"),
    pytest.param(f"{BELOW} roles acr", 401, id="one-listed-one-not"),
])
def test_an_identity_provider_s_own_scopes_are_listed_in_other_scopes(
        idp_client: tuple[TestClient, ServerContext], scope: str, status: int) -> None:
    client, context = idp_client
    headers = bearer(context.settings, scope=scope)
    answer = client.get(EVERYTHING, headers=headers)
    assert answer.status_code == status, answer.text
    if status == 200:
        assert _ids(client, EVERYTHING, headers) == _ids(client, f"{EVERYTHING}?partof:below=10",
                                                         bearer(context.settings))
    else:
        assert "'acr' is not a scope this server knows" in answer.json()["issue"][0]["diagnostics"]


@pytest.mark.parametrize("other", [
    pytest.param("system/Location.rs", id="a-resource-scope"),
    pytest.param("System/Location.rs", id="a-mis-cased-one"),
    pytest.param("system%2FLocation.rs", id="an-encoded-one"),
    pytest.param("openid,user/*.rs", id="a-joined-one"),
    pytest.param("two words", id="a-space"),
    pytest.param("caf\u00e9", id="not-ascii"),
    pytest.param("", id="empty"),
])
def test_other_scopes_never_name_a_resource_scope(other: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Listed, such a scope would be ignored where it must narrow: the server does not start."""
    settings = make_settings("sqlite://", tmp_path_factory.mktemp("bad"),
                             auth={"secret": SECRET, "other_scopes": [other]})
    with pytest.raises(ConfigError, match="auth.other_scopes"):
        create_context(settings)


@pytest.mark.parametrize("claims, status", [
    pytest.param({"scope": 5}, 401, id="a-number"),
    pytest.param({"scp": ["service_org_units system/Location.rs"]}, 401, id="an-element-with-a-space"),
    pytest.param({"scope": "System/Location.rs service_org_units"}, 200, id="a-mis-cased-scope: not read"),
])
def test_with_scopes_not_honoured_the_claims_are_still_read_strictly(
        backend_url: str, tmp_path_factory: pytest.TempPathFactory, ctx: ServerContext, claims: dict[str, Any],
        status: int) -> None:
    """auth.smart_scopes: false: no scope narrows, so none can widen; but the permission is read among the scopes,
    and a claim that cannot be read still refuses the token."""
    settings = make_settings(backend_url, tmp_path_factory.mktemp("off"), auth={"secret": SECRET,
                                                                               "smart_scopes": False})
    context = create_context(settings)
    try:
        with TestClient(create_app(settings, context=context), base_url="http://testserver") as client:
            answer = client.get(EVERYTHING, headers=bearer(settings, permissions=[], **claims))
            assert answer.status_code == status, answer.text
    finally:
        context.db.dispose()


@pytest.fixture(scope="module")
def nested_client(ctx: ServerContext, backend_url: str, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[tuple[TestClient, ServerContext]]:
    """The same data, with scopes read at a dotted path too (an identity provider nesting its claims)."""
    settings = make_settings(backend_url, tmp_path_factory.mktemp("nested"),
                             auth={"secret": SECRET, "scope_claims": ["scope", "ext.scp"]})
    context = create_context(settings)
    with TestClient(create_app(settings, context=context), base_url="http://testserver") as client:
        yield client, context
    context.db.dispose()


# a part above a scope claim that is present but not an object: the claim cannot be read, so the token is refused
# (it was read as absent: the token was not narrowed at all and saw every unit)
@pytest.mark.parametrize("claims, status, seen", [
    pytest.param({"ext": {"scp": [BELOW]}}, 200, "partof:below=10", id="at-its-path"),
    pytest.param({"ext": {}}, 200, "", id="absent-not-narrowed"),
    pytest.param({"ext": BELOW}, 401, None, id="parent-a-string"),
    pytest.param({"ext": [BELOW]}, 401, None, id="parent-a-list"),
    pytest.param({"ext": None}, 401, None, id="parent-null"),
    pytest.param({"Ext": {"scp": [BELOW]}}, 401, "case", id="parent-mis-cased"),
    pytest.param({"ext": {"SCP": [BELOW]}}, 401, "case", id="claim-mis-cased"),
])
def test_a_scope_claim_whose_path_cannot_be_read_refuses_the_token(
        nested_client: tuple[TestClient, ServerContext], claims: dict[str, Any], status: int,
        seen: str | None) -> None:
    client, context = nested_client
    headers = bearer(context.settings, **claims)
    answer = client.get(EVERYTHING, headers=headers)
    assert answer.status_code == status, answer.text
    if seen == "case":
        assert "but for its case" in answer.json()["issue"][0]["diagnostics"]
    elif seen is not None:
        assert _ids(client, EVERYTHING, headers) == _ids(client, f"{EVERYTHING}?{seen}", bearer(context.settings))
    else:
        assert "'ext.scp' cannot be read" in answer.json()["issue"][0]["diagnostics"]
