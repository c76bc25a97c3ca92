"""A real authorization server (oidc-provider, tests.support.authserver) issuing client-credentials tokens to
confidential clients authenticating with private_key_jwt, verified by the server through auth.jwks_url: valid,
expired and wrong-audience tokens, scopes, key rotation without a restart; then real SMART backend clients end to
end: cumulus-fhir-support (discovery and token exchange by itself) and python fhirclient 4.4. On both backends."""
from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.engine.context import ServerContext, create_context
from server.storage.prerender import refresh
from tests.support.authserver import AuthServer, ClientKey, Registration, TokenRefused, authorization_server
from tests.support.contexts import make_settings
from tests.support.data import UNITS, load_small_pyramid
from tests.support.served import served

FHIR_AUDIENCE = "https://registry.test/fhir"
OTHER_AUDIENCE = "https://other.test/fhir"
SCOPES = ("system/Location.rs system/Location.read system/Organization.rs system/*.rs system/*.read "
          "service_org_units system/Location.rs?type=CSPS system/Location.rs?typo=CSPS")
PARTNER = ClientKey.generate("registry-partner")  # its tokens carry the permission claim (an IdP's mapper)
SCOPE_ONLY = ClientKey.generate("scope-only-partner")  # the permission only as a scope it asks for
SHORT = ClientKey.generate("short-lived")  # tokens valid 3 seconds
ALL_UNITS = {str(u.id) for u in UNITS}


@pytest.fixture(scope="module")
def authserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthServer]:
    permission = {"permissions": ["service_org_units"]}
    clients = [Registration(PARTNER, SCOPES, permission), Registration(SCOPE_ONLY, SCOPES),
               Registration(SHORT, SCOPES, permission, ttl=3)]
    resources = {FHIR_AUDIENCE: {"scope": SCOPES}, OTHER_AUDIENCE: {"scope": SCOPES}}
    with authorization_server(tmp_path_factory.mktemp("authserver"), clients, resources, FHIR_AUDIENCE) as server:
        yield server


@pytest.fixture(scope="module")
def ctx(backend_url: str, authserver: AuthServer, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[ServerContext]:
    """The small pyramid, served with the authorization server's settings as an operator writes them from its
    discovery document."""
    meta = authserver.metadata
    settings = make_settings(backend_url, tmp_path_factory.mktemp("var"), auth={
        "algorithms": ["RS256"], "jwks_url": meta["jwks_uri"], "issuer": meta["issuer"], "audience": FHIR_AUDIENCE,
        "token_endpoint": meta["token_endpoint"], "revocation_endpoint": meta["revocation_endpoint"],
        "introspection_endpoint": meta["introspection_endpoint"], "leeway": 0, "jwks_refetch_seconds": 0,
        "public_metadata": True})
    context = create_context(settings)
    context.extensions.schema.upgrade(context.db)
    load_small_pyramid(context.db)
    refresh(context.db, context.registry)
    yield context
    context.db.dispose()


@pytest.fixture(scope="module")
def client(ctx: ServerContext) -> Iterator[TestClient]:
    with TestClient(create_app(ctx.settings, context=ctx), base_url="http://testserver") as c:
        yield c


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def header_of(token: str) -> dict[str, Any]:
    segment = token.split(".")[0]
    return dict(json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))))


def test_a_valid_token_reads_and_searches_within_its_scopes(client: TestClient, authserver: AuthServer) -> None:
    token = authserver.token(PARTNER, "system/Location.rs")
    assert client.get("/fhir/Location/30", headers=bearer(token)).status_code == 200
    bundle = client.get("/fhir/Location", headers=bearer(token)).json()
    assert bundle["total"] == len(ALL_UNITS)
    refused = client.get("/fhir/Organization", headers=bearer(token))
    assert refused.status_code == 403
    assert "system/Organization.s" in refused.json()["issue"][0]["diagnostics"]


@pytest.mark.parametrize("key, scope, location, organization", [
    pytest.param(PARTNER, "system/Location.read", 200, 403, id="v1-one-type"),
    pytest.param(PARTNER, "system/*.read", 200, 200, id="v1-wildcard"),
    pytest.param(PARTNER, "system/Location.rs system/Organization.rs", 200, 200, id="v2-two-types"),
    pytest.param(PARTNER, "system/*.rs", 200, 200, id="v2-wildcard"),
    pytest.param(SCOPE_ONLY, "service_org_units system/Location.rs", 200, 403, id="permission-as-a-scope"),
    pytest.param(SCOPE_ONLY, "system/*.rs", 403, 403, id="no-permission"),
])
def test_scopes_of_real_tokens(client: TestClient, authserver: AuthServer, key: ClientKey, scope: str,
                               location: int, organization: int) -> None:
    token = authserver.token(key, scope)
    assert client.get("/fhir/Location?_count=1", headers=bearer(token)).status_code == location
    assert client.get("/fhir/Organization", headers=bearer(token)).status_code == organization


def test_an_expired_token_is_refused(client: TestClient, authserver: AuthServer) -> None:
    token = authserver.token(SHORT, "system/Location.rs")
    assert client.get("/fhir/Location/30", headers=bearer(token)).status_code == 200
    expires = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))["exp"]
    time.sleep(max(0.0, expires - time.time()) + 0.2)
    response = client.get("/fhir/Location/30", headers=bearer(token))
    assert response.status_code == 401
    assert 'error_description="token expired"' in response.headers["www-authenticate"]


def test_a_token_for_another_audience_is_refused(client: TestClient, authserver: AuthServer) -> None:
    token = authserver.token(PARTNER, "system/Location.rs", resource=OTHER_AUDIENCE)
    response = client.get("/fhir/Location/30", headers=bearer(token))
    assert response.status_code == 401
    assert "wrong audience" in response.headers["www-authenticate"]


def test_a_granular_scope_with_a_query_from_the_authorization_server_is_honoured(
        client: TestClient, authserver: AuthServer) -> None:
    token = authserver.token(PARTNER, "system/Location.rs?type=CSPS")
    response = client.get("/fhir/Location", headers=bearer(token))
    assert response.status_code == 200, response.text
    csps = {str(u.id) for u in UNITS if u.type_short_name == "CSPS"}
    assert {e["resource"]["id"] for e in response.json()["entry"]} == csps
    assert client.get("/fhir/Location/10", headers=bearer(token)).status_code == 404
    refused = client.get("/fhir/Location", headers=bearer(authserver.token(PARTNER, "system/Location.rs?typo=CSPS")))
    assert refused.status_code == 401 and "typo" in refused.json()["issue"][0]["diagnostics"]


def test_the_authorization_server_refuses_a_client_without_its_key(authserver: AuthServer) -> None:
    impostor = ClientKey.generate(PARTNER.client_id)
    with pytest.raises(TokenRefused) as refused:
        authserver.token(impostor, "system/Location.rs")
    assert refused.value.status == 401 and refused.value.body["error"] == "invalid_client"


def test_a_key_rotation_is_picked_up_without_a_restart(client: TestClient, authserver: AuthServer) -> None:
    before = authserver.token(PARTNER, "system/Location.rs")
    assert client.get("/fhir/Location/30", headers=bearer(before)).status_code == 200
    for drop in (False, True):  # a new key beside the old ones, then a new key alone
        kid = authserver.rotate(drop=drop)
        after = authserver.token(PARTNER, "system/Location.rs")
        assert header_of(after)["kid"] == kid != header_of(before)["kid"]
        response = client.get("/fhir/Location/30", headers=bearer(after))
        assert response.status_code == 200, response.text
        before = after


def test_discovery_names_the_authorization_server(client: TestClient, authserver: AuthServer) -> None:
    document = client.get("/fhir/.well-known/smart-configuration").json()
    assert document["token_endpoint"] == authserver.token_endpoint
    assert document["issuer"] == authserver.issuer and document["jwks_uri"] == authserver.jwks_uri
    assert "private_key_jwt" in authserver.metadata["token_endpoint_auth_methods_supported"]


# ------------------------------------------------------------------ real SMART backend clients

def test_cumulus_client_discovers_gets_a_token_reads_searches_and_pages(ctx: ServerContext) -> None:
    """cumulus-fhir-support (SMART Health IT's backend client): reads the CapabilityStatement, then
    .well-known/smart-configuration, signs its own client assertion, gets a token and re-authorizes on a 401."""
    from cumulus_fhir_support import FhirClient

    async def run(base: str) -> tuple[dict[str, Any], list[str], int]:
        async with FhirClient(base, ["Location"], smart_client_id=PARTNER.client_id,
                              smart_jwks=PARTNER.private_jwks()) as fhir:
            read = (await fhir.request("GET", "Location/30", retry_delays=[])).json()
            page = (await fhir.request("GET", "Location?_count=4", retry_delays=[])).json()
            total, seen = page["total"], list[str]()
            while True:
                seen += [e["resource"]["id"] for e in page.get("entry", [])]
                following = next((link["url"] for link in page["link"] if link["relation"] == "next"), None)
                if following is None:
                    return read, seen, total
                page = (await fhir.request("GET", following, retry_delays=[])).json()

    with served(create_app(ctx.settings, context=ctx)) as root:
        read, seen, total = asyncio.run(run(f"{root}/fhir"))
    assert read["resourceType"] == "Location" and read["id"] == "30"
    assert total == len(ALL_UNITS) and sorted(seen) == sorted(ALL_UNITS) and len(seen) == len(set(seen))


def test_fhirclient_reads_the_capability_statement_keeps_its_token_and_pages(ctx: ServerContext,
                                                                             authserver: AuthServer) -> None:
    from fhirclient import client as fhirclient
    from fhirclient.models.location import Location

    with served(create_app(ctx.settings, context=ctx)) as root:
        smart = fhirclient.FHIRClient(settings={
            "app_id": PARTNER.client_id, "api_base": f"{root}/fhir", "scope": "system/Location.rs",
            "jwt_token": PARTNER.assertion(authserver.token_endpoint)})
        smart.wants_patient = False
        assert smart.prepare() is False  # the CapabilityStatement read first: its token URL known, no token yet
        assert smart.server.auth._token_uri == authserver.token_endpoint
        smart.authorize()  # client credentials with its private_key_jwt assertion
        assert smart.ready
        read = Location.read("30", smart.server)
        ids = [location.id for location in Location.where({"_count": "2"}).perform_resources_iter(smart.server)]
        pages = list(Location.where({"_count": "4", "_sort": "-name"}).perform_iter(smart.server))
    assert read.id == "30"
    assert sorted(ids) == sorted(ALL_UNITS) and len(ids) == len(set(ids))
    assert len(pages) == 3 and sum(len(p.entry or []) for p in pages) == len(ALL_UNITS)
