"""Conditional GET, written once for every answer with validators (FHIR answers, the pages' static files): the
ETag and Last-Modified headers, and whether a request's If-None-Match (weak comparison, `*`) or, without it,
If-Modified-Since makes the answer a 304."""
from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime

from server.declare.instants import as_utc, http_date


def headers_for(etag: str, last_modified: datetime | None) -> dict[str, str]:
    out = {"ETag": etag}
    if last_modified is not None:
        out["Last-Modified"] = http_date(last_modified)
    return out


def _opaque(tag: str) -> str:
    return tag.strip().removeprefix("W/")


def not_modified(request_headers: Mapping[str, str], etag: str, last_modified: datetime | None = None) -> bool:
    if_none_match = request_headers.get("if-none-match")
    if if_none_match is not None:
        tags = [t for t in if_none_match.split(",") if t.strip()]
        return any(t.strip() == "*" or _opaque(t) == _opaque(etag) for t in tags)
    since = request_headers.get("if-modified-since")
    if since and last_modified is not None:
        try:
            when = as_utc(parsedate_to_datetime(since))
        except (TypeError, ValueError, OverflowError):  # OverflowError: a date whose UTC is past year 1..9999
            return False
        return as_utc(last_modified).replace(microsecond=0) <= when
    return False
