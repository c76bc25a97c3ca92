"""The kick-off's parameters: which types, `_since`, `_outputFormat`, and `Prefer: respond-async`."""
from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from server.errors import InvalidRequest, UnsupportedParameter
from server.params.dates import parse_since

NDJSON = "application/fhir+ndjson"
OUTPUT_FORMATS = frozenset({NDJSON, "application/ndjson", "ndjson"})
# Bulk Data parameters this server does not apply: refused, or ignored with Prefer: handling=lenient
UNSUPPORTED = frozenset({"_typeFilter", "_elements", "includeAssociatedData", "patient", "_until", "organizeOutputBy",
                         "allowPartialManifests"})
IGNORED = frozenset({"_format", "_pretty"})


@dataclass(frozen=True)
class ExportRequest:
    types: tuple[str, ...]  # the resource types exported, in the order of the manifest
    since: datetime | None = None  # resources changed after this instant only
    since_raw: str | None = None
    output_format: str = NDJSON

    def to_json(self) -> dict[str, Any]:
        return {"types": list(self.types), "since": self.since_raw, "outputFormat": self.output_format}


def _prefer(header: str) -> set[str]:
    return {p.strip().lower().replace(" ", "") for p in header.split(",") if p.strip()}


def parse_export(items: Sequence[tuple[str, str]], prefer: str, exportable: Collection[str],
                 level_type: str | None) -> ExportRequest:
    """`exportable`: the types a system-level export writes (in order); `level_type`: the type of a
    `[type]/$export`, else None. 400 for what the server cannot honour (unless Prefer: handling=lenient, for the
    parameters it does not support and types it does not export)."""
    preferences = _prefer(prefer)
    if "respond-async" not in preferences:
        raise InvalidRequest("$export runs asynchronously: send the header Prefer: respond-async")
    lenient = "handling=lenient" in preferences
    types: list[str] = []
    since = parse_since(items)
    for key, raw in items:
        value = raw.strip()
        if key == "_type":
            for name in (t.strip() for t in value.split(",")):
                if not name:
                    continue
                if name not in exportable or (level_type is not None and name != level_type):
                    if lenient:
                        continue
                    where = f"[base]/{level_type}/$export exports {level_type} only" if level_type else \
                        f"exported types: {', '.join(exportable)}"
                    raise UnsupportedParameter(f"_type: {name!r} is not exported ({where})")
                if name not in types:
                    types.append(name)
        elif key == "_outputFormat" and value:
            fmt = value.replace(" ", "+").lower()
            if fmt not in OUTPUT_FORMATS:
                raise UnsupportedParameter(f"_outputFormat {value!r} is not supported; use {NDJSON}, "
                                           "application/ndjson or ndjson")
        elif key in UNSUPPORTED and not lenient:
            raise UnsupportedParameter(f"the $export parameter {key} is not supported (Prefer: handling=lenient "
                                       "ignores it)")
    if any(k == "_type" and v.strip(" ,") for k, v in items):
        if not types and not lenient:
            raise UnsupportedParameter("_type names no exported type")
    else:
        types = [level_type] if level_type is not None else list(exportable)
    return ExportRequest(tuple(types), since[1] if since else None, since[0] if since else None)
