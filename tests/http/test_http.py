"""HTTP: routing, methods, status codes, headers, content negotiation, authentication."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.access.mint import mint_token
from server.engine.context import ServerContext
from server.settings import Settings
from tests.support.contexts import SECRET, make_settings

FHIR_JSON = "application/fhir+json;charset=utf-8"


def assert_outcome(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == FHIR_JSON
    body = response.json()
    assert body["resourceType"] == "OperationOutcome"
    assert body["issue"][0]["code"] == code and body["issue"][0]["severity"] == "error"
    assert body["issue"][0]["diagnostics"].strip()
    return body


@pytest.mark.parametrize("path, rtype", [
    pytest.param("/fhir/metadata", "CapabilityStatement", id="metadata"),
    pytest.param("/fhir/metadata/", "CapabilityStatement", id="metadata-slash"),
    pytest.param("/fhir/Location/metadata", "CapabilityStatement", id="type-metadata"),
    pytest.param("/fhir/Location/metadata/", "CapabilityStatement", id="type-metadata-slash"),
    pytest.param("/fhir/Location", "Bundle", id="search"),
    pytest.param("/fhir/Location/", "Bundle", id="search-slash"),
    pytest.param("/fhir/Location/30", "Location", id="read"),
    pytest.param("/fhir/Location/30/", "Location", id="read-slash"),
    pytest.param("/fhir/Location/20/children", "Bundle", id="children"),
    pytest.param("/fhir/Location/20/children/", "Bundle", id="children-slash"),
    pytest.param("/fhir/Location/20/$children", "Bundle", id="dollar-children"),
    pytest.param("/fhir/Location/20/$children/", "Bundle", id="dollar-children-slash"),
])
def test_endpoints_answer_with_and_without_slash(client: TestClient, path: str, rtype: str) -> None:
    response = client.get(path, follow_redirects=False)
    assert response.status_code == 200
    assert response.headers["content-type"] == FHIR_JSON
    assert response.json()["resourceType"] == rtype


def test_head_is_get_without_body(client: TestClient) -> None:
    response = client.head("/fhir/Location/30")
    assert response.status_code == 200 and response.content == b""
    assert response.headers["content-type"] == FHIR_JSON


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
@pytest.mark.parametrize("path", ["/fhir", "/fhir/Location", "/fhir/Location/30", "/fhir/metadata",
                                  "/fhir/Location/20/$children"])
def test_other_methods_are_405_with_allow(client: TestClient, method: str, path: str) -> None:
    response = client.request(method, path, content=b"{}")
    assert_outcome(response, 405, "not-supported")
    assert set(response.headers["allow"].replace(" ", "").split(",")) == {"GET", "HEAD"}


@pytest.mark.parametrize("path, status, code", [
    pytest.param("/fhir/Patient", 404, "not-supported", id="unknown-type"),
    pytest.param("/fhir/Patient/1", 404, "not-supported", id="unknown-type-read"),
    pytest.param("/fhir/Patient/metadata", 404, "not-supported", id="unknown-type-metadata"),
    pytest.param("/fhir/Location/999999", 404, "not-found", id="unknown-id"),
    pytest.param("/fhir/Location/not_a_fhir_id", 404, "not-found", id="bad-id-chars"),
    pytest.param("/fhir/Location/" + "1" * 65, 404, "not-found", id="id-too-long"),
    pytest.param("/fhir/Location/999999/$children", 404, "not-found", id="children-unknown-parent"),
    pytest.param("/fhir/Location/20/$everything", 404, "not-found", id="unknown-operation"),
    pytest.param("/nothing-here", 404, "not-found", id="outside-fhir"),
    pytest.param("/fhir", 404, "not-found", id="base"),
    pytest.param("/fhir/", 404, "not-found", id="base-slash"),
    pytest.param("/fhir/Location/1/a/b/c", 404, "not-found", id="too-deep"),
    pytest.param("/fhir/Location?status=open", 400, "value", id="bad-status"),
    pytest.param("/fhir/Location?_count=x", 400, "value", id="bad-count"),
    pytest.param("/fhir/Location?name:sounds=x", 400, "not-supported", id="bad-modifier"),
])
def test_errors_are_operation_outcomes(client: TestClient, path: str, status: int, code: str) -> None:
    assert_outcome(client.get(path), status, code)


@pytest.mark.parametrize("headers, query, media", [
    pytest.param({}, "", "application/fhir+json", id="no-accept"),
    pytest.param({"Accept": "application/fhir+json"}, "", "application/fhir+json", id="fhir-json"),
    pytest.param({"Accept": "application/json"}, "", "application/json", id="json"),
    pytest.param({"Accept": "*/*"}, "", "application/fhir+json", id="any"),
    pytest.param({"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}, "", "text/html", id="browser"),
    pytest.param({"Accept": "application/fhir+json, text/html;q=0.9"}, "", "application/fhir+json", id="html-second"),
    pytest.param({"Accept": "application/json;q=0.5, application/fhir+json"}, "", "application/fhir+json", id="q-order"),
    pytest.param({"Accept": "application/fhir+json;q=0.2, application/json;q=0.9"}, "", "application/json", id="q-prefers-json"),
    pytest.param({"Accept": "application/fhir+json; fhirVersion=4.0"}, "", "application/fhir+json", id="fhir-version-param"),
    pytest.param({"Accept": "text/html"}, "_format=json", "application/fhir+json", id="format-overrides"),
    pytest.param({}, "_format=application/json", "application/json", id="format-json-mime"),
    pytest.param({}, "_format=application/fhir%2Bjson", "application/fhir+json", id="format-fhir-json"),
    pytest.param({}, "_format=application/fhir+json", "application/fhir+json", id="format-plus-as-space"),
    pytest.param({"Accept": "application/fhir+xml"}, "", "application/fhir+xml", id="fhir-xml"),
    pytest.param({"Accept": "application/xml"}, "", "application/xml", id="xml"),
    pytest.param({"Accept": "text/xml"}, "", "text/xml", id="text-xml"),
    pytest.param({}, "_format=xml", "application/fhir+xml", id="format-xml"),
    pytest.param({"Accept": "application/fhir+xml"}, "_format=json", "application/fhir+json", id="format-beats-accept"),
])
def test_json_negotiation(client: TestClient, headers: dict[str, str], query: str, media: str) -> None:
    response = client.get(f"/fhir/Location/30?{query}", headers=headers)
    assert response.status_code == 200
    assert response.headers["content-type"] == f"{media};charset=utf-8"


@pytest.mark.parametrize("headers, query", [
    pytest.param({"Accept": "application/xhtml+xml"}, "", id="xhtml-only"),
    pytest.param({"Accept": "application/fhir+json;q=0"}, "", id="q-zero"),
    pytest.param({"Accept": "text/turtle"}, "", id="turtle"),
    pytest.param({}, "_format=turtle", id="format-turtle"),
])
def test_other_formats_are_406(client: TestClient, headers: dict[str, str], query: str) -> None:
    assert_outcome(client.get(f"/fhir/Location/30?{query}", headers=headers), 406, "not-supported")


def test_pretty(client: TestClient) -> None:
    assert b"\n  " in client.get("/fhir/Location/30?_pretty=true").content
    assert b"\n" not in client.get("/fhir/Location/30").content
    nxt = client.get("/fhir/Location?_count=2&_pretty=true").json()["link"]
    assert all("_pretty=true" in l["url"] for l in nxt)


# ------------------------------------------------------------------ authentication and authorization

def _claims(**extra: Any) -> dict[str, Any]:
    return {"sub": "t", "exp": int(time.time()) + 3600, "permissions": ["service_org_units"], **extra}


def sign(claims: dict[str, Any], key: str = SECRET, alg: str = "HS256", headers: dict[str, Any] | None = None) -> str:
    return jwt.encode(claims, key, algorithm=alg, headers=headers)


UNAUTHENTICATED = [
    pytest.param(None, id="missing"),
    pytest.param("Bearer", id="empty-bearer"),
    pytest.param("Basic dXNlcjpwYXNz", id="basic-scheme"),
    pytest.param("Bearer not.a.jwt", id="malformed"),
    pytest.param("Bearer " + sign(_claims(), key="another-secret-of-32-bytes-or-more!"), id="wrong-key"),
    pytest.param("Bearer " + sign(_claims(exp=int(time.time()) - 3600)), id="expired"),
    pytest.param("Bearer " + sign({"sub": "t", "permissions": ["service_org_units"]}), id="no-exp"),
    pytest.param("Bearer " + sign(_claims(nbf=int(time.time()) + 3600)), id="not-yet-valid"),
    pytest.param("Bearer " + jwt.encode(_claims(), None, algorithm="none"), id="alg-none"),
    pytest.param("Bearer " + sign(_claims(), key=SECRET * 2, alg="HS512"), id="alg-not-allowed"),
    pytest.param("Bearer " + "a" * 9000, id="oversized"),
]


@pytest.mark.parametrize("authorization", UNAUTHENTICATED)
@pytest.mark.parametrize("path", ["/fhir/Location", "/fhir/Location/30", "/fhir/metadata", "/fhir/Location/20/$children"])
def test_401_with_www_authenticate(client: TestClient, authorization: str | None, path: str) -> None:
    anonymous = TestClient(client.app)
    response = anonymous.get(path, headers={"Authorization": authorization} if authorization else {})
    assert_outcome(response, 401, "login")
    assert response.headers["www-authenticate"].startswith("Bearer realm=")


@pytest.mark.parametrize("claims", [
    pytest.param(_claims(permissions=[]), id="no-permission"),
    pytest.param(_claims(permissions=["other"]), id="other-permission"),
    pytest.param(_claims(permissions="service_org_units_x"), id="not-a-prefix-match"),
    pytest.param({k: v for k, v in _claims().items() if k != "permissions"}, id="no-claim"),
])
def test_403_without_the_permission(client: TestClient, claims: dict[str, Any]) -> None:
    response = client.get("/fhir/Location", headers={"Authorization": f"Bearer {sign(claims)}"})
    assert_outcome(response, 403, "forbidden")


@pytest.mark.parametrize("claims", [
    pytest.param(_claims(), id="permissions-array"),
    pytest.param({**_claims(permissions=None), "scope": "openid service_org_units profile"}, id="scope-string"),
    pytest.param(_claims(permissions="service_org_units other"), id="permissions-string"),
])
def test_permission_sources(client: TestClient, claims: dict[str, Any]) -> None:
    assert client.get("/fhir/Location/30", headers={"Authorization": f"Bearer {sign(claims)}"}).status_code == 200


def _app(tmp_path: Path, small_ctx: ServerContext, **sections: dict[str, Any]) -> tuple[TestClient, Settings]:
    sections["auth"] = {"secret": SECRET, **sections.get("auth", {})}
    settings = make_settings(small_ctx.settings.database_url, tmp_path, **sections)
    return TestClient(create_app(settings, db=small_ctx.db)), settings


def test_permission_at_a_dotted_claim_path(small_ctx: ServerContext, tmp_path: Path) -> None:
    client, _ = _app(tmp_path, small_ctx, auth={"permission_claim": "realm_access.roles"})
    keycloak = _claims(permissions=None, realm_access={"roles": ["service_org_units"]})
    assert client.get("/fhir/Location/30", headers={"Authorization": f"Bearer {sign(keycloak)}"}).status_code == 200
    assert client.get("/fhir/Location/30", headers={"Authorization": f"Bearer {sign(_claims())}"}).status_code == 403


def test_issuer_and_audience_enforced_when_configured(small_ctx: ServerContext, tmp_path: Path) -> None:
    client, _ = _app(tmp_path, small_ctx, auth={"issuer": "https://idp.test", "audience": "orgunit-fhir"})
    good = sign(_claims(iss="https://idp.test", aud="orgunit-fhir"))
    assert client.get("/fhir/Location/30", headers={"Authorization": f"Bearer {good}"}).status_code == 200
    for bad in (_claims(iss="https://evil", aud="orgunit-fhir"), _claims(iss="https://idp.test", aud="x"), _claims()):
        assert_outcome(client.get("/fhir/Location/30", headers={"Authorization": f"Bearer {sign(bad)}"}), 401, "login")


def test_public_metadata(small_ctx: ServerContext, tmp_path: Path) -> None:
    client, _ = _app(tmp_path, small_ctx, auth={"public_metadata": True})
    assert client.get("/fhir/metadata").status_code == 200
    assert client.get("/fhir/Location/metadata/").status_code == 200
    assert_outcome(client.get("/fhir/Location"), 401, "login")


def test_rs256_public_key(small_ctx: ServerContext, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = tmp_path / "idp.pem"
    pem.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    client, _ = _app(tmp_path, small_ctx, auth={"algorithms": ["RS256", "HS256"], "public_key_file": str(pem)})
    good = jwt.encode(_claims(), key, algorithm="RS256")
    assert client.get("/fhir/Location/30", headers={"Authorization": f"Bearer {good}"}).status_code == 200
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(_claims(), other, algorithm="RS256")
    assert_outcome(client.get("/fhir/Location/30", headers={"Authorization": f"Bearer {forged}"}), 401, "login")
    # HS/RS confusion: the public key used as an HMAC secret must never verify
    confused = jwt.encode(_claims(), "x" * 40, algorithm="HS256")
    assert_outcome(client.get("/fhir/Location/30", headers={"Authorization": f"Bearer {confused}"}), 401, "login")


def test_secret_generated_into_data_dir_and_cli_token_verifies(small_ctx: ServerContext, tmp_path: Path) -> None:
    settings = make_settings(small_ctx.settings.database_url, tmp_path)
    client = TestClient(create_app(settings, db=small_ctx.db))
    assert (tmp_path / "var" / "jwt-secret").exists()
    token = mint_token(settings)
    assert client.get("/fhir/Location/30", headers={"Authorization": f"Bearer {token}"}).status_code == 200


# ------------------------------------------------------------------ base URL, CORS, failures

def test_base_url_from_settings(small_ctx: ServerContext, tmp_path: Path) -> None:
    client, settings = _app(tmp_path, small_ctx, server={"base_url": "https://registry.example.org/api/fhir"})
    body = client.get("/fhir/Location?_count=1", headers={"Authorization": f"Bearer {mint_token(settings)}"}).json()
    assert body["entry"][0]["fullUrl"].startswith("https://registry.example.org/api/fhir/Location/")
    assert all(l["url"].startswith("https://registry.example.org/api/fhir/Location?") for l in body["link"])


@pytest.mark.parametrize("trust, expected", [(True, "https://public.example.org/fhir"), (False, "http://testserver/fhir")])
def test_forwarded_headers_only_when_trusted(small_ctx: ServerContext, tmp_path: Path, trust: bool, expected: str) -> None:
    client, settings = _app(tmp_path, small_ctx, server={"trust_forwarded": trust})
    headers = {"Authorization": f"Bearer {mint_token(settings)}", "X-Forwarded-Proto": "https",
               "X-Forwarded-Host": "public.example.org"}
    body = client.get("/fhir/Location?_count=1", headers=headers).json()
    assert body["link"][0]["url"].startswith(expected + "/Location?")
    assert client.get("/fhir/metadata", headers=headers).json()["implementation"]["url"] == expected


def test_cors_preflight_needs_no_token(small_ctx: ServerContext, tmp_path: Path) -> None:
    client, settings = _app(tmp_path, small_ctx, server={"cors_origins": ["https://app.example.org"]})
    response = client.options("/fhir/Location", headers={
        "Origin": "https://app.example.org", "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "authorization"})
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "https://app.example.org"
    actual = client.get("/fhir/Location/30", headers={"Origin": "https://app.example.org",
                                                      "Authorization": f"Bearer {mint_token(settings)}"})
    assert "ETag" in actual.headers["access-control-expose-headers"]


def test_unknown_exception_is_a_logged_500_not_a_400(small_ctx: ServerContext, tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    client, settings = _app(tmp_path, small_ctx)
    provider = client.app.state.ctx.registry.get("Location")

    def explode(row: Any) -> dict[str, Any]:
        raise KeyError("secret-internal-detail")

    object.__setattr__(provider, "to_resource", explode)  # 32 has no stored body (it closes in 2999): rendered now
    response = client.get("/fhir/Location/32", headers={"Authorization": f"Bearer {mint_token(settings)}"})
    body = assert_outcome(response, 500, "exception")
    assert "secret-internal-detail" not in response.text
    assert response.headers["x-request-id"] in body["issue"][0]["diagnostics"]
    assert any(response.headers["x-request-id"] in r.getMessage() for r in caplog.records)


def test_database_down_is_503(tmp_path: Path, closing_client: Any) -> None:
    settings = make_settings("postgresql://postgres@127.0.0.1:1/none", tmp_path, auth={"secret": SECRET})
    client = closing_client(create_app(settings))
    response = client.get("/fhir/Location", headers={"Authorization": f"Bearer {mint_token(settings)}"})
    assert_outcome(response, 503, "transient")
    assert "Retry-After" in response.headers


def test_request_id_on_every_response(client: TestClient) -> None:
    assert len(client.get("/fhir/Location/30").headers["x-request-id"]) == 32
    assert client.get("/fhir/Location/0").headers["x-request-id"]


def test_jwks_file_with_kid(small_ctx: ServerContext, tmp_path: Path) -> None:
    import json

    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "ES256"}]}))
    client, _ = _app(tmp_path, small_ctx, auth={"algorithms": ["ES256"], "jwks_file": str(tmp_path / "jwks.json")})
    good = jwt.encode(_claims(), key, algorithm="ES256", headers={"kid": "k1"})
    assert client.get("/fhir/Location/30", headers={"Authorization": f"Bearer {good}"}).status_code == 200
    for bad in (jwt.encode(_claims(), key, algorithm="ES256", headers={"kid": "k2"}),
                jwt.encode(_claims(), ec.generate_private_key(ec.SECP256R1()), algorithm="ES256", headers={"kid": "k1"}),
                jwt.encode(_claims(), SECRET, algorithm="HS256", headers={"kid": "k1"})):
        assert_outcome(client.get("/fhir/Location/30", headers={"Authorization": f"Bearer {bad}"}), 401, "login")
