"""The identity provider's key set (auth.jwks_url): fetched with a timeout and a size limit, cached, refetched
at a bounded rate, and kept through an IdP outage."""
from __future__ import annotations

import http.client
import json
import logging
import math
import threading
import time
import urllib.request
from collections.abc import Callable

from server.access.keys import VerificationKey, parse_jwks
from server.errors import ConfigError, ServiceUnavailable

log = logging.getLogger("orgunit_fhir")
MAX_JWKS_BYTES = 1 << 20

Clock = Callable[[], float]


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
