"""Per-subject request rate limit (a token bucket per caller, in this worker process)."""
from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable

import orjson

from server.access.tokens import Principal
from server.errors import TooManyRequests
from server.storage.cache import Bounded

MAX_SUBJECTS = 100_000
Bucket = tuple[float, float, bool]  # (tokens left, when, whether the last request was admitted)


def caller_key(principal: Principal, account: str | None) -> str:
    """Who is counted: the subject of an issuer within an account (the access scope's, as the `access_scope` hook
    gave it); a token without `sub` counts alone."""
    claims = principal.claims
    subject = principal.subject or "~" + hashlib.sha256(
        orjson.dumps(claims, option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()[:32]
    return orjson.dumps([claims.get("iss"), account, subject], default=str).decode()


class RateLimiter:
    """`per_minute` requests a minute for each subject, in bursts of up to `per_minute`."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(per_minute)
        self.clock = clock
        self._buckets: Bounded[Bucket] = Bounded(MAX_SUBJECTS)  # by subject

    def take(self, subject: str) -> None:
        now = self.clock()

        def refill(bucket: Bucket | None) -> Bucket:
            tokens, at, _ = bucket if bucket is not None else (self.burst, now, True)
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            return (tokens - 1.0, now, True) if tokens >= 1.0 else (tokens, now, False)

        tokens, _, admitted = self._buckets.change(subject, refill)
        if not admitted:
            wait = math.ceil((1.0 - tokens) / self.rate)
            raise TooManyRequests(f"too many requests: at most {int(self.burst)} a minute for each caller; "
                                  f"retry in {wait} s", headers={"Retry-After": str(wait)})
