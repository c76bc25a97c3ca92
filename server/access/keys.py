"""Public verification keys: which algorithms a key may verify, JWKs and JWK Sets, and the key files of
settings (auth.public_key_file, auth.jwks_file). Symmetric, encryption, private and weak keys are never used."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from server.errors import ConfigError
from server.settings import named_text

HMAC_ALGORITHMS = frozenset({"HS256", "HS384", "HS512"})
RSA_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
EC_CURVES = {"ES256": "secp256r1", "ES384": "secp384r1", "ES512": "secp521r1"}
ASYMMETRIC_ALGORITHMS = RSA_ALGORITHMS | frozenset(EC_CURVES)
MAX_KID_LENGTH = 256
MIN_RSA_BITS = 2048

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey


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
        keys, problems = parse_jwks(json.loads(named_text(Path(path), f"auth.jwks_file {path}:")))
    except FileNotFoundError as exc:
        raise ConfigError(f"auth.jwks_file {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(f"auth.jwks_file {path}: {exc}") from None
    if problems:
        raise ConfigError(f"auth.jwks_file {path}: {'; '.join(problems)}")
    return keys
