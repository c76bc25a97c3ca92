"""The local HMAC secret, and tokens signed with it (the `token` command, `serve`'s first token, tests)."""
from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jwt

from server.access.claims import set_claim
from server.access.keys import HMAC_ALGORITHMS
from server.errors import ConfigError
from server.settings import Settings, named_text

log = logging.getLogger("orgunit_fhir")


def secret_for(settings: Settings, create: bool = False) -> str | None:
    """The HMAC secret: configured, read from a file, or generated into the data directory on first run."""
    auth = settings.auth
    if auth.secret:
        return auth.secret
    path = Path(auth.secret_file) if auth.secret_file else settings.data_path / "jwt-secret"
    key = "auth.secret_file" if auth.secret_file else "the HMAC secret of server.data_dir"
    if path.exists():
        value = named_text(path, f"{key} {path}:").strip()
        if not value:
            raise ConfigError(f"auth secret file {path} is empty")
        return value
    if auth.secret_file:
        raise ConfigError(f"auth.secret_file {path} does not exist")
    if not create:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"server.data_dir {path.parent}: cannot make the folder of the HMAC secret "
                          f"({exc.strerror or exc})") from None
    path.write_text(secrets.token_urlsafe(48), encoding="utf-8")
    path.chmod(0o600)
    log.warning("created a new JWT secret at %s; tokens verify only where the server uses this data directory "
                "(server.data_dir) or auth.secret_file", path.resolve())
    return path.read_text(encoding="utf-8").strip()


def mint_token(settings: Settings, subject: str = "orgunit-fhir-cli", permissions: list[str] | None = None,
               ttl: int = 3600, extra: Mapping[str, Any] | None = None, *, account: str | None = None,
               roots: Sequence[str] | None = None, create: bool = True) -> str:
    """Sign a token with the local HMAC secret (operators and tests); `extra` claims are set last. Without
    `create`, a secret that does not exist yet is refused (`orgunit-fhir token` never makes one: a token signed
    with a new secret in the wrong folder would be refused by the server)."""
    auth = settings.auth
    algorithm = next((a for a in auth.algorithms if a in HMAC_ALGORITHMS), None)
    if algorithm is None:
        raise ConfigError("orgunit-fhir token signs with the local HMAC secret; auth.algorithms has no HS algorithm")
    now = int(time.time())
    claims: dict[str, Any] = {"sub": subject, "iat": now, "exp": now + ttl}
    set_claim(claims, auth.permission_claim, permissions if permissions is not None else [auth.permission])
    if account is not None:
        set_claim(claims, auth.account_claim, account)
    if roots is not None:
        set_claim(claims, auth.roots_claim, list(roots))
    if auth.issuer:
        claims["iss"] = auth.issuer
    if auth.audience:
        claims["aud"] = auth.audience
    claims.update(extra or {})
    secret = secret_for(settings, create=create)
    if secret is None:
        raise ConfigError(f"no HMAC secret at {(settings.data_path / 'jwt-secret').resolve()}: run the command where "
                          "the server runs (the same --settings, server.data_dir), or set auth.secret_file to the "
                          "server's secret; `orgunit-fhir serve` creates it on its first start")
    return jwt.encode(claims, secret, algorithm=algorithm)
