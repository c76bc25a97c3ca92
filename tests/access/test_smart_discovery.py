"""SMART discovery: /.well-known/smart-configuration (under [base] and at the root), public, built from the
settings, 404 without an authorization server; CapabilityStatement.rest.security with the SMART-on-FHIR service and
the oauth-uris extension; the settings it takes; check-config's line. On both backends."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.access.mint import mint_token
from server.access.smart import OAUTH_URIS
from server.app import create_app
from server.cli.main import main
from server.engine.context import ServerContext, create_context
from server.errors import ConfigError
from server.settings import parse_settings
from tests.support.contexts import SECRET, make_settings, pyramid_context
from tests.support.validators import assert_valid

AS = "https://as.example.org/realms/health"
AUTH = {
    "secret": SECRET, "issuer": AS, "token_endpoint": f"{AS}/token", "authorization_endpoint": f"{AS}/auth",
    "revocation_endpoint": f"{AS}/revoke", "introspection_endpoint": f"{AS}/introspect",
    "jwks_uri": f"{AS}/certs",
}
DISCOVERY_PATHS = ["/fhir/.well-known/smart-configuration", "/fhir/.well-known/smart-configuration/",
                   "/.well-known/smart-configuration", "/.well-known/smart-configuration/"]
TYPES = ["CodeSystem", "Location", "OperationDefinition", "Organization", "StructureDefinition"]


@pytest.fixture(scope="module")
def data(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerContext]:
    context = pyramid_context(backend_url, tmp_path_factory.mktemp("var"))
    yield context
    context.db.dispose()


def client_with(backend_url: str, tmp: Path, **auth: Any) -> Iterator[TestClient]:
    settings = make_settings(backend_url, tmp, auth=auth)
    context = create_context(settings)
    with TestClient(create_app(settings, context=context), base_url="http://testserver") as client:
        client.headers["Authorization"] = f"Bearer {mint_token(settings)}"
        yield client
    context.db.dispose()


@pytest.fixture(scope="module")
def smart_client(data: ServerContext, backend_url: str, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[TestClient]:
    yield from client_with(backend_url, tmp_path_factory.mktemp("smart"), **AUTH)


@pytest.fixture(scope="module")
def plain_client(data: ServerContext, backend_url: str, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[TestClient]:
    yield from client_with(backend_url, tmp_path_factory.mktemp("plain"), secret=SECRET)


EXPECTED = {
    "issuer": AS,
    "jwks_uri": f"{AS}/certs",
    "authorization_endpoint": f"{AS}/auth",
    "token_endpoint": f"{AS}/token",
    "grant_types_supported": ["client_credentials", "authorization_code"],
    "token_endpoint_auth_methods_supported": ["private_key_jwt"],
    "token_endpoint_auth_signing_alg_values_supported": ["RS384", "ES384"],
    "revocation_endpoint": f"{AS}/revoke",
    "introspection_endpoint": f"{AS}/introspect",
    "scopes_supported": [*(f"system/{t}.{s}" for t in [*TYPES, "*"] for s in ("rs", "read")), "service_org_units"],
    "response_types_supported": ["code"],
    "code_challenge_methods_supported": ["S256"],
    "capabilities": ["client-confidential-asymmetric", "permission-v1", "permission-v2"],
}


@pytest.mark.parametrize("path", DISCOVERY_PATHS)
def test_discovery_document_is_public_and_built_from_the_settings(smart_client: TestClient, path: str) -> None:
    response = smart_client.get(path, headers={"Authorization": ""})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "public, max-age=3600"
    assert response.json() == EXPECTED
    head = smart_client.head(path, headers={"Authorization": ""})
    assert head.status_code == 200 and head.content == b""


@pytest.mark.parametrize("auth, expected", [
    pytest.param({"token_endpoint": f"{AS}/token"},
                 {"token_endpoint": f"{AS}/token", "grant_types_supported": ["client_credentials"],
                  "token_endpoint_auth_methods_supported": ["private_key_jwt"],
                  "token_endpoint_auth_signing_alg_values_supported": ["RS384", "ES384"],
                  "code_challenge_methods_supported": ["S256"],
                  "capabilities": ["client-confidential-asymmetric", "permission-v1", "permission-v2"]},
                 id="token-endpoint-only"),
    pytest.param({"token_endpoint": f"{AS}/token", "smart_scopes": False,
                  "token_endpoint_auth_methods": ["client_secret_basic"], "jwks_url": f"{AS}/internal-certs"},
                 {"jwks_uri": f"{AS}/internal-certs", "token_endpoint": f"{AS}/token",
                  "grant_types_supported": ["client_credentials"],
                  "token_endpoint_auth_methods_supported": ["client_secret_basic"],
                  "code_challenge_methods_supported": ["S256"],
                  "capabilities": ["client-confidential-symmetric"]},
                 id="symmetric-scopes-off-jwks-url"),
])
def test_discovery_document_variants(data: ServerContext, backend_url: str, tmp_path: Path, auth: dict[str, Any],
                                     expected: dict[str, Any]) -> None:
    for client in client_with(backend_url, tmp_path, secret=SECRET, algorithms=["HS256"], **auth):
        document = client.get("/fhir/.well-known/smart-configuration").json()
        scopes = document.pop("scopes_supported")
        assert document == expected
        assert scopes == (["service_org_units"] if auth.get("smart_scopes") is False else EXPECTED["scopes_supported"])


@pytest.mark.parametrize("path", DISCOVERY_PATHS)
def test_no_discovery_without_an_authorization_server(plain_client: TestClient, path: str) -> None:
    response = plain_client.get(path)
    assert response.status_code == 404
    outcome = response.json()
    assert outcome["resourceType"] == "OperationOutcome" and outcome["issue"][0]["code"] == "not-found"
    assert "no authorization server is configured" in outcome["issue"][0]["diagnostics"]


def test_security_names_the_smart_service_and_the_oauth_uris(smart_client: TestClient) -> None:
    statement = smart_client.get("/fhir/metadata").json()
    assert_valid(statement)
    security = statement["rest"][0]["security"]
    assert security["service"][0]["coding"] == [{
        "system": "http://terminology.hl7.org/CodeSystem/restful-security-service", "code": "SMART-on-FHIR",
        "display": "SMART-on-FHIR"}]
    assert security["extension"] == [{"url": OAUTH_URIS, "extension": [
        {"url": "token", "valueUri": f"{AS}/token"}, {"url": "authorize", "valueUri": f"{AS}/auth"},
        {"url": "revoke", "valueUri": f"{AS}/revoke"}, {"url": "introspect", "valueUri": f"{AS}/introspect"}]}]
    assert "system/Location.rs" in security["description"]


def test_fhirclient_finds_the_token_url_in_the_security_block(smart_client: TestClient) -> None:
    from fhirclient.auth import FHIRAuth
    from fhirclient.models.capabilitystatement import CapabilityStatement

    statement = CapabilityStatement(smart_client.get("/fhir/metadata").json(), strict=True)
    auth = FHIRAuth.from_capability_security(statement.rest[0].security, {"jwt_token": "an assertion"})
    assert auth.auth_type == "oauth2" and auth._token_uri == f"{AS}/token"


def test_security_without_an_authorization_server(plain_client: TestClient) -> None:
    statement = plain_client.get("/fhir/metadata").json()
    assert_valid(statement)
    security = statement["rest"][0]["security"]
    assert "extension" not in security
    assert security["service"][0]["coding"][0]["code"] == "OAuth"


@pytest.mark.parametrize("auth, message", [
    pytest.param({"token_endpoint": "as.example.org/token"}, "auth.token_endpoint: expected an http(s) URL",
                 id="token-endpoint-not-a-url"),
    pytest.param({"jwks_uri": "file:///etc/keys"}, "auth.jwks_uri: expected an http(s) URL", id="jwks-uri-not-http"),
    pytest.param({"revocation_endpoint": f"{AS}/revoke"}, "set its auth.token_endpoint too",
                 id="revocation-without-token-endpoint"),
    pytest.param({"scope_claims": ["scope", ""]}, "auth.scope_claims", id="empty-claim-name"),
    pytest.param({"smart_scopes": "yes"}, "auth.smart_scopes: expected true or false", id="scopes-not-a-boolean"),
])
def test_settings_refuse_a_misconfigured_authorization_server(auth: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_settings({"auth": auth})


@pytest.mark.parametrize("settings_text, line", [
    pytest.param("", "ok    auth: no authorization server configured (auth.token_endpoint unset)", id="none"),
    pytest.param(f"auth:\n  token_endpoint: {AS}/token\n",
                 f"ok    auth: authorization server token endpoint {AS}/token; SMART discovery published; "
                 "SMART scopes honoured", id="configured"),
])
def test_check_config_says_whether_an_authorization_server_is_configured(
        settings_text: str, line: str, tmp_path: Path, sqlite_template: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\n{settings_text}", encoding="utf-8")
    database = tmp_path / "db.sqlite"
    database.write_bytes(sqlite_template.read_bytes())
    assert main(["check-config", "--settings", str(path), "--database", f"sqlite:///{database}"]) == 0
    out = capsys.readouterr().out
    assert line in out, out
