"""The kick-off's parameters: which types, `_since`, `_typeFilter`, `_outputFormat`, and `Prefer: respond-async`.

`_typeFilter` (Bulk Data STU2): `Type?query` values (URL-encoded, comma-separated or repeated), each parsed as
`[type]?query` is (strictly: an unknown parameter is refused, never ignored; search result parameters such as
`_count`, `_sort`, `_include`, `_elements` or `_summary` have no place in it). A type's resources are those matching
any of its filters (a union); a type without one is exported whole. A filter names one of the types exported: of
`_type` when given, else of the level's (`[base]/[type]/$export`: that type); another one is refused (400), or
dropped with `Prefer: handling=lenient` (it would select nothing the export holds). A filter the server cannot
apply is refused even then: leaving it out would change what the export holds without saying."""
from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from server import InvalidRequest, UnsupportedParameter
from server.engine.export_reader import SearchRequest, parse_since

NDJSON = "application/fhir+ndjson"
OUTPUT_FORMATS = frozenset({NDJSON, "application/ndjson", "ndjson"})
# Bulk Data parameters this server does not apply: refused, or ignored with Prefer: handling=lenient
UNSUPPORTED = frozenset({"_elements", "includeAssociatedData", "patient", "_until", "organizeOutputBy",
                         "allowPartialManifests"})
IGNORED = frozenset({"_format", "_pretty"})
TYPE_FILTER = "_typeFilter"
KNOWN = frozenset({"_type", "_since", "_outputFormat", TYPE_FILTER, *UNSUPPORTED, *IGNORED})
MAX_FILTERS = 40  # `_typeFilter` queries in one kick-off (each is a search, compiled at the kick-off)
_FILTER = re.compile(r"(?P<type>[A-Z][A-Za-z]{0,63})\?(?P<query>.*)", re.DOTALL)
_NEXT_FILTER = re.compile(r",(?=[A-Z][A-Za-z]{0,63}\?)")  # a comma before `Type?`; one within a query's values stays
# `Type`, its query -> its search, a selection parsed as `[type]?query` is (ExportReader.type_filter)
FilterParser = Callable[[str, str], SearchRequest]


@dataclass(frozen=True)
class TypeFilter:
    """One `_typeFilter` value: `Type?query` as sent, and its search in the typed form of `[type]?query`."""

    query: str
    search: SearchRequest

    @property
    def resource_type(self) -> str:
        return self.search.resource_type


@contextmanager
def naming(query: str) -> Iterator[None]:
    """The 400 of a filter's search (parsed, or compiled: server.bulk.service) names the filter."""
    try:
        yield
    except InvalidRequest as exc:
        raise type(exc)(f"{TYPE_FILTER} {query[:200]!r}: {exc.diagnostics}", expression=exc.expression) from None


@dataclass(frozen=True)
class ExportRequest:
    types: tuple[str, ...]  # the resource types exported, in the order of the manifest
    since: datetime | None = None  # resources changed after this instant only
    since_raw: str | None = None
    output_format: str = NDJSON
    filters: tuple[TypeFilter, ...] = ()  # `_typeFilter`: a type's resources are those matching any of its own

    def filters_of(self, resource_type: str) -> tuple[TypeFilter, ...]:
        return tuple(f for f in self.filters if f.resource_type == resource_type)

    def to_json(self) -> dict[str, Any]:
        return {"types": list(self.types), "since": self.since_raw, "outputFormat": self.output_format,
                "typeFilter": [f.query for f in self.filters]}


def _prefer(header: str) -> set[str]:
    return {p.strip().lower().replace(" ", "") for p in header.split(",") if p.strip()}


def parse_export(items: Sequence[tuple[str, str]], prefer: str, exportable: Collection[str],
                 level_type: str | None, parse_filter: FilterParser) -> ExportRequest:
    """`exportable`: the types a system-level export writes (in order); `level_type`: the type of a
    `[type]/$export`, else None; `parse_filter`: a `_typeFilter`'s search. 400 for what the server cannot honour
    (unless Prefer: handling=lenient, for the parameters it does not support and the types it does not export)."""
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
        elif key not in KNOWN and not lenient:  # a typo'd `_typeFilter` or `_since` would export everything
            raise UnsupportedParameter(f"unknown $export parameter {key[:64]!r}; this server takes "
                                       f"{', '.join(sorted(KNOWN - IGNORED))} (Prefer: handling=lenient ignores "
                                       "what it does not know)")
    if any(k == "_type" and v.strip(" ,") for k, v in items):
        if not types and not lenient:
            raise UnsupportedParameter("_type names no exported type")
    else:
        types = [level_type] if level_type is not None else list(exportable)
    filters = _type_filters(items, types, exportable, level_type, parse_filter, lenient)
    return ExportRequest(tuple(types), since[1] if since else None, since[0] if since else None, filters=filters)


def _type_filters(items: Sequence[tuple[str, str]], types: Sequence[str], exportable: Collection[str],
                  level_type: str | None, parse_filter: FilterParser, lenient: bool) -> tuple[TypeFilter, ...]:
    filters: list[TypeFilter] = []
    for query in (q.strip() for key, raw in items if key == TYPE_FILTER for q in _NEXT_FILTER.split(raw)):
        if not query:
            continue
        shape = _FILTER.fullmatch(query)
        if shape is None:
            raise InvalidRequest(f"{TYPE_FILTER} {query[:200]!r} is not a search: send Type?query, URL-encoded "
                                 "(e.g. Location%3Fstatus%3Dactive), several joined by commas or repeated")
        rtype = shape["type"]
        if rtype not in types:
            if lenient:
                continue
            why = f"{rtype} is not exported (exported types: {', '.join(exportable)})" if rtype not in exportable \
                else f"[base]/{level_type}/$export exports {level_type} only" if level_type is not None \
                else f"{rtype} is not among the types of _type ({', '.join(types)}): a filter selects among them"
            raise UnsupportedParameter(f"{TYPE_FILTER} {query[:200]!r}: {why}")
        if len(filters) == MAX_FILTERS:
            raise InvalidRequest(f"too many {TYPE_FILTER} queries; at most {MAX_FILTERS}")
        with naming(query):
            filters.append(TypeFilter(query, parse_filter(rtype, shape["query"])))
    return tuple({f.query: f for f in filters}.values())  # a filter sent twice is one

