"""ETag / Last-Modified validators and conditional GET (If-None-Match, If-Modified-Since -> 304)."""
from __future__ import annotations

import zlib
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

from starlette.datastructures import Headers

from server.declare.instants import as_utc, http_date
from server.declare.rendered import Rendered


def validators(body: dict[str, Any] | Rendered, content: bytes, page: bool = False) -> tuple[str, datetime | None]:
    """A resource's ETag is its version (FHIR's W/"versionId" for JSON and XML); anything else (Bundles,
    capabilities) is tagged by its bytes: their length and CRC-32, a weak validator 6x cheaper than a SHA-1 (a page of
    100 stored bodies spent as much on a SHA-1 as on its statement). An HTML page of a resource (`page`) is tagged
    apart: a browser that cached the JSON must not have its HTML revalidated into that JSON."""
    if isinstance(body, Rendered):
        if body.version_id is not None:
            return _tag(body.version_id, page), body.last_updated
        body = body.resource()
    meta = body.get("meta") or {}
    if "versionId" in meta and body.get("resourceType") not in ("Bundle", "CapabilityStatement"):
        updated = as_utc(meta["lastUpdated"].replace("Z", "+00:00")) if "lastUpdated" in meta else None
        return _tag(meta["versionId"], page), updated
    return f'W/"{len(content):x}-{zlib.crc32(content):08x}"', None


def _tag(version: str, page: bool) -> str:
    return f'W/"{version}-html"' if page else f'W/"{version}"'


def headers_for(etag: str, last_modified: datetime | None) -> dict[str, str]:
    out = {"ETag": etag}
    if last_modified is not None:
        out["Last-Modified"] = http_date(last_modified)
    return out


def _opaque(tag: str) -> str:
    return tag.strip().removeprefix("W/")


def not_modified(request_headers: Headers, etag: str, last_modified: datetime | None) -> bool:
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
