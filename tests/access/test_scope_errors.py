"""Scope errors as OAuth clients read them (RFC 6750 section 3.1), on both backends: a 403 for a SMART scope the
token lacks carries `WWW-Authenticate: Bearer error="insufficient_scope", scope="<the scope needed>"`, whichever
interaction was denied (the pipeline's check, Bulk Data's own); a 403 for another reason carries none. `$export`
needs read access (`r`, or v1 `.read`) on the types it exports, as the Bulk Data spec says: search (`s`) is not
needed, nor enough."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.engine.context import ServerContext
from server.errors import Denial, Forbidden
from tests.support.bulk import ASYNC, export, lines
from tests.support.contexts import bearer, pyramid_context
from tests.support.fixtures import client_fixture, context_fixture

ctx = context_fixture(pyramid_context)
api = client_fixture()
PERMISSION = "service_org_units"


def challenge(scope: str) -> str:
    return f'Bearer realm="orgunit-fhir", error="insufficient_scope", scope="{scope}"'


@pytest.mark.parametrize("path, headers, scopes, needed", [
    pytest.param("/fhir/Location/30", {}, "system/Location.s", "system/Location.r", id="read"),
    pytest.param("/fhir/Location/30/_history/1", {}, "system/Location.s", "system/Location.r", id="vread"),
    pytest.param("/fhir/Location/30/_history", {}, "system/Location.s", "system/Location.r", id="history"),
    pytest.param("/fhir/Location", {}, "system/Location.r", "system/Location.s", id="search"),
    pytest.param("/fhir/Location?type=CSPS", {}, "system/Organization.rs", "system/Location.s",
                 id="search-another-type"),
    pytest.param("/fhir/Location/20/$children", {}, "system/Location.r", "system/Location.s", id="operation"),
    pytest.param("/fhir/Organization", {}, "user/Location.rs", "user/Organization.s", id="user-context"),
    pytest.param("/fhir/Location/$export", ASYNC, "system/Location.s", "system/Location.r", id="type-export"),
    pytest.param("/fhir/$export?_type=Location", ASYNC, "system/Organization.rs", "system/Location.r",
                 id="system-export-of-a-type-named"),
    pytest.param("/fhir/$export?_typeFilter=Location%3Ftype%3DCSPS", ASYNC, "system/Organization.rs",
                 "system/Location.r", id="system-export-of-a-type-filtered"),
])
def test_a_scope_error_names_the_scope_needed(api: TestClient, ctx: ServerContext, path: str,
                                              headers: dict[str, str], scopes: str, needed: str) -> None:
    answer = api.get(path, headers={**headers, **bearer(ctx.settings, scope=f"{scopes} {PERMISSION}")})
    assert answer.status_code == 403, answer.text
    assert answer.headers["www-authenticate"] == challenge(needed)
    assert answer.json()["issue"][0]["code"] == "forbidden" and needed in answer.json()["issue"][0]["diagnostics"]


@pytest.mark.parametrize("claims", [
    pytest.param({"permissions": []}, id="without-the-permission"),
    pytest.param({"permissions": [], "scope": "system/Location.rs"}, id="scopes-without-the-permission"),
    pytest.param({"account": 12}, id="a-bad-account-claim"),
])
def test_another_403_is_no_scope_error(api: TestClient, ctx: ServerContext, claims: dict[str, Any]) -> None:
    answer = api.get("/fhir/Location/30", headers=bearer(ctx.settings, **claims))
    assert answer.status_code == 403, answer.text
    assert "www-authenticate" not in answer.headers


@pytest.mark.parametrize("path, scopes, exported", [
    pytest.param("/fhir/Location/$export", "system/Location.r", {"Location"}, id="type-level-v2-read"),
    pytest.param("/fhir/Location/$export", "system/Location.read", {"Location"}, id="type-level-v1-read"),
    pytest.param("/fhir/$export", "system/Location.r", {"Location"}, id="system-level-v2-read"),
    pytest.param("/fhir/$export", "system/*.r", {"Location", "Organization"}, id="system-level-v2-read-every-type"),
    pytest.param("/fhir/$export", "system/Location.read system/Organization.r", {"Location", "Organization"},
                 id="system-level-v1-and-v2"),
    pytest.param("/fhir/$export", "system/Location.r system/Organization.s", {"Location"},
                 id="search-alone-exports-nothing"),
])
def test_an_export_needs_read_access_only(api: TestClient, ctx: ServerContext, path: str, scopes: str,
                                          exported: set[str]) -> None:
    headers = bearer(ctx.settings, scope=f"{scopes} {PERMISSION}")
    found = export(api, path, headers)
    assert set(lines(api, found["output"], headers)) == exported


def test_a_browser_client_may_read_the_challenge(ctx: ServerContext) -> None:
    """With CORS on, WWW-Authenticate is among the headers a page's script may read."""
    origin = "https://app.example.org"
    settings = replace(ctx.settings, server=replace(ctx.settings.server, cors_origins=(origin,)))
    with TestClient(create_app(settings, context=replace(ctx, settings=settings))) as client:
        answer = client.get("/fhir/Location", headers={"Origin": origin, **bearer(
            ctx.settings, scope=f"system/Location.r {PERMISSION}")})
    assert answer.status_code == 403 and answer.headers["www-authenticate"] == challenge("system/Location.s")
    assert "WWW-Authenticate" in answer.headers["access-control-expose-headers"].split(", ")


def test_a_denial_carries_its_scope_into_the_403() -> None:
    lacking = Denial("no read on Location", "system/Location.r")
    assert Forbidden(lacking).scope == "system/Location.r" and Forbidden("no").scope is None
    joined = Denial.joined(["a plugin's reason", lacking])
    assert joined == "a plugin's reason; no read on Location" and joined.scope == "system/Location.r"
    assert Denial.joined(["one", "two"]).scope is None
