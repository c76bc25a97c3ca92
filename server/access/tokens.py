"""JWT bearer authentication (pyjwt): strict parsing, keys chosen by algorithm family, claim checks, and a
bounded cache of verified tokens. Keys: server.access.keys (files, JWKs) and server.access.jwks (the IdP's key set)."""
from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jwt

from server.access.claims import permissions_of
from server.access.jwks import RemoteJwks
from server.access.smart_scopes import ScopeRefused, SmartScopes, known_scopes, parse_scopes, scope_tokens
from server.access.keys import (
    ASYMMETRIC_ALGORITHMS,
    HMAC_ALGORITHMS,
    MAX_KID_LENGTH,
    PublicKey,
    load_jwks_file,
    load_public_key_file,
)
from server.access.mint import secret_for
from server.errors import AuthenticationFailed, ConfigError
from server.settings import Settings
from server.storage.cache import Bounded

log = logging.getLogger("orgunit_fhir")
CACHE_SIZE = 4096
REALM = 'Bearer realm="orgunit-fhir"'
_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")

Clock = Callable[[], float]


@dataclass(frozen=True)
class Principal:
    subject: str | None
    permissions: frozenset[str]
    claims: Mapping[str, Any]
    scopes: SmartScopes | None = None  # the token's SMART scopes (server.access.smart_scopes); None: not narrowed


def invalid(why: str) -> AuthenticationFailed:
    """401 for a bad token; `why` is a fixed text (never token content: it goes into a header)."""
    return AuthenticationFailed(
        f"invalid token: {why}",
        headers={"WWW-Authenticate": f'{REALM}, error="invalid_token", error_description="{why}"'},
    )


# ------------------------------------------------------------------ strict parsing of the compact form

def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate member")
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_object(segment: str) -> dict[str, Any]:
    if len(segment) % 4 == 1:
        raise invalid("malformed token")
    try:
        raw = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
        value = json.loads(raw.decode("utf-8"), object_pairs_hook=_reject_duplicates,
                           parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # binascii, JSON, UTF-8, too many digits, nested too deep
        raise invalid("malformed token") from None
    if not isinstance(value, dict):
        raise invalid("malformed token")
    return value


def parse_unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Header and claims of a JWS compact token, refusing anything but three base64url segments holding
    JSON objects without duplicate members or NaN/Infinity."""
    parts = token.split(".")
    if len(parts) != 3 or not all(_SEGMENT.fullmatch(part) for part in parts):
        raise invalid("malformed token")
    return _json_object(parts[0]), _json_object(parts[1])


# ------------------------------------------------------------------ verified tokens

class TokenCache:
    """Principals of verified tokens until their expiry, least recently used evicted first; keyed by the
    token's SHA-256, so memory stays bounded whatever the size of the tokens."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: Bounded[tuple[Principal, float]] = Bounded(size)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes, now: float) -> Principal | None:
        entry = self._entries.peek(key)
        if entry is None:
            return None
        if entry[1] <= now:
            self._entries.discard(key, entry)
            return None
        return entry[0]

    def put(self, key: bytes, principal: Principal, expires: float) -> None:
        self._entries.put(key, (principal, expires))


def _accepted_algorithms(configured: Sequence[str]) -> frozenset[str]:
    if any(alg.lower() == "none" for alg in configured):
        raise ConfigError("auth.algorithms: 'none' (unsigned tokens) is never accepted")
    unknown = set(configured) - HMAC_ALGORITHMS - ASYMMETRIC_ALGORITHMS
    if unknown or not configured:
        raise ConfigError(f"auth.algorithms: unsupported {sorted(unknown) or 'empty list'}; "
                          f"use {sorted(HMAC_ALGORITHMS | ASYMMETRIC_ALGORITHMS)}")
    return frozenset(configured)


MAX_SECONDS = 253_402_300_799  # 9999-12-31T23:59:59Z: any later "date" is not one


def _numeric_date(claims: Mapping[str, Any], name: str) -> int | float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and not math.isfinite(value)) or not -MAX_SECONDS <= value <= MAX_SECONDS:
        raise invalid(f"the {name} claim must be a number of seconds")
    return value


class Authenticator:
    def __init__(self, settings: Settings, *, clock: Clock = time.time, cache_size: int = CACHE_SIZE,
                 create_secret: bool = True) -> None:
        """`create_secret`: generate the HMAC secret into the data directory when there is none (a server's; an
        in-process context, which verifies no token, leaves the folder as it is: without a secret, no HMAC token
        verifies)."""
        auth = settings.auth
        self.settings = settings
        self.clock = clock
        self.algorithms = _accepted_algorithms(auth.algorithms)
        self.hmac_algorithms = self.algorithms & HMAC_ALGORITHMS
        self.asym_algorithms = self.algorithms & ASYMMETRIC_ALGORITHMS
        if auth.max_token_bytes < 64:
            raise ConfigError("auth.max_token_bytes must be at least 64")
        self.secret = secret_for(settings, create=create_secret) if self.hmac_algorithms else None
        self.public_key = load_public_key_file(auth.public_key_file) if auth.public_key_file else None
        if self.public_key and self.asym_algorithms and not any(map(self.public_key.verifies, self.asym_algorithms)):
            raise ConfigError(f"auth.public_key_file {auth.public_key_file} verifies none of auth.algorithms "
                              f"{sorted(self.asym_algorithms)} (an RSA key verifies RS/PS, an EC key ES of its curve)")
        self.static_keys = load_jwks_file(auth.jwks_file) if auth.jwks_file else ()
        self.remote = RemoteJwks(auth.jwks_url, timeout=auth.jwks_timeout_seconds,
                                 cache_seconds=auth.jwks_cache_seconds, refetch_seconds=auth.jwks_refetch_seconds,
                                 clock=lambda: self.clock()) if auth.jwks_url else None
        if self.asym_algorithms and not (self.public_key or self.static_keys or self.remote):
            raise ConfigError("auth: RS/PS/ES algorithms need public_key_file, jwks_file or jwks_url")
        self.known_scopes = known_scopes(auth)
        self.cache = TokenCache(cache_size)

    def authenticate(self, authorization: str | None) -> Principal:
        if not authorization:
            raise AuthenticationFailed("authentication required: send Authorization: Bearer <JWT>",
                                       headers={"WWW-Authenticate": REALM})
        limit = self.settings.auth.max_token_bytes
        if len(authorization) > limit + 64:
            raise invalid("token too large")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer":
            raise invalid("the Authorization header must use the Bearer scheme")
        if not token:
            raise invalid("the Bearer token is empty")
        raw = token.encode("utf-8", "surrogatepass")
        if len(raw) > limit:
            raise invalid("token too large")
        now = self.clock()
        digest = hashlib.sha256(raw).digest()
        principal = self.cache.get(digest, now)
        if principal is None:
            principal, expires = self._verify(token, now)
            self.cache.put(digest, principal, expires)
        return principal

    def _verify(self, token: str, now: float) -> tuple[Principal, float]:
        header, claims = parse_unverified(token)
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self.algorithms:
            raise invalid("signature algorithm not accepted")
        if "crit" in header:
            raise invalid("critical header extensions are not supported")
        kid = header.get("kid")
        if "kid" in header and not (isinstance(kid, str) and 0 < len(kid) <= MAX_KID_LENGTH):
            raise invalid(f"kid must be a string of 1 to {MAX_KID_LENGTH} characters")
        expires = self._check_claims(claims, now)  # before any key lookup: a stale token never fetches keys
        keys: Iterable[Any] = ([self.secret] if self.secret else []) if alg in HMAC_ALGORITHMS else \
            self._public_keys(alg, kid)
        auth = self.settings.auth
        for key in keys:
            try:
                verified = jwt.decode(
                    token, key, algorithms=[alg], audience=auth.audience, issuer=auth.issuer,
                    options={"verify_exp": False, "verify_nbf": False, "verify_iat": False,  # checked above
                             "verify_aud": auth.audience is not None},
                )
            except jwt.InvalidSignatureError:
                continue
            except jwt.PyJWTError as exc:
                log.info("auth: token refused: %s", exc)
                raise invalid("token refused") from None
            principal = self._principal(verified)
            return principal, expires
        raise invalid("signature verification failed")

    def _principal(self, claims: dict[str, Any]) -> Principal:
        """Who the verified token names, what it may do, and its SMART scopes when they are honoured; 401 for a
        scope claim or scope the server cannot read (never ignored into a wider grant)."""
        auth = self.settings.auth
        try:
            scopes = scope_tokens(claims, auth.scope_claims)
            smart = parse_scopes(scopes, self.known_scopes) if auth.smart_scopes else None
        except ScopeRefused as exc:
            log.info("auth: token refused: %s", exc)
            raise AuthenticationFailed(  # the diagnostics name the claim or scope; the header keeps a fixed text
                f"invalid token: {exc}; the token is refused rather than the scope ignored",
                headers={"WWW-Authenticate": f'{REALM}, error="invalid_token", '
                                             f'error_description="{exc.description}"'}) from None
        return Principal(subject=claims.get("sub") if isinstance(claims.get("sub"), str) else None,
                         permissions=permissions_of(claims, auth.permission_claim, scopes), claims=claims,
                         scopes=smart)

    def _check_claims(self, claims: Mapping[str, Any], now: float) -> float:
        auth = self.settings.auth
        exp = _numeric_date(claims, "exp")
        if exp is None:
            raise invalid("the exp claim is required")
        if exp + auth.leeway <= now:
            raise invalid("token expired")
        nbf = _numeric_date(claims, "nbf")
        if nbf is not None and nbf - auth.leeway > now:
            raise invalid("token not yet valid (nbf)")
        iat = _numeric_date(claims, "iat")
        if iat is not None and iat - auth.leeway > now:
            raise invalid("token issued in the future (iat)")
        if auth.issuer is not None and claims.get("iss") != auth.issuer:
            raise invalid("wrong issuer")
        aud = claims.get("aud")
        if auth.audience is not None and not (aud == auth.audience or isinstance(aud, list) and auth.audience in aud):
            raise invalid("wrong audience")
        # cached until it expires, re-verified at least every jwks_cache_seconds: a key the IdP drops stops it
        return float(min(exp + auth.leeway, now + auth.jwks_cache_seconds))

    def _public_keys(self, alg: str, kid: str | None) -> list[PublicKey]:
        """RS/PS/ES keys only, fitting alg: by kid from the JWKS file, then the JWKS URL, then the PEM key
        (which has no kid); without a kid, the PEM key or else the one key of the key sets that fits alg."""
        pem = [self.public_key] if self.public_key else []
        if kid is None:
            candidates = pem or [*self.static_keys, *(self.remote.lookup(None) if self.remote else [])]
        else:
            candidates = [key for key in self.static_keys if key.kid == kid]
            if not candidates and self.remote is not None:
                candidates = self.remote.lookup(kid)
            candidates = candidates or pem
        fitting = [key.key for key in candidates if key.verifies(alg)]
        if not fitting:
            raise invalid("no key for this token's kid and algorithm")
        if kid is None and len(fitting) > 1:
            raise invalid("a token without kid needs a key set with a single key for its algorithm")
        return fitting
