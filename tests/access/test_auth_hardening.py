"""JWT hardening: algorithm allow-list and key confusion, kid handling, size limits, time claims, the IdP key
set (cache, rotation, refetch rate limit, outages), the verified-token cache, and the token CLI flags."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from starlette.testclient import TestClient

from server.app import create_app
from server.access.tokens import Authenticator
from server.cli.main import main
from server.engine.context import ServerContext
from server.errors import AuthenticationFailed, ConfigError, FhirError, ServiceUnavailable
from server.settings import Settings, parse_settings
from tests.support.contexts import SECRET, make_settings
from tests.support.live import free_port
from tests.support.jwks_server import JwksServer

NOW = 1_800_000_000
ISS, AUD = "https://idp.test/realms/health", "orgunit-fhir"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
RSA_OTHER = rsa.generate_private_key(public_exponent=65537, key_size=2048)
RSA_SMALL = rsa.generate_private_key(public_exponent=65537, key_size=1024)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
EC_OTHER = ec.generate_private_key(ec.SECP256R1())
EC_384 = ec.generate_private_key(ec.SECP384R1())
RSA_PEM = RSA_KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
PUBLISHED_SECRET = b"a-symmetric-key-the-idp-should-never-publish"


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwk(key: Any, kid: str, **members: Any) -> dict[str, Any]:
    algorithm = RSAAlgorithm if isinstance(key, (rsa.RSAPrivateKey, rsa.RSAPublicKey)) else ECAlgorithm
    return {**algorithm.to_jwk(key, as_dict=True), "kid": kid, **members}


def public(key: Any) -> Any:
    return key.public_key()


IDP_KEYS = [
    jwk(public(RSA_KEY), "rsa-1", use="sig"),
    jwk(public(EC_KEY), "ec-1", use="sig", alg="ES256"),
    {"kty": "oct", "kid": "oct-1", "k": b64(PUBLISHED_SECRET)},            # must never verify anything
    jwk(public(RSA_KEY), "rsa-384", alg="RS384"),                          # verifies RS384 only
    jwk(public(RSA_KEY), "rsa-enc", use="enc"),                            # not a signature key
    jwk(RSA_OTHER, "rsa-private"),                                         # a private key published by mistake
    jwk(public(RSA_SMALL), "rsa-1024"),                                    # too short
]


def claims(**changes: Any) -> dict[str, Any]:
    base = {"sub": "client-1", "iss": ISS, "aud": AUD, "iat": NOW - 10, "exp": NOW + 600,
            "permissions": ["service_org_units"], **changes}
    return {k: v for k, v in base.items() if v is not None}


def sign(key: Any = RSA_KEY, alg: str = "RS256", kid: str | None = "rsa-1", headers: dict[str, Any] | None = None,
         **changes: Any) -> str:
    return jwt.encode(claims(**changes), key, algorithm=alg, headers={**({"kid": kid} if kid else {}), **(headers or {})})


def raw_rs256(header: str, payload: str, key: rsa.RSAPrivateKey = RSA_KEY) -> str:
    """RS256 over exactly these JSON texts (duplicate members, NaN...), which no JWT library would write."""
    signing_input = f"{b64(header.encode())}.{b64(payload.encode())}"
    return f"{signing_input}.{b64(key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256()))}"


def hs256(secret: bytes, header: dict[str, Any], payload: dict[str, Any] | None = None) -> str:
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload or claims()).encode())}"
    return f"{signing_input}.{b64(hmac.new(secret, signing_input.encode(), hashlib.sha256).digest())}"


def unsigned(header: dict[str, Any], signature: bytes = b"") -> str:
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims()).encode())}.{b64(signature)}"


def swap_signature(token: str, other: str) -> str:
    return token.rsplit(".", 1)[0] + "." + other.rsplit(".", 1)[1]


def tamper_payload(token: str) -> str:
    header, _, signature = token.split(".")
    return f"{header}.{b64(json.dumps(claims(permissions=['service_org_units', 'admin'])).encode())}.{signature}"


def auth_settings(tmp_path: Path, **auth: Any) -> Settings:
    return parse_settings({"server": {"data_dir": str(tmp_path / "var")},
                           "database": {"url": f"sqlite:///{tmp_path / 'unused.db'}"},
                           "auth": {"issuer": ISS, "audience": AUD, **auth}})


@pytest.fixture
def idp() -> Iterator[JwksServer]:
    with JwksServer(IDP_KEYS) as server:
        yield server


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def pem_file(tmp_path: Path) -> str:
    path = tmp_path / "idp.pem"
    path.write_bytes(RSA_PEM)
    return str(path)


CONFIGS = {
    "asymmetric": {"algorithms": ["RS256", "ES256"]},
    "mixed": {"algorithms": ["HS256", "RS256", "ES256"], "secret": SECRET},
}


@pytest.fixture(params=list(CONFIGS))
def remote_auth(request: pytest.FixtureRequest, idp: JwksServer, tmp_path: Path, clock: Clock) -> Authenticator:
    """An Authenticator over the local IdP's JWKS URL, with and without HS256 also accepted."""
    return Authenticator(auth_settings(tmp_path, jwks_url=idp.url, **CONFIGS[request.param]), clock=clock)


def refused(authenticator: Authenticator, authorization: str) -> FhirError:
    with pytest.raises(FhirError) as info:
        authenticator.authenticate(authorization)
    return info.value


def assert_401(error: FhirError) -> None:
    assert isinstance(error, AuthenticationFailed) and error.status == 401, error
    challenge = error.headers["WWW-Authenticate"]
    assert challenge.startswith('Bearer realm="orgunit-fhir"') and "invalid_token" in challenge
    assert "\r" not in challenge and "\n" not in challenge


# ------------------------------------------------------------------ attacks: each is 401, never 500

ATTACKS: list[Any] = [
    pytest.param(lambda: unsigned({"alg": "none", "typ": "JWT"}), id="alg-none-unsigned"),
    pytest.param(lambda: unsigned({"alg": "none"}, b"x"), id="alg-none-with-signature"),
    pytest.param(lambda: unsigned({"alg": "None", "kid": "rsa-1"}, b"x"), id="alg-None"),
    pytest.param(lambda: unsigned({"kid": "rsa-1"}, b"x"), id="alg-missing"),
    pytest.param(lambda: unsigned({"alg": ["RS256"], "kid": "rsa-1"}, b"x"), id="alg-not-a-string"),
    pytest.param(lambda: sign(RSA_KEY, "PS256"), id="alg-ps256-not-allowed"),
    pytest.param(lambda: sign(EC_384, "ES384", kid="ec-1"), id="alg-es384-not-allowed"),
    pytest.param(lambda: hs256(RSA_PEM, {"alg": "HS256", "typ": "JWT"}), id="hs256-signed-with-the-rsa-pem"),
    pytest.param(lambda: hs256(RSA_PEM, {"alg": "HS256", "kid": "rsa-1"}), id="hs256-signed-with-the-rsa-pem-and-kid"),
    pytest.param(lambda: hs256(PUBLISHED_SECRET, {"alg": "HS256", "kid": "oct-1"}), id="hs256-with-an-oct-key-of-the-jwks"),
    pytest.param(lambda: sign(RSA_KEY, kid="oct-1"), id="rs256-naming-an-oct-key"),
    pytest.param(lambda: sign(RSA_OTHER), id="rs256-wrong-key"),
    pytest.param(lambda: sign(EC_OTHER, "ES256", kid="ec-1"), id="es256-wrong-key"),
    pytest.param(lambda: sign(EC_KEY, "ES256", kid="rsa-1"), id="es256-naming-an-rsa-key"),
    pytest.param(lambda: sign(RSA_KEY, kid="ec-1"), id="rs256-naming-an-ec-key"),
    pytest.param(lambda: sign(RSA_KEY, kid="rsa-384"), id="rs256-naming-an-rs384-only-key"),
    pytest.param(lambda: sign(RSA_KEY, kid="rsa-enc"), id="rs256-naming-an-encryption-key"),
    pytest.param(lambda: sign(RSA_OTHER, kid="rsa-private"), id="rs256-naming-a-published-private-key"),
    pytest.param(lambda: raw_rs256('{"alg":"RS256","kid":"rsa-1024"}', json.dumps(claims()), RSA_SMALL),
                 id="rs256-naming-a-1024-bit-key"),
    pytest.param(lambda: sign(RSA_OTHER, kid="attacker", headers={"jwk": jwk(public(RSA_OTHER), "attacker")}),
                 id="embedded-jwk-header"),
    pytest.param(lambda: sign(EC_KEY, "ES256", kid="ec-1").rsplit(".", 1)[0] + ".AAAA", id="es256-truncated-signature"),
    pytest.param(lambda: swap_signature(sign(sub="a"), sign(sub="b")), id="signature-of-another-token"),
    pytest.param(lambda: tamper_payload(sign()), id="payload-tampered"),
    pytest.param(lambda: sign(exp=NOW - 3600), id="expired"),
    pytest.param(lambda: sign(exp=NOW - 31), id="expired-beyond-leeway"),
    pytest.param(lambda: sign(nbf=NOW + 3600), id="future-nbf"),
    pytest.param(lambda: sign(iat=NOW + 3600), id="future-iat"),
    pytest.param(lambda: sign(exp=None), id="exp-missing"),
    pytest.param(lambda: sign(exp=str(NOW + 600)), id="exp-a-string"),
    pytest.param(lambda: sign(exp=True), id="exp-a-boolean"),
    pytest.param(lambda: raw_rs256('{"alg":"RS256","kid":"rsa-1"}', f'{{"iss":"{ISS}","aud":"{AUD}","exp":NaN}}'),
                 id="exp-nan"),
    pytest.param(lambda: raw_rs256('{"alg":"RS256","kid":"rsa-1"}', f'{{"iss":"{ISS}","aud":"{AUD}","exp":1e400}}'),
                 id="exp-infinite"),
    pytest.param(lambda: sign(aud="another-api"), id="wrong-aud"),
    pytest.param(lambda: sign(aud=["another-api", "a-third"]), id="aud-list-without-ours"),
    pytest.param(lambda: sign(aud=None), id="aud-missing"),
    pytest.param(lambda: sign(iss="https://evil.test"), id="wrong-iss"),
    pytest.param(lambda: sign(iss=None), id="iss-missing"),
    pytest.param(lambda: sign(kid="no-such-key"), id="unknown-kid"),
    pytest.param(lambda: unsigned({"alg": "RS256", "kid": 1}, b"x"), id="kid-a-number"),
    pytest.param(lambda: raw_rs256('{"alg":"RS256","kid":null}', json.dumps(claims())), id="kid-null"),
    pytest.param(lambda: unsigned({"alg": "RS256", "kid": ["rsa-1"]}, b"x"), id="kid-a-list"),
    pytest.param(lambda: unsigned({"alg": "RS256", "kid": {"$ne": ""}}, b"x"), id="kid-an-object"),
    pytest.param(lambda: sign(headers={"kid": ""}), id="kid-empty"),
    pytest.param(lambda: sign(kid="k" * 257), id="kid-too-long"),
    pytest.param(lambda: sign(kid="../../../../../etc/passwd"), id="kid-a-path"),
    pytest.param(lambda: sign(kid="' OR '1'='1"), id="kid-sql"),
    pytest.param(lambda: sign(kid="rsa-1\r\nX-Injected: 1"), id="kid-with-crlf"),
    pytest.param(lambda: sign(headers={"crit": ["exp"], "exp": NOW}), id="crit-header"),
    pytest.param(lambda: raw_rs256('{"alg":"RS256","kid":"rsa-1","crit":["b64"],"b64":false}',
                                   json.dumps(claims())), id="crit-b64"),
    pytest.param(lambda: raw_rs256('{"alg":"none","alg":"RS256","kid":"rsa-1"}', json.dumps(claims())),
                 id="duplicate-alg-member"),
    pytest.param(lambda: raw_rs256('{"alg":"RS256","kid":"rsa-1"}',
                                   json.dumps(claims()).replace('"exp"', f'"exp": {NOW - 3600}, "exp"')),
                 id="duplicate-exp-member"),
    pytest.param(lambda: raw_rs256('{"alg":"RS256","kid":"rsa-1","x":' + "[" * 1500 + "]" * 1500 + "}",
                                   json.dumps(claims())), id="deeply-nested-header"),
    pytest.param(lambda: "not-a-jwt", id="one-segment"),
    pytest.param(lambda: "a.b", id="two-segments"),
    pytest.param(lambda: "..", id="empty-segments"),
    pytest.param(lambda: sign() + ".e30.e30", id="five-segments-jwe"),
    pytest.param(lambda: "e30.e30.", id="empty-signature"),
    pytest.param(lambda: "!!!." + sign().split(".", 1)[1], id="header-not-base64url"),
    pytest.param(lambda: "a." + sign().split(".", 1)[1], id="header-impossible-base64-length"),
    pytest.param(lambda: sign().replace(".", "=.", 1), id="base64-padding"),
    pytest.param(lambda: b64(b"not json") + "." + sign().split(".", 1)[1], id="header-not-json"),
    pytest.param(lambda: b64(b"\xff\xfe") + "." + sign().split(".", 1)[1], id="header-not-utf8"),
    pytest.param(lambda: b64(b'["RS256"]') + "." + sign().split(".", 1)[1], id="header-a-json-array"),
    pytest.param(lambda: raw_rs256('{"alg":"RS256","kid":"rsa-1"}', '"a string"'), id="payload-a-json-string"),
    pytest.param(lambda: "é" + sign(), id="non-ascii"),
    pytest.param(lambda: sign().replace(".", " .", 1), id="whitespace-inside"),
    pytest.param(lambda: sign(padding="x" * 9000), id="oversized-token"),
]


@pytest.mark.parametrize("make_token", ATTACKS)
def test_attack_is_401(remote_auth: Authenticator, make_token: Callable[[], str]) -> None:
    assert_401(refused(remote_auth, f"Bearer {make_token()}"))


VALID: list[Any] = [
    pytest.param(lambda: sign(), id="rs256"),
    pytest.param(lambda: sign(EC_KEY, "ES256", kid="ec-1"), id="es256"),
    pytest.param(lambda: sign(aud=["another-api", AUD]), id="aud-list-with-ours"),
    pytest.param(lambda: sign(exp=NOW - 29), id="expired-within-leeway"),
    pytest.param(lambda: sign(nbf=NOW + 29, iat=NOW + 29), id="nbf-and-iat-within-leeway"),
    pytest.param(lambda: sign(headers={"typ": "at+jwt", "jku": "http://127.0.0.1:1/ignored"}), id="unused-headers"),
]


@pytest.mark.parametrize("make_token", VALID)
def test_valid_tokens(remote_auth: Authenticator, make_token: Callable[[], str]) -> None:
    principal = remote_auth.authenticate(f"Bearer {make_token()}")
    assert principal.subject == "client-1" and "service_org_units" in principal.permissions


def test_hs256_verifies_with_the_secret_only(idp: JwksServer, tmp_path: Path, clock: Clock) -> None:
    authenticator = Authenticator(auth_settings(tmp_path, jwks_url=idp.url, **CONFIGS["mixed"]), clock=clock)
    assert authenticator.authenticate(f"Bearer {jwt.encode(claims(), SECRET, algorithm='HS256')}").subject == "client-1"
    assert idp.requests == 0  # HS tokens never look at the key set


def test_oversized_authorization_header_is_refused_before_parsing(remote_auth: Authenticator, idp: JwksServer) -> None:
    assert_401(refused(remote_auth, "Bearer " + "a" * 1_000_000))
    assert_401(refused(remote_auth, "Bearer " + sign(kid="no-such-key", padding="x" * 9000)))
    assert idp.requests == 0


def test_the_size_limit_is_exact(tmp_path: Path, clock: Clock) -> None:
    token = jwt.encode(claims(), SECRET, algorithm="HS256")
    authenticator = Authenticator(auth_settings(tmp_path, secret=SECRET, max_token_bytes=len(token)), clock=clock)
    assert authenticator.authenticate(f"Bearer {token}").subject == "client-1"
    assert_401(refused(authenticator, f"Bearer {jwt.encode(claims(sub='client-12'), SECRET, algorithm='HS256')}"))
    assert_401(refused(authenticator, "Bearer" + " " * 100 + token))  # the header is limited too


@pytest.mark.parametrize("changes", [
    pytest.param({"exp": NOW - 3600}, id="expired"),
    pytest.param({"nbf": NOW + 3600}, id="future-nbf"),
    pytest.param({"aud": "another-api"}, id="wrong-aud"),
    pytest.param({"iss": "https://evil.test"}, id="wrong-iss"),
    pytest.param({"exp": None}, id="no-exp"),
])
def test_claims_are_checked_before_any_key_fetch(remote_auth: Authenticator, idp: JwksServer,
                                                 changes: dict[str, Any]) -> None:
    assert_401(refused(remote_auth, f"Bearer {sign(kid='unknown-kid', **changes)}"))
    assert idp.requests == 0


def test_a_jku_header_is_never_fetched(remote_auth: Authenticator) -> None:
    with JwksServer([jwk(public(RSA_OTHER), "attacker")]) as attacker:
        token = sign(RSA_OTHER, kid="attacker", headers={"jku": attacker.url, "x5u": attacker.url})
        assert_401(refused(remote_auth, f"Bearer {token}"))
        assert attacker.requests == 0


# ------------------------------------------------------------------ a PEM public key

@pytest.mark.parametrize("algorithms", [["RS256"], ["HS256", "RS256"]], ids=["rs256-only", "hs256-and-rs256"])
@pytest.mark.parametrize("make_token, accepted", [
    pytest.param(lambda: sign(kid=None), True, id="rs256"),
    pytest.param(lambda: sign(kid="any-kid"), True, id="rs256-with-kid"),
    pytest.param(lambda: sign(RSA_OTHER, kid=None), False, id="rs256-wrong-key"),
    pytest.param(lambda: hs256(RSA_PEM, {"alg": "HS256", "typ": "JWT"}), False, id="hs256-signed-with-the-pem"),
    pytest.param(lambda: hs256(RSA_PEM.strip(), {"alg": "HS256"}), False, id="hs256-signed-with-the-stripped-pem"),
    pytest.param(lambda: sign(EC_KEY, "ES256", kid=None), False, id="es256"),
])
def test_pem_key_and_key_confusion(tmp_path: Path, pem_file: str, clock: Clock, algorithms: list[str],
                                   make_token: Callable[[], str], accepted: bool) -> None:
    authenticator = Authenticator(auth_settings(tmp_path, algorithms=algorithms, secret=SECRET,
                                                public_key_file=pem_file), clock=clock)
    if accepted:
        assert authenticator.authenticate(f"Bearer {make_token()}").subject == "client-1"
    else:
        assert_401(refused(authenticator, f"Bearer {make_token()}"))


# ------------------------------------------------------------------ refused at start-up

def _write(tmp_path: Path, name: str, content: bytes) -> str:
    (tmp_path / name).write_bytes(content)
    return str(tmp_path / name)


@pytest.mark.parametrize("auth, words", [
    pytest.param({"algorithms": ["none"]}, "'none'", id="none"),
    pytest.param({"algorithms": ["HS256", "NONE"]}, "'none'", id="none-among-others"),
    pytest.param({"algorithms": []}, "empty", id="empty"),
    pytest.param({"algorithms": ["HS1"]}, "unsupported", id="unknown"),
    pytest.param({"algorithms": ["RS256"]}, "public_key_file, jwks_file or jwks_url", id="rs256-without-keys"),
    pytest.param({"algorithms": ["RS256"], "jwks_url": "file:///etc/passwd"}, "http(s)", id="jwks-url-file"),
    pytest.param({"algorithms": ["RS256"], "public_key_file": "/nonexistent.pem"}, "public_key_file", id="pem-missing"),
    pytest.param({"algorithms": ["RS256"], "public_key_file": lambda p: _write(p, "k.pem", b"junk")},
                 "not a PEM", id="pem-junk"),
    pytest.param({"algorithms": ["RS256"], "public_key_file": lambda p: _write(p, "k.pem", RSA_KEY.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))},
                 "not a PEM public key", id="pem-private-key"),
    pytest.param({"algorithms": ["RS256"], "public_key_file": lambda p: _write(p, "k.pem", public(EC_KEY).public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))}, "verifies none", id="pem-ec-for-rs256"),
    pytest.param({"algorithms": ["RS256"], "public_key_file": lambda p: _write(p, "k.pem", public(RSA_SMALL).public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))}, "1024 bits", id="pem-rsa-1024"),
    pytest.param({"algorithms": ["RS256"], "jwks_file": lambda p: _write(p, "k.json", json.dumps(
        {"keys": [IDP_KEYS[0], IDP_KEYS[2]]}).encode())}, "oct-1", id="jwks-file-with-an-oct-key"),
    pytest.param({"algorithms": ["RS256"], "jwks_file": lambda p: _write(p, "k.json", b'[{"kty": "RSA"}]')},
                 "not a JWK Set", id="jwks-file-not-a-set"),
    pytest.param({"max_token_bytes": 10}, "max_token_bytes", id="max-token-bytes-tiny"),
    pytest.param({"algorithms": ["RS256"], "jwks_url": "https://idp.test/jwks", "jwks_timeout_seconds": 0},
                 "jwks_timeout_seconds", id="jwks-timeout-zero"),
])
def test_refused_at_start_up(tmp_path: Path, auth: dict[str, Any], words: str) -> None:
    resolved = {k: v(tmp_path) if callable(v) else v for k, v in auth.items()}
    with pytest.raises(ConfigError) as info:
        Authenticator(auth_settings(tmp_path, secret=SECRET, **resolved))
    assert words in str(info.value)


# ------------------------------------------------------------------ the IdP's key set

def test_keys_are_fetched_once_then_cached(remote_auth: Authenticator, idp: JwksServer, clock: Clock) -> None:
    for sub in ("a", "b", "c"):
        remote_auth.authenticate(f"Bearer {sign(sub=sub)}")
        remote_auth.authenticate(f"Bearer {sign(EC_KEY, 'ES256', kid='ec-1', sub=sub)}")
    assert idp.requests == 1
    clock.now += 3601  # auth.jwks_cache_seconds later: fetched again
    remote_auth.authenticate(f"Bearer {sign(sub='d', exp=NOW + 7200)}")
    assert idp.requests == 2


def test_key_rotation_and_the_refetch_rate_limit(remote_auth: Authenticator, idp: JwksServer, clock: Clock) -> None:
    remote_auth.authenticate(f"Bearer {sign()}")
    assert idp.requests == 1
    clock.now += 30
    idp.set_keys([jwk(public(RSA_OTHER), "rsa-2")])  # the IdP adds a new kid and drops the old
    assert remote_auth.authenticate(f"Bearer {sign(RSA_OTHER, kid='rsa-2')}").subject == "client-1"
    assert idp.requests == 2
    assert_401(refused(remote_auth, f"Bearer {sign(sub='new', kid='rsa-1')}"))  # the dropped key is gone
    for n in range(5):  # unknown kids within auth.jwks_refetch_seconds (30): no request to the IdP
        clock.now += 5
        assert_401(refused(remote_auth, f"Bearer {sign(kid=f'unknown-{n}')}"))
    assert idp.requests == 2
    clock.now += 6
    assert_401(refused(remote_auth, f"Bearer {sign(kid='unknown-again')}"))
    assert idp.requests == 3


def test_a_new_kid_is_found_after_the_rate_limit(remote_auth: Authenticator, idp: JwksServer, clock: Clock) -> None:
    remote_auth.authenticate(f"Bearer {sign()}")
    idp.set_keys([*IDP_KEYS, jwk(public(RSA_OTHER), "rsa-2")])
    clock.now += 10
    assert_401(refused(remote_auth, f"Bearer {sign(RSA_OTHER, kid='rsa-2')}"))  # fetched 10 s ago: not yet
    clock.now += 20
    assert remote_auth.authenticate(f"Bearer {sign(RSA_OTHER, kid='rsa-2', sub='x')}").subject == "x"
    assert idp.requests == 2


def test_idp_down_cached_keys_keep_working(remote_auth: Authenticator, idp: JwksServer, clock: Clock) -> None:
    remote_auth.authenticate(f"Bearer {sign()}")
    idp.stop()
    clock.now += 2 * 3600  # past auth.jwks_cache_seconds: the stale keys are better than none
    started = time.monotonic()
    assert remote_auth.authenticate(f"Bearer {sign(sub='later', exp=NOW + 3 * 3600)}").subject == "later"
    error = refused(remote_auth, f"Bearer {sign(kid='no-such-key', exp=NOW + 3 * 3600)}")
    assert time.monotonic() - started < remote_auth.remote.timeout  # a refused connection is not waited for
    assert isinstance(error, ServiceUnavailable) and error.status == 503 and error.code == "transient"
    assert 1 <= int(error.headers["Retry-After"]) <= 30


@pytest.mark.parametrize("config", list(CONFIGS))
def test_idp_unreachable_and_nothing_cached_is_503(tmp_path: Path, clock: Clock, config: str) -> None:
    settings = auth_settings(tmp_path, jwks_url=f"http://127.0.0.1:{free_port()}/jwks", **CONFIGS[config])
    authenticator = Authenticator(settings, clock=clock)
    for token in (sign(), sign(kid=None), sign(EC_KEY, "ES256", kid="ec-1")):
        error = refused(authenticator, f"Bearer {token}")
        assert isinstance(error, ServiceUnavailable) and error.headers["Retry-After"].isdigit()
    if "HS256" in settings.auth.algorithms:
        assert authenticator.authenticate(f"Bearer {jwt.encode(claims(), SECRET, algorithm='HS256')}")


@pytest.mark.parametrize("answer", [
    pytest.param({"status": 500}, id="http-500"),
    pytest.param({"document": b"<html>maintenance</html>"}, id="not-json"),
    pytest.param({"document": {"keys": "rsa-1"}}, id="not-a-key-set"),
    pytest.param({"document": {"keys": [IDP_KEYS[2]]}}, id="only-an-oct-key"),
    pytest.param({"document": {"keys": []}}, id="no-keys"),
    pytest.param({"document": b" " * (1 << 20) + json.dumps({"keys": IDP_KEYS}).encode()}, id="larger-than-1-mib"),
])
def test_a_bad_jwks_answer_keeps_the_cached_keys(remote_auth: Authenticator, idp: JwksServer, clock: Clock,
                                                 answer: dict[str, Any]) -> None:
    remote_auth.authenticate(f"Bearer {sign()}")
    for name, value in answer.items():
        setattr(idp, name, value)
    clock.now += 3601
    assert remote_auth.authenticate(f"Bearer {sign(sub='later', exp=NOW + 7200)}").subject == "later"
    assert idp.requests == 2
    error = refused(remote_auth, f"Bearer {sign(kid='no-such-key', exp=NOW + 7200)}")
    assert isinstance(error, ServiceUnavailable)


def test_a_stalled_idp_times_out_with_503(remote_auth: Authenticator, idp: JwksServer) -> None:
    assert remote_auth.remote is not None
    remote_auth.remote.timeout = 0.3
    idp.stall_s = STALL_S  # a client that did not keep to its timeout would wait that long
    idp.stalled.set()
    started = time.monotonic()
    error = refused(remote_auth, f"Bearer {sign()}")
    assert isinstance(error, ServiceUnavailable) and time.monotonic() - started < STALL_S / 3



STALL_S = 15.0  # how long the stalled IdP holds a fetch (and the client's timeout): what a request waiting for it takes


def _stall(remote_auth: Authenticator, idp: JwksServer) -> None:
    assert remote_auth.remote is not None
    remote_auth.remote.timeout = idp.stall_s = STALL_S
    idp.stalled.set()


def _wait_for(idp: JwksServer, requests: int) -> None:
    """Until the IdP has had that many requests (a fetch is under way)."""
    deadline = time.monotonic() + STALL_S / 3
    while idp.requests < requests:
        assert time.monotonic() < deadline, f"the IdP had {idp.requests} requests, not {requests}"
        time.sleep(0.01)


def test_cached_keys_do_not_wait_for_a_fetch(remote_auth: Authenticator, idp: JwksServer, clock: Clock) -> None:
    remote_auth.authenticate(f"Bearer {sign()}")
    _stall(remote_auth, idp)
    outcomes: list[BaseException] = []

    def unknown_kid() -> None:
        try:
            remote_auth.authenticate(f"Bearer {sign(kid='rsa-9', sub=threading.current_thread().name)}")
        except FhirError as exc:
            outcomes.append(exc)

    clock.now += 30
    waiting = [threading.Thread(target=unknown_kid, name=f"t{n}") for n in range(3)]
    for thread in waiting:
        thread.start()
    _wait_for(idp, requests=2)
    started = time.monotonic()
    assert remote_auth.authenticate(f"Bearer {sign(sub='meanwhile')}").subject == "meanwhile"
    assert time.monotonic() - started < STALL_S / 3  # waiting for the stalled fetch would take about STALL_S
    idp.released.set()
    for thread in waiting:
        thread.join(5)
    assert len(outcomes) == 3 and all(isinstance(e, AuthenticationFailed) for e in outcomes)
    assert idp.requests == 2  # the threads that waited for the fetch did not fetch again


def test_stale_keys_do_not_wait_for_a_refresh(remote_auth: Authenticator, idp: JwksServer, clock: Clock) -> None:
    remote_auth.authenticate(f"Bearer {sign()}")
    clock.now += 3601  # the cache is stale: the first request refreshes it, the others use the stale keys
    _stall(remote_auth, idp)
    refreshing = threading.Thread(target=remote_auth.authenticate, args=(f"Bearer {sign(sub='a', exp=NOW + 7200)}",))
    refreshing.start()
    _wait_for(idp, requests=2)
    started = time.monotonic()
    assert remote_auth.authenticate(f"Bearer {sign(sub='b', exp=NOW + 7200)}").subject == "b"
    assert time.monotonic() - started < STALL_S / 3  # waiting for the stalled refresh would take STALL_S
    idp.released.set()
    refreshing.join(5)
    assert idp.requests == 2


# ------------------------------------------------------------------ the cache of verified tokens

def test_a_cached_token_is_refused_after_exp(remote_auth: Authenticator, clock: Clock) -> None:
    token = f"Bearer {sign(exp=NOW + 60)}"
    remote_auth.authenticate(token)
    assert len(remote_auth.cache) == 1
    clock.now += 60 + 29
    assert remote_auth.authenticate(token).subject == "client-1"
    clock.now += 1
    assert_401(refused(remote_auth, token))
    assert len(remote_auth.cache) == 0


def test_a_cached_token_stops_when_the_idp_drops_its_key(remote_auth: Authenticator, idp: JwksServer,
                                                         clock: Clock) -> None:
    token = f"Bearer {sign(exp=NOW + 3 * 3600)}"
    remote_auth.authenticate(token)
    idp.set_keys([jwk(public(RSA_OTHER), "rsa-2")])
    clock.now += 1800
    assert remote_auth.authenticate(token)  # cached, keys fresh
    clock.now += 1801
    assert_401(refused(remote_auth, token))


def test_the_token_cache_is_bounded_lru(tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    verified: list[str] = []
    decode = jwt.decode

    def counting(token: str, *args: Any, **kwargs: Any) -> Any:
        verified.append(token)
        return decode(token, *args, **kwargs)

    monkeypatch.setattr(jwt, "decode", counting)
    authenticator = Authenticator(auth_settings(tmp_path, secret=SECRET), clock=clock, cache_size=8)
    tokens = [jwt.encode(claims(sub=str(n)), SECRET, algorithm="HS256") for n in range(20)]
    for token in tokens:
        authenticator.authenticate(f"Bearer {token}")
    assert len(authenticator.cache) == 8 and len(verified) == 20
    authenticator.authenticate(f"Bearer {tokens[12]}")   # cached; now the most recently used
    assert len(verified) == 20
    authenticator.authenticate(f"Bearer {tokens[0]}")    # verified again, evicts the least recently used (13)
    authenticator.authenticate(f"Bearer {tokens[12]}")
    assert verified[20:] == [tokens[0]]
    authenticator.authenticate(f"Bearer {tokens[13]}")
    assert verified[20:] == [tokens[0], tokens[13]] and len(authenticator.cache) == 8


# ------------------------------------------------------------------ through HTTP

@pytest.fixture
def http_client(small_ctx: ServerContext, idp: JwksServer, tmp_path: Path) -> TestClient:
    settings = make_settings(small_ctx.settings.database_url, tmp_path,
                             auth={"issuer": ISS, "audience": AUD, "jwks_url": idp.url, **CONFIGS["mixed"]})
    app = create_app(settings, db=small_ctx.db)
    app.state.ctx.authenticator.clock = Clock()
    return TestClient(app)  # no lifespan: it would dispose the shared pool of small_ctx


def assert_outcome(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/fhir+json")
    body = response.json()
    assert body["resourceType"] == "OperationOutcome" and body["issue"][0]["code"] == code
    assert response.headers["x-request-id"]


@pytest.mark.parametrize("path", ["/fhir/Location/1", "/fhir/metadata"])
@pytest.mark.parametrize("authorization, status", [
    pytest.param(lambda: f"Bearer {sign()}", 200, id="rs256"),
    pytest.param(lambda: f"Bearer {sign(EC_KEY, 'ES256', kid='ec-1')}", 200, id="es256"),
    pytest.param(lambda: f"Bearer {jwt.encode(claims(), SECRET, algorithm='HS256')}", 200, id="hs256"),
    pytest.param(lambda: f"Bearer {unsigned({'alg': 'none'})}", 401, id="alg-none"),
    pytest.param(lambda: f"Bearer {hs256(RSA_PEM, {'alg': 'HS256', 'kid': 'rsa-1'})}", 401, id="hs-rs-confusion"),
    pytest.param(lambda: f"Bearer {sign(exp=NOW - 3600)}", 401, id="expired"),
    pytest.param(lambda: f"Bearer {sign(kid='no-such-key')}", 401, id="unknown-kid"),
    pytest.param(lambda: f"Bearer {sign(headers={'crit': ['exp']})}", 401, id="crit"),
    pytest.param(lambda: "Bearer " + "a" * 20_000, 401, id="oversized"),
])
def test_http_status_and_outcome(http_client: TestClient, path: str, authorization: Callable[[], str],
                                 status: int) -> None:
    response = http_client.get(path, headers={"Authorization": authorization()})
    if status == 200:
        assert response.status_code == 200, response.text
        return
    assert_outcome(response, 401, "login")
    assert response.headers["www-authenticate"].startswith('Bearer realm="orgunit-fhir", error="invalid_token"')


def test_http_idp_unreachable_is_503_with_retry_after(small_ctx: ServerContext, tmp_path: Path) -> None:
    settings = make_settings(small_ctx.settings.database_url, tmp_path,
                             auth={"issuer": ISS, "audience": AUD, "algorithms": ["RS256"],
                                   "jwks_url": f"http://127.0.0.1:{free_port()}/jwks"})
    app = create_app(settings, db=small_ctx.db)
    app.state.ctx.authenticator.clock = Clock()
    response = TestClient(app).get("/fhir/Location/1", headers={"Authorization": f"Bearer {sign()}"})
    assert_outcome(response, 503, "transient")
    assert response.headers["retry-after"].isdigit()


# ------------------------------------------------------------------ orgunit-fhir token

@pytest.mark.parametrize("auth, args, expected", [
    pytest.param({}, [], {"sub": "orgunit-fhir-cli", "permissions": ["service_org_units"]}, id="defaults"),
    pytest.param({}, ["--account", "acme"], {"account": "acme"}, id="account"),
    pytest.param({"account_claim": "tenant.name"}, ["--account", "acme"], {"tenant": {"name": "acme"}},
                 id="account-at-a-dotted-path"),
    pytest.param({}, ["--org-unit-root", "12", "--org-unit-root", "https://sys|value"],
                 {"org_unit_roots": ["12", "https://sys|value"]}, id="org-unit-roots"),
    pytest.param({"roots_claim": "scope_roots"}, ["--org-unit-root", "12"], {"scope_roots": ["12"]},
                 id="org-unit-roots-claim-name"),
    pytest.param({}, ["--claim", "level=3", "--claim", 'tags=["a", "b"]', "--claim", 'ctx={"x": null}'],
                 {"level": 3, "tags": ["a", "b"], "ctx": {"x": None}}, id="claims-json"),
    pytest.param({}, ["--claim", "team=data team", "--claim", "expr=a=b", "--claim", "n=NaN", "--claim", "e="],
                 {"team": "data team", "expr": "a=b", "n": "NaN", "e": ""}, id="claims-plain-strings"),
    pytest.param({}, ["--account", "acme", "--claim", "account=other"], {"account": "other"},
                 id="claim-set-last"),
])
def test_token_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], auth: dict[str, Any], args: list[str],
                   expected: dict[str, Any]) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text(json.dumps({"server": {"data_dir": str(tmp_path / "var")}, "auth": {"secret": SECRET, **auth}}))
    assert main(["token", "--settings", str(settings), *args]) == 0
    token = capsys.readouterr().out.strip()
    decoded = jwt.decode(token, SECRET, algorithms=["HS256"])
    assert {k: decoded.get(k) for k in expected} == expected
    if not args:
        assert "account" not in decoded and "org_unit_roots" not in decoded
    authenticator = Authenticator(parse_settings({"server": {"data_dir": str(tmp_path / "var")},
                                                  "auth": {"secret": SECRET, **auth}}))
    assert authenticator.authenticate(f"Bearer {token}").claims == decoded


@pytest.mark.parametrize("bad", ["novalue", "=3"], ids=["no-equals", "no-key"])
def test_token_cli_refuses_a_malformed_claim(tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(["token", "--claim", bad])
    assert info.value.code == 2 and "KEY=JSON" in capsys.readouterr().err
