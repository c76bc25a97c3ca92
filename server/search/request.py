"""A query string -> SearchRequest (typed, validated, before any SQL), and back to a query string."""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from urllib.parse import quote

from server.errors import InvalidRequest, InvalidValue, UnsupportedParameter
from server.provider import ResourceProvider, SearchParam
from server.search.values import SearchValue, parse_value

# Result and format parameters the engine understands; anything else starting with "_" is unknown.
FORMAT_PARAMS = frozenset({"_format", "_pretty"})
_COMMA = re.compile(r"(?<!\\),")


@dataclass(frozen=True)
class Clause:
    """One parameter occurrence: its values are OR-ed; clauses are AND-ed."""

    param: SearchParam
    modifier: str | None
    values: tuple[SearchValue, ...]

    @property
    def key(self) -> str:
        return f"{self.param.name}:{self.modifier}" if self.modifier else self.param.name

    @property
    def raw(self) -> str:
        return ",".join(v.raw.replace(",", "\\,") for v in self.values)


@dataclass(frozen=True)
class SearchRequest:
    resource_type: str
    clauses: tuple[Clause, ...] = ()
    count: int = 20
    skip: int = 0
    fixed: tuple[Clause, ...] = ()  # bound by the path (an operation), not shown in the query

    @property
    def all_clauses(self) -> tuple[Clause, ...]:
        return self.fixed + self.clauses

    def at(self, skip: int) -> SearchRequest:
        return replace(self, skip=skip)

    def query_string(self, extra: Sequence[tuple[str, str]] = ()) -> str:
        """The applied parameters, rebuilt from the typed form (the self/next links show exactly these)."""
        pairs = [(c.key, c.raw) for c in self.clauses]
        pairs += [("_count", str(self.count))]
        if self.skip:
            pairs.append(("_skip", str(self.skip)))
        pairs += list(extra)
        return "&".join(f"{quote(k, safe=':')}={quote(v, safe=':|,/')}" for k, v in pairs)


def _integer(name: str, raw: str) -> int:
    if not re.fullmatch(r"\d{1,9}", raw.strip()):
        raise InvalidValue(f"{name} must be a non-negative integer, got {raw!r}", expression=name)
    return int(raw)


def parse_search(
    provider: ResourceProvider,
    items: Sequence[tuple[str, str]],
    *,
    default_count: int,
    max_count: int,
    strict: bool = False,
) -> SearchRequest:
    clauses: list[Clause] = []
    count, skip = default_count, 0
    for key, raw in items:
        if key in FORMAT_PARAMS:
            continue
        if key == "_count":
            count = min(_integer("_count", raw), max_count)
            continue
        if key == "_skip":
            skip = _integer("_skip", raw)
            continue
        name, _, modifier = key.partition(":")
        param = provider.params_by_name.get(name)
        if param is None:
            if strict:
                raise UnsupportedParameter(
                    f"unknown search parameter {name!r} for {provider.resource_type}; "
                    f"supported: {', '.join(sorted(provider.params_by_name))}, _count, _skip",
                    expression=name,
                )
            continue
        if modifier and modifier not in param.modifiers:
            allowed = ", ".join(f":{m}" for m in sorted(param.modifiers)) or "none"
            raise UnsupportedParameter(
                f"modifier :{modifier} is not supported on {name} ({param.type}); supported: {allowed}",
                expression=key,
            )
        if not raw:
            continue  # an empty value is ignored, as the FHIR search page says
        values = tuple(parse_value(param, modifier or None, part.replace("\\,", ","))
                       for part in _COMMA.split(raw))
        clauses.append(Clause(param, modifier or None, values))
    return SearchRequest(provider.resource_type, tuple(clauses), count, skip)


def bind_operation(provider: ResourceProvider, request: SearchRequest, operation: str, resource_id: str) -> SearchRequest:
    op = provider.operations_by_name[operation]
    param = provider.params_by_name[op.param]
    clause = Clause(param, None, (parse_value(param, None, f"{provider.resource_type}/{resource_id}"),))
    return replace(request, fixed=(clause,))


def reject_bad_params(items: Sequence[tuple[str, str]]) -> None:
    for key, _ in items:
        if not key:
            raise InvalidRequest("a query parameter has an empty name")
