"""A resource already serialized as compact FHIR JSON (a pre-rendered body): spliced, never re-encoded."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from server.declare.instants import as_utc


@dataclass(frozen=True, slots=True)
class Rendered:
    raw: bytes
    version_id: str | None = None  # meta.versionId and meta.lastUpdated, when known without parsing (ETag)
    last_updated: datetime | None = None

    def resource(self) -> dict[str, Any]:
        return orjson.loads(self.raw)  # type: ignore[no-any-return]


def tagged(raw: bytes) -> Rendered:
    """A stored body with the validators it holds (meta.versionId, meta.lastUpdated), read from it: an answer
    that has no row to tell them (a version read by number)."""
    meta = orjson.loads(raw).get("meta") or {}
    updated = meta.get("lastUpdated")
    return Rendered(raw, meta.get("versionId"),
                    as_utc(updated.replace("Z", "+00:00")) if isinstance(updated, str) else None)


def splice(value: Any) -> orjson.Fragment:
    """orjson's `default`: a Rendered goes into the output as its bytes."""
    if isinstance(value, Rendered):
        return orjson.Fragment(value.raw)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def json_bytes(body: Any, pretty: bool = False) -> bytes:
    """FHIR JSON as every answer writes it (reads, searches, Bulk Data files): Rendered bodies spliced as they are."""
    return orjson.dumps(body, default=splice, option=orjson.OPT_PASSTHROUGH_DATACLASS | (
        orjson.OPT_INDENT_2 if pretty else 0))


def materialized(value: Any) -> Any:
    """The same data with every Rendered parsed back (XML, pretty printing, subsetting)."""
    if isinstance(value, Rendered):
        return value.resource()
    if isinstance(value, dict):
        return {k: materialized(v) for k, v in value.items()}
    if isinstance(value, list):
        return [materialized(v) for v in value]
    return value
