"""The README's Keycloak and Okta settings, exactly as written (their key-set URL pointed at a local key set), verify
tokens shaped as those identity providers issue them for the client-credentials grant, and publish the discovery
document they describe. On both backends."""
from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from starlette.testclient import TestClient

from server.app import create_app
from server.engine.context import ServerContext, create_context
from server.settings import parse_settings
from tests.support.contexts import pyramid_context
from tests.support.jwks_server import JwksServer

README = Path(__file__).resolve().parents[2] / "README.md"
AUDIENCE = "https://registry.example.org/fhir"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
KID = "idp-key-1"


def readme_settings(heading: str) -> dict[str, Any]:
    """The auth section of the first ```yaml block after the README heading."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index(f"### {heading}\n"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None
    return dict(yaml.safe_load(block.group(1))["auth"])


def keycloak_claims(issuer: str, scope: str) -> dict[str, Any]:
    now = int(time.time())
    return {"exp": now + 300, "iat": now, "jti": str(uuid.uuid4()), "iss": issuer, "aud": [AUDIENCE, "account"],
            "sub": str(uuid.uuid4()), "typ": "Bearer", "azp": "hie-partner", "acr": "1",
            "realm_access": {"roles": ["default-roles-health", "offline_access", "uma_authorization",
                                       "service_org_units"]},
            "resource_access": {"account": {"roles": ["manage-account", "view-profile"]}},
            "scope": f"profile email {scope}", "email_verified": False, "clientHost": "10.0.0.7",
            "preferred_username": "service-account-hie-partner", "client_id": "hie-partner", "account": "default"}


def okta_claims(issuer: str, scope: str) -> dict[str, Any]:
    now = int(time.time())
    return {"ver": 1, "jti": f"AT.{uuid.uuid4().hex}", "iss": issuer, "aud": AUDIENCE, "iat": now, "exp": now + 300,
            "cid": "0oa1hiepartner", "scp": ["service_org_units", *scope.split()], "sub": "0oa1hiepartner",
            "account": "default"}


IDPS = {"Keycloak": keycloak_claims, "Okta": okta_claims}


@pytest.fixture(scope="module")
def jwks() -> Iterator[JwksServer]:
    public = json.loads(RSAAlgorithm.to_jwk(KEY.public_key()))
    with JwksServer([{**public, "kid": KID, "use": "sig", "alg": "RS256"}]) as server:
        yield server


@pytest.fixture(scope="module")
def data(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerContext]:
    context = pyramid_context(backend_url, tmp_path_factory.mktemp("var"))
    yield context
    context.db.dispose()


@pytest.fixture(scope="module", params=list(IDPS))
def idp(request: pytest.FixtureRequest, data: ServerContext, backend_url: str, jwks: JwksServer,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any], TestClient]]:
    auth = readme_settings(request.param)
    settings = parse_settings({"server": {"data_dir": str(tmp_path_factory.mktemp("idp"))},
                               "database": {"url": backend_url}, "auth": {**auth, "jwks_url": jwks.url}})
    context = create_context(settings)
    with TestClient(create_app(settings, context=context), base_url="http://testserver") as client:
        yield request.param, auth, client
    context.db.dispose()


def token(idp: str, auth: dict[str, Any], scope: str) -> dict[str, str]:
    signed = jwt.encode(IDPS[idp](auth["issuer"], scope), KEY, algorithm="RS256", headers={"kid": KID})
    return {"Authorization": f"Bearer {signed}"}


@pytest.mark.parametrize("scope, location, organization", [
    pytest.param("system/Location.rs", 200, 403, id="one-type"),
    pytest.param("system/*.rs", 200, 200, id="wildcard"),
    pytest.param("", 200, 200, id="permission-only"),
])
def test_tokens_shaped_as_the_idp_issues_them(idp: tuple[str, dict[str, Any], TestClient], scope: str,
                                              location: int, organization: int) -> None:
    name, auth, client = idp
    headers = token(name, auth, scope)
    assert client.get("/fhir/Location/30", headers=headers).status_code == location
    assert client.get("/fhir/Organization", headers=headers).status_code == organization


def test_discovery_from_the_readme_settings(idp: tuple[str, dict[str, Any], TestClient]) -> None:
    name, auth, client = idp
    document = client.get("/fhir/.well-known/smart-configuration").json()
    assert document["token_endpoint"] == auth["token_endpoint"] and document["issuer"] == auth["issuer"]
    assert document["revocation_endpoint"] == auth["revocation_endpoint"]
    assert document["token_endpoint_auth_methods_supported"] == ["private_key_jwt"]
    assert "client-confidential-asymmetric" in document["capabilities"]
