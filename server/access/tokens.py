"""JWT bearer authentication (pyjwt): strict parsing, keys chosen by algorithm family, claim checks, an IdP key
set (JWKS) cache that outlives an IdP outage, and a bounded cache of verified tokens."""
from __future__ import annotations

import base64
import hashlib
import http.client
import json
import logging
import math
import re
import secrets
import threading
import time
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from server.errors import AuthenticationFailed, ConfigError, ServiceUnavailable
from server.settings import Settings

log = logging.getLogger("orgunit_fhir")
HMAC_ALGORITHMS = frozenset({"HS256", "HS384", "HS512"})
RSA_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
EC_CURVES = {"ES256": "secp256r1", "ES384": "secp384r1", "ES512": "secp521r1"}
ASYMMETRIC_ALGORITHMS = RSA_ALGORITHMS | frozenset(EC_CURVES)
MAX_TOKEN_BYTES = 8192      # default of auth.max_token_bytes
MAX_KID_LENGTH = 256
MIN_RSA_BITS = 2048
MAX_JWKS_BYTES = 1 << 20
CACHE_SIZE = 4096
REALM = 'Bearer realm="orgunit-fhir"'
_SEGMENT = re.compile(r"[A-Za-z0-9_-]+")

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey
Clock = Callable[[], float]


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


# ------------------------------------------------------------------ public keys

@dataclass(frozen=True)
class VerificationKey:
    key: PublicKey
    kid: str | None = None
    alg: str | None = None  # a JWK's `alg`: the only algorithm it may verify

    def verifies(self, alg: str) -> bool:
        if self.alg is not None and self.alg != alg:
            return False
        if alg in RSA_ALGORITHMS:
            return isinstance(self.key, rsa.RSAPublicKey)
        curve = EC_CURVES.get(alg)
        return curve is not None and isinstance(self.key, ec.EllipticCurvePublicKey) and self.key.curve.name == curve


def _checked(key: object) -> PublicKey:
    if isinstance(key, (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey)):
        raise ValueError("it is a private key: publish only the public key")
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < MIN_RSA_BITS:
            raise ValueError(f"RSA key of {key.key_size} bits; at least {MIN_RSA_BITS} are needed")
        return key
    if isinstance(key, ec.EllipticCurvePublicKey):
        if key.curve.name not in EC_CURVES.values():
            raise ValueError(f"unsupported curve {key.curve.name}")
        return key
    raise ValueError(f"unsupported key type {type(key).__name__}")


def jwk_key(jwk: Any) -> VerificationKey:
    """One JWK as a verification key; ValueError names why it cannot verify RS/PS/ES tokens."""
    if not isinstance(jwk, dict):
        raise ValueError("not a JSON object")
    kty, kid, alg, use = jwk.get("kty"), jwk.get("kid"), jwk.get("alg"), jwk.get("use")
    if kid is not None and not (isinstance(kid, str) and 0 < len(kid) <= MAX_KID_LENGTH):
        raise ValueError(f"kid must be a string of 1 to {MAX_KID_LENGTH} characters")
    if use not in (None, "sig"):
        raise ValueError(f"use {use!r} is not sig")
    if alg is not None and alg not in ASYMMETRIC_ALGORITHMS:
        raise ValueError(f"alg {alg!r} is not an accepted public-key algorithm")
    loaders = {"RSA": RSAAlgorithm.from_jwk, "EC": ECAlgorithm.from_jwk}
    if kty not in loaders:
        raise ValueError(f"kty {kty!r} is not a public signature key (RSA or EC)")
    try:
        key = loaders[kty](jwk)
    except (jwt.PyJWTError, ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"unreadable {kty} key ({exc.__class__.__name__})") from None
    return VerificationKey(_checked(key), kid, alg)


def parse_jwks(document: Any) -> tuple[tuple[VerificationKey, ...], list[str]]:
    """The usable keys of a JWK Set and a problem line for each key left out."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError('not a JWK Set (a JSON object with a "keys" array)')
    keys: list[VerificationKey] = []
    problems: list[str] = []
    for index, jwk in enumerate(document["keys"]):
        try:
            keys.append(jwk_key(jwk))
        except ValueError as exc:
            name = jwk.get("kid") if isinstance(jwk, dict) and isinstance(jwk.get("kid"), str) else f"#{index}"
            problems.append(f"key {name[:MAX_KID_LENGTH]}: {exc}")
    return tuple(keys), problems


def load_public_key_file(path: str) -> VerificationKey:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"auth.public_key_file {path}: {exc.strerror}") from None
    try:
        key: object = serialization.load_pem_public_key(data)
    except ValueError:
        try:
            key = x509.load_pem_x509_certificate(data).public_key()
        except ValueError:
            raise ConfigError(f"auth.public_key_file {path} is not a PEM public key or certificate") from None
    try:
        return VerificationKey(_checked(key))
    except ValueError as exc:
        raise ConfigError(f"auth.public_key_file {path}: {exc}") from None


def load_jwks_file(path: str) -> tuple[VerificationKey, ...]:
    try:
        keys, problems = parse_jwks(json.loads(Path(path).read_text(encoding="utf-8")))
    except OSError as exc:
        raise ConfigError(f"auth.jwks_file {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(f"auth.jwks_file {path}: {exc}") from None
    if problems:
        raise ConfigError(f"auth.jwks_file {path}: {'; '.join(problems)}")
    return keys


class JwksUnavailable(Exception):
    pass


class RemoteJwks:
    """The IdP's key set from auth.jwks_url. Keys are served from memory while fresh (cache_seconds); an
    unknown kid or an expired cache refetches, at most once per refetch_seconds whatever the outcome. While
    the IdP cannot be reached, the keys last fetched keep working. One thread fetches at a time (with a
    timeout); threads that have a cached key never wait for it."""

    def __init__(self, url: str, *, timeout: float, cache_seconds: float, refetch_seconds: float,
                 clock: Clock) -> None:
        if not url.lower().startswith(("https://", "http://")):
            raise ConfigError(f"auth.jwks_url must be an http(s) URL, got {url!r}")
        if timeout <= 0:
            raise ConfigError("auth.jwks_timeout_seconds must be at least 1")
        self.url = url
        self.timeout = timeout
        self.cache_seconds = cache_seconds
        self.refetch_seconds = refetch_seconds
        self.clock = clock
        self._keys: tuple[VerificationKey, ...] = ()
        self._fetched_at: float | None = None
        self._attempted_at: float | None = None
        self._reachable = False
        self._lock = threading.Lock()
        self._opener = urllib.request.build_opener()

    def lookup(self, kid: str | None) -> list[VerificationKey]:
        """The keys named kid (every key when kid is None); [] when the IdP does not know it. Raises
        ServiceUnavailable when the IdP cannot be reached and no key named kid is cached."""
        found = self._find(kid)
        fresh = self._fetched_at is not None and self.clock() - self._fetched_at < self.cache_seconds
        if found and fresh:
            return found
        reachable = self._refresh(wait=not found)
        found = self._find(kid)
        if found or reachable:
            return found
        raise ServiceUnavailable("the identity provider's signing keys (JWKS) cannot be fetched; retry later",
                                 headers={"Retry-After": str(self._retry_after())})

    def _find(self, kid: str | None) -> list[VerificationKey]:
        return [key for key in self._keys if kid is None or key.kid == kid]

    def _retry_after(self) -> int:
        if self._attempted_at is None:
            return 1
        return max(1, math.ceil(self._attempted_at + self.refetch_seconds - self.clock()))

    def _refresh(self, wait: bool) -> bool:
        """Refetch unless an attempt was made within refetch_seconds; whether the IdP answered last time."""
        acquired = self._lock.acquire(timeout=2 * self.timeout + 1) if wait else self._lock.acquire(blocking=False)
        if not acquired:
            return self._reachable
        try:
            now = self.clock()
            if self._attempted_at is not None and now - self._attempted_at < self.refetch_seconds:
                return self._reachable
            self._attempted_at = now
            try:
                self._keys = self._fetch()
            except JwksUnavailable as exc:
                self._reachable = False
                log.warning("auth: cannot fetch the JWKS at %s: %s (cached keys: %d)", self.url, exc, len(self._keys))
                return False
            self._fetched_at, self._reachable = now, True
            return True
        finally:
            self._lock.release()

    def probe(self) -> int:
        """Fetch the key set now (check-config): the number of usable signing keys; JwksUnavailable else."""
        return len(self._fetch())

    def _fetch(self) -> tuple[VerificationKey, ...]:
        request = urllib.request.Request(self.url, headers={"Accept": "application/jwk-set+json, application/json",
                                                            "User-Agent": "orgunit-fhir"})
        deadline = time.monotonic() + self.timeout
        body = bytearray()
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                while chunk := response.read(65536):
                    body += chunk
                    if len(body) > MAX_JWKS_BYTES:
                        raise JwksUnavailable(f"the key set is larger than {MAX_JWKS_BYTES} bytes")
                    if time.monotonic() > deadline:
                        raise JwksUnavailable(f"no complete answer within {self.timeout} s")
            keys, problems = parse_jwks(json.loads(body))
        except (OSError, ValueError, RecursionError, http.client.HTTPException) as exc:
            raise JwksUnavailable(f"{exc.__class__.__name__}: {exc}") from None
        for problem in problems:
            log.warning("auth: JWKS %s: %s (ignored)", self.url, problem)
        if not keys:
            raise JwksUnavailable("the key set holds no usable signing key")
        return keys


# ------------------------------------------------------------------ verified tokens

class TokenCache:
    """Principals of verified tokens until their expiry, least recently used evicted first; keyed by the
    token's SHA-256, so memory stays bounded whatever the size of the tokens."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[bytes, tuple[Principal, float]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes, now: float) -> Principal | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[1] <= now:
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: bytes, principal: Principal, expires: float) -> None:
        with self._lock:
            self._entries[key] = (principal, expires)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)


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
    def __init__(self, settings: Settings, *, clock: Clock = time.time, cache_size: int = CACHE_SIZE) -> None:
        auth = settings.auth
        self.settings = settings
        self.clock = clock
        self.algorithms = _accepted_algorithms(auth.algorithms)
        self.hmac_algorithms = self.algorithms & HMAC_ALGORITHMS
        self.asym_algorithms = self.algorithms & ASYMMETRIC_ALGORITHMS
        if auth.max_token_bytes < 64:
            raise ConfigError("auth.max_token_bytes must be at least 64")
        self.secret = secret_for(settings, create=True) if self.hmac_algorithms else None
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
        keys: Iterable[Any] = [self.secret] if alg in HMAC_ALGORITHMS else self._public_keys(alg, kid)
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
            principal = Principal(
                subject=verified.get("sub") if isinstance(verified.get("sub"), str) else None,
                permissions=permissions_of(verified, auth.permission_claim),
                claims=verified,
            )
            return principal, expires
        raise invalid("signature verification failed")

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


def mint_token(settings: Settings, subject: str = "orgunit-fhir-cli", permissions: list[str] | None = None,
               ttl: int = 3600, extra: Mapping[str, Any] | None = None, *, account: str | None = None,
               roots: Sequence[str] | None = None) -> str:
    """Sign a token with the local HMAC secret (operators and tests); `extra` claims are set last."""
    auth = settings.auth
    algorithm = next((a for a in auth.algorithms if a in HMAC_ALGORITHMS), None)
    if algorithm is None:
        raise ConfigError("orgunit-fhir token signs with the local HMAC secret; auth.algorithms has no HS algorithm")
    now = int(time.time())
    claims: dict[str, Any] = {"sub": subject, "iat": now, "exp": now + ttl}
    _set_path(claims, auth.permission_claim, permissions if permissions is not None else [auth.permission])
    if account is not None:
        _set_path(claims, auth.account_claim, account)
    if roots is not None:
        _set_path(claims, auth.roots_claim, list(roots))
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
