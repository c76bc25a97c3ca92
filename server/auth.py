"""JWT bearer authentication (pyjwt): key resolution, claim checks, a cache of verified tokens."""
from __future__ import annotations

import json
import logging
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import jwt

from server.errors import AuthenticationFailed, ConfigError
from server.settings import Settings

log = logging.getLogger("orgunit_fhir")
HMAC_ALGORITHMS = frozenset({"HS256", "HS384", "HS512"})
ASYMMETRIC_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512"})
MAX_TOKEN_BYTES = 8192
CACHE_SIZE = 4096


@dataclass(frozen=True)
class Principal:
    subject: str | None
    permissions: frozenset[str]
    claims: Mapping[str, Any]


def secret_for(settings: Settings, create: bool = False) -> str | None:
    """The HMAC secret: configured, read from a file, or generated into the data directory on first run."""
    auth = settings.auth
    if auth.secret:
        return auth.secret
    path = Path(auth.secret_file) if auth.secret_file else settings.data_path / "jwt-secret"
    if path.exists():
        value = path.read_text(encoding="utf-8").strip()
        if not value:
            raise ConfigError(f"auth secret file {path} is empty")
        return value
    if auth.secret_file:
        raise ConfigError(f"auth.secret_file {path} does not exist")
    if not create:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(secrets.token_urlsafe(48), encoding="utf-8")
    path.chmod(0o600)
    log.warning("created a new JWT secret at %s; tokens verify only where the server uses this data directory "
                "(server.data_dir) or auth.secret_file", path.resolve())
    return path.read_text(encoding="utf-8").strip()


def claim_path(claims: Mapping[str, Any], dotted: str) -> Any:
    value: Any = claims
    for part in dotted.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def permissions_of(claims: Mapping[str, Any], dotted: str) -> frozenset[str]:
    found: set[str] = set()
    for source in (claim_path(claims, dotted), claims.get("scope")):
        if isinstance(source, str):
            found.update(source.split())
        elif isinstance(source, list):
            found.update(item for item in source if isinstance(item, str))
    return frozenset(found)


class Authenticator:
    def __init__(self, settings: Settings) -> None:
        auth = settings.auth
        unknown = set(auth.algorithms) - HMAC_ALGORITHMS - ASYMMETRIC_ALGORITHMS
        if unknown or not auth.algorithms:
            raise ConfigError(f"auth.algorithms: unsupported {sorted(unknown) or 'empty list'}; "
                              f"use {sorted(HMAC_ALGORITHMS | ASYMMETRIC_ALGORITHMS)}")
        self.settings = settings
        self.hmac_algorithms = [a for a in auth.algorithms if a in HMAC_ALGORITHMS]
        self.asym_algorithms = [a for a in auth.algorithms if a in ASYMMETRIC_ALGORITHMS]
        self.secret = secret_for(settings, create=True) if self.hmac_algorithms else None
        self.public_key = Path(auth.public_key_file).read_text() if auth.public_key_file else None
        self.jwks: dict[str, Any] = {}
        if auth.jwks_file:
            self.jwks = {key.key_id: key for key in jwt.PyJWKSet.from_dict(json.loads(Path(auth.jwks_file).read_text())).keys}
        self.jwks_client = jwt.PyJWKClient(auth.jwks_url, cache_keys=True, timeout=5) if auth.jwks_url else None
        if self.asym_algorithms and not (self.public_key or self.jwks or self.jwks_client):
            raise ConfigError("auth: RS/ES algorithms need public_key_file, jwks_file or jwks_url")
        self._cache: OrderedDict[str, tuple[Principal, float]] = OrderedDict()

    def authenticate(self, authorization: str | None) -> Principal:
        if not authorization:
            raise AuthenticationFailed("authentication required: send Authorization: Bearer <JWT>",
                                       headers={"WWW-Authenticate": 'Bearer realm="orgunit-fhir"'})
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise self._invalid("the Authorization header must use the Bearer scheme")
        cached = self._cache.get(token)
        if cached is not None and cached[1] > time.time():
            return cached[0]
        principal, expires = self._verify(token)
        self._cache[token] = (principal, expires)
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return principal

    def _invalid(self, why: str) -> AuthenticationFailed:
        return AuthenticationFailed(
            f"invalid token: {why}",
            headers={"WWW-Authenticate": f'Bearer realm="orgunit-fhir", error="invalid_token", error_description="{why}"'},
        )

    def _key_for(self, token: str) -> tuple[Any, list[str]]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise self._invalid("malformed token") from None
        alg = header.get("alg")
        if alg in self.hmac_algorithms:
            return self.secret, [alg]
        if alg in self.asym_algorithms:
            kid = header.get("kid")
            if kid is not None and not isinstance(kid, str):
                raise self._invalid("kid must be a string")
            if kid and kid in self.jwks:
                return self.jwks[kid].key, [alg]
            if self.jwks_client is not None:
                try:
                    return self.jwks_client.get_signing_key_from_jwt(token).key, [alg]
                except jwt.PyJWKClientError:
                    raise self._invalid("no key for this token's kid") from None
            if self.public_key:
                return self.public_key, [alg]
        raise self._invalid(f"algorithm {alg!r} is not accepted")

    def _verify(self, token: str) -> tuple[Principal, float]:
        if len(token) > MAX_TOKEN_BYTES:
            raise self._invalid("token too large")
        key, algorithms = self._key_for(token)
        auth = self.settings.auth
        try:
            claims = jwt.decode(
                token, key, algorithms=algorithms, audience=auth.audience, issuer=auth.issuer,
                leeway=auth.leeway,
                options={"require": ["exp"], "verify_aud": auth.audience is not None},
            )
        except jwt.ExpiredSignatureError:
            raise self._invalid("token expired") from None
        except jwt.PyJWTError as exc:
            raise self._invalid(str(exc).replace('"', "'")) from None
        principal = Principal(
            subject=claims.get("sub") if isinstance(claims.get("sub"), str) else None,
            permissions=permissions_of(claims, auth.permission_claim),
            claims=claims,
        )
        return principal, float(claims["exp"]) + auth.leeway


def mint_token(settings: Settings, subject: str = "orgunit-fhir-cli", permissions: list[str] | None = None,
               ttl: int = 3600, extra: Mapping[str, Any] | None = None) -> str:
    """Sign a token with the local HMAC secret (operators and tests)."""
    auth = settings.auth
    algorithm = next((a for a in auth.algorithms if a in HMAC_ALGORITHMS), None)
    if algorithm is None:
        raise ConfigError("orgunit-fhir token signs with the local HMAC secret; auth.algorithms has no HS algorithm")
    now = int(time.time())
    claims: dict[str, Any] = {"sub": subject, "iat": now, "exp": now + ttl,
                              auth.permission_claim.split(".")[0]: None}
    _set_path(claims, auth.permission_claim, permissions if permissions is not None else [auth.permission])
    if auth.issuer:
        claims["iss"] = auth.issuer
    if auth.audience:
        claims["aud"] = auth.audience
    claims.update(extra or {})
    return jwt.encode(claims, secret_for(settings, create=True), algorithm=algorithm)


def _set_path(claims: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = claims
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value
