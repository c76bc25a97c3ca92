"""The ETag and Last-Modified of a FHIR answer (the conditional GET itself: server.declare.validators)."""
from __future__ import annotations

import zlib
from datetime import datetime
from typing import Any

from server.declare.instants import as_utc
from server.declare.rendered import Rendered


def validators(body: dict[str, Any] | Rendered, content: bytes, page: bool = False) -> tuple[str, datetime | None]:
    """A resource's ETag is its version (FHIR's W/"versionId" for JSON and XML); anything else (Bundles,
    capabilities) is tagged by its bytes: their length and CRC-32, a weak validator 6x cheaper than a SHA-1 (a page of
    100 stored bodies spent as much on a SHA-1 as on its statement). An HTML page of a resource (`page`) is tagged
    apart: a browser that cached the JSON must not have its HTML revalidated into that JSON."""
    if isinstance(body, Rendered):  # a resource's stored body knows its version: else tagged by its bytes
        if body.version_id is not None:
            return _tag(body.version_id, page), body.last_updated
        return _by_bytes(content), None
    meta = body.get("meta") or {}
    if "versionId" in meta and body.get("resourceType") not in ("Bundle", "CapabilityStatement"):
        updated = as_utc(meta["lastUpdated"].replace("Z", "+00:00")) if "lastUpdated" in meta else None
        return _tag(meta["versionId"], page), updated
    return _by_bytes(content), None


def _by_bytes(content: bytes) -> str:
    return f'W/"{len(content):x}-{zlib.crc32(content):08x}"'


def _tag(version: str, page: bool) -> str:
    return f'W/"{version}-html"' if page else f'W/"{version}"'
