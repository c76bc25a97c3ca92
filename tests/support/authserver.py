"""A real OAuth 2.0 authorization server for the tests: oidc-provider (OpenID certified, from npm at the version
pinned in tests/support/oidc/package-lock.json) on the machine's Node, issuing JWT access tokens with the
client-credentials grant to confidential clients authenticating with private_key_jwt (SMART Backend Services).

`install()` copies tests/support/oidc/ into the git-ignored .cache/authserver/ and runs `npm ci` there when the
lock file changed (`python -m tests.support.authserver install`, run by `make test`; the fixtures call it too, so a
clean clone needs nothing else). `AuthServer` runs it on a free port of 127.0.0.1 for one test module."""
from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

ROOT = Path(__file__).resolve().parents[2]
SOURCE = Path(__file__).resolve().parent / "oidc"
CACHE = ROOT / ".cache" / "authserver"
FILES = ("package.json", "package-lock.json", "server.mjs")
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


def _stamp() -> str:
    return hashlib.sha256(b"".join((SOURCE / name).read_bytes() for name in FILES[:2])).hexdigest()


def install() -> Path:
    """The authorization server's directory, its packages installed (`npm ci`, from the lock file) if needed."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE.parent / "authserver.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name in FILES:
            if not (CACHE / name).exists() or (CACHE / name).read_bytes() != (SOURCE / name).read_bytes():
                shutil.copyfile(SOURCE / name, CACHE / name)
        stamp = CACHE / "node_modules" / ".orgunit-fhir-stamp"
        if not stamp.exists() or stamp.read_text() != _stamp():
            npm = shutil.which("npm")
            if npm is None or shutil.which("node") is None:
                raise RuntimeError("the authorization server tests need Node.js 20+ and npm (Debian: nodejs npm)")
            done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=CACHE,
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise RuntimeError(f"npm ci in {CACHE} failed:\n{done.stdout}\n{done.stderr}")
            stamp.write_text(_stamp())
    return CACHE


@dataclass(frozen=True)
class ClientKey:
    """A confidential client's RSA key pair: the public JWK is registered, the private key signs assertions."""

    client_id: str
    private_key: rsa.RSAPrivateKey
    kid: str = field(default_factory=lambda: uuid.uuid4().hex)

    @staticmethod
    def generate(client_id: str) -> ClientKey:
        return ClientKey(client_id, rsa.generate_private_key(public_exponent=65537, key_size=2048))

    def public_jwks(self) -> dict[str, Any]:
        public = json.loads(RSAAlgorithm.to_jwk(self.private_key.public_key()))
        return {"keys": [{**public, "kid": self.kid, "use": "sig"}]}

    def private_jwks(self, alg: str = "RS384") -> dict[str, Any]:
        """As SMART client libraries take it (cumulus-fhir-support: a key with key_ops sign, kid and alg)."""
        private = json.loads(RSAAlgorithm.to_jwk(self.private_key))
        return {"keys": [{**private, "kid": self.kid, "alg": alg, "key_ops": ["sign"]}]}

    def pem(self) -> str:
        return self.private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()).decode()

    def assertion(self, audience: str, alg: str = "RS384", ttl: int = 240) -> str:
        """A client assertion (RFC 7523, SMART Backend Services) for the token endpoint `audience`."""
        now = int(time.time())
        claims = {"iss": self.client_id, "sub": self.client_id, "aud": audience, "iat": now, "exp": now + ttl,
                  "jti": uuid.uuid4().hex}
        return jwt.encode(claims, self.private_key, algorithm=alg, headers={"kid": self.kid, "typ": "JWT"})


@dataclass(frozen=True)
class Registration:
    key: ClientKey
    scope: str  # what the client may ask for
    claims: Mapping[str, Any] = field(default_factory=dict)  # added to its access tokens (as an IdP's mappers)
    ttl: int | None = None  # access token lifetime, seconds


class TokenRefused(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"{status}: {body}")
        self.status, self.body = status, body


class AuthServer:
    """One oidc-provider process; `metadata` is its discovery document (/.well-known/openid-configuration)."""

    def __init__(self, issuer: str, metadata: dict[str, Any], process: subprocess.Popen[bytes], log: Path) -> None:
        self.issuer, self.metadata, self.process, self.log = issuer, metadata, process, log

    @property
    def token_endpoint(self) -> str:
        return str(self.metadata["token_endpoint"])

    @property
    def jwks_uri(self) -> str:
        return str(self.metadata["jwks_uri"])

    def token(self, key: ClientKey, scope: str, resource: str | None = None, alg: str = "RS384") -> str:
        """An access token by the client-credentials grant, the client authenticating with private_key_jwt."""
        form = {"grant_type": "client_credentials", "scope": scope, "client_assertion_type": ASSERTION_TYPE,
                "client_assertion": key.assertion(self.token_endpoint, alg)}
        if resource is not None:
            form["resource"] = resource
        answer = self._post(self.token_endpoint, form)
        return str(answer["access_token"])

    def rotate(self, drop: bool = False) -> str:
        """A new signing key signs from now on (the old ones stay published unless `drop`); its kid."""
        return str(self._post(f"{self.issuer}/__test/rotate" + ("?drop=1" if drop else ""), {})["kid"])

    def _post(self, url: str, form: Mapping[str, str]) -> Any:
        request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), method="POST",
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise TokenRefused(exc.code, json.loads(exc.read() or b"null")) from None


def _wait_ready(ready: Path, process: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.time() + 30
    while True:
        try:
            return str(json.loads(ready.read_text())["issuer"])
        except (FileNotFoundError, ValueError, KeyError):
            if process.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the authorization server did not start:\n{log.read_text()}") from None
            time.sleep(0.05)


@contextmanager
def authorization_server(tmp: Path, clients: Sequence[Registration], resources: Mapping[str, Mapping[str, Any]],
                         default_resource: str) -> Iterator[AuthServer]:
    """Run oidc-provider with these clients and resource servers ({indicator: {scope, ttl}}); the default resource
    is the audience of tokens that ask for none."""
    directory = install()
    ready = tmp / "authserver-ready.json"
    config = tmp / "authserver.json"
    config.write_text(json.dumps({
        "ready_file": str(ready), "default_resource": default_resource, "resources": resources,
        "clients": [{"client_id": c.key.client_id, "jwks": c.key.public_jwks(), "scope": c.scope,
                     "claims": dict(c.claims), **({"ttl": c.ttl} if c.ttl is not None else {})} for c in clients],
    }))
    log = tmp / "authserver.log"
    with log.open("w") as out:
        process = subprocess.Popen([shutil.which("node") or "node", str(directory / "server.mjs"), str(config)],
                                   stdout=out, stderr=subprocess.STDOUT, cwd=directory)
    try:
        issuer = _wait_ready(ready, process, log)
        with urllib.request.urlopen(f"{issuer}/.well-known/openid-configuration", timeout=10) as response:
            metadata = json.loads(response.read())
        yield AuthServer(issuer, metadata, process, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python -m tests.support.authserver install")
    print(f"authorization server (oidc-provider) installed in {install()}")
