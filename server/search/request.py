"""A query string -> SearchRequest (typed, validated, before any SQL), and back to a query string."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Literal, Protocol, cast

from urllib.parse import parse_qsl

from server.errors import InvalidRequest, InvalidValue, UnsupportedParameter
from server.declare.provider import ResourceProvider
from server.params.ids import stored_id
from server.settings import FhirApi
from server.search.paging import FORMAT_PARAMS, PAGING_PARAMS, PageAt, Paged, Paging, parse_paging
from server.params.param import SearchParam
from server.params.types.base import IndexOrder, Orders, Ranks, implements
from server.params.values import SearchValue, parse_value

MAX_VALUES = 100  # OR-ed values in one parameter
MAX_CLAUSES = 40  # parameters in one search
MAX_INCLUDES = 10  # _include and _revinclude values in one search
SUMMARY_MODES = ("true", "false", "count", "data")
# what shapes a search's answer, not its matches (`_include:iterate` by its name before the colon): a search that
# only selects (Bulk Data's `_typeFilter`) takes none of them
RESULT_PARAMETERS = frozenset({*PAGING_PARAMS, *FORMAT_PARAMS, "_after", "_sort", "_total", "_summary", "_elements",
                               "_include", "_revinclude", "_contained", "_containedType"})
TOTAL_MODES = ("none", "estimate", "accurate")


def selection_pairs(query: str | Sequence[tuple[str, str]] | Mapping[str, str], what: str) -> list[tuple[str, str]]:
    """A query that selects resources and shapes no answer (Bulk Data's `_typeFilter`, a SMART scope's query, a
    plugin's look-up), as (name, value) pairs: InvalidRequest for text that is not a query string, for a blank value
    (a search ignores it: the query would select everything), UnsupportedParameter for a result parameter; `what`
    names the query in the message."""
    if isinstance(query, str):
        try:
            pairs = parse_qsl(query.lstrip("?"), keep_blank_values=True, strict_parsing=True) if query else []
        except ValueError:
            raise InvalidRequest(f"{what} must be name=value pairs joined by &, URL-encoded; got "
                                 f"{query[:100]!r}") from None
    else:
        pairs = [(str(k), str(v)) for k, v in (query.items() if isinstance(query, Mapping) else query)]
    shaping = sorted({k for k, _ in pairs if k.partition(":")[0] in RESULT_PARAMETERS})
    if shaping:
        raise UnsupportedParameter(f"{', '.join(shaping)}: a result parameter shapes a search's answer, not what "
                                   f"it matches; {what} takes search parameters only")
    blank = [name for name, value in pairs if not value.strip()]
    if blank:
        raise InvalidRequest(f"{what}: {', '.join(blank)} has an empty value, which a search ignores: the query "
                             "would select every resource")
    return pairs


_COMMA = re.compile(r"(?<!\\),")

Summary = Literal["true", "false", "count", "data"]
Total = Literal["none", "estimate", "accurate"]


@dataclass(frozen=True)
class Clause:
    """One parameter occurrence: its values are OR-ed; clauses are AND-ed."""

    param: SearchParam
    modifier: str | None
    values: tuple[SearchValue, ...]

    @cached_property
    def key(self) -> str:
        return f"{self.param.name}:{self.modifier}" if self.modifier else self.param.name

    @cached_property
    def raw(self) -> str:
        """Its values as the query held them (the key of what is compiled of it, more than once a request)."""
        return ",".join(v.raw.replace(",", "\\,") for v in self.values)


@dataclass(frozen=True)
class SortKey:
    param: SearchParam
    descending: bool = False

    @property
    def raw(self) -> str:
        return f"-{self.param.name}" if self.descending else self.param.name


class Directed:
    """A reference walked one way or the other: `param` of `source` refers to `target`; forward from `source` to
    `target`, `reverse` from `target` back to the `source` resources referring to it (an include, a chain's hop)."""

    source: str
    target: str
    reverse: bool

    @property
    def near(self) -> str:
        """The type it starts from (the referring one; reverse: the referred one)."""
        return self.target if self.reverse else self.source

    @property
    def far(self) -> str:
        """The type it reaches."""
        return self.source if self.reverse else self.target


@dataclass(frozen=True)
class Include(Directed):
    """`_include=Source:param[:Target]` (or `_revinclude`): the resources a reference parameter links. Without
    :iterate it starts from the matches; with it, from every resource of its `near` type in the results (matches
    and included ones), again for each level it brings (server.search.include)."""

    source: str  # the resource type that holds the reference
    param: SearchParam
    target: str  # the resource type referred to
    iterate: bool = False
    reverse: bool = False

    @property
    def key(self) -> str:
        name = "_revinclude" if self.reverse else "_include"
        return f"{name}:iterate" if self.iterate else name

    @property
    def raw(self) -> str:
        return f"{self.source}:{self.param.name}:{self.target}"


class Joined(Protocol):
    """A chained or _has parameter (server.search.chains), compiled into found[(JOINED, key, raw)] (search.sql)."""
    @property
    def key(self) -> str: ...
    @property
    def raw(self) -> str: ...


@dataclass(frozen=True)
class SearchRequest(Paged):
    resource_type: str
    clauses: tuple[Clause, ...] = ()
    paging: Paging = field(default_factory=Paging)
    fixed: tuple[Clause, ...] = ()  # bound by the path (an operation), not shown in the query
    sort: tuple[SortKey, ...] = ()
    total: Total = "estimate"  # the default: exact up to the server's threshold (server.engine.searches)
    summary: Summary | None = None
    elements: tuple[str, ...] | None = None
    includes: tuple[Include, ...] = ()
    after: str | None = None  # keyset: continue after this id (next links of searches in _id order)
    ignored: tuple[str, ...] = ()  # unknown parameters, left out (a warning in the Bundle says so)
    joined: tuple[Joined, ...] = ()  # chained and _has parameters (AND-ed with the clauses)

    @property
    def all_clauses(self) -> tuple[Clause, ...]:
        return self.fixed + self.clauses

    @cached_property
    def ranked(self) -> Clause | None:
        """The clause whose type measures each match (near: distance), which orders the results unless _sort."""
        return next((c for c in self.all_clauses if implements(type(c.param.kind), Ranks)), None)

    @cached_property
    def led(self) -> tuple[Clause, IndexOrder] | None:
        """The clause whose index orders the matches (server.search.order), and how: the first clause whose type
        `Orders`, when it has one value and one target its type reads in an index's order (a string parameter's
        prefix on a side table), and neither _sort nor a measure orders them."""
        if self.sort or self.ranked is not None:
            return None
        first = next((c for c in self.all_clauses if implements(type(c.param.kind), Orders)), None)
        if first is None or len(first.values) != 1 or len(first.param.targets) != 1:
            return None
        kind = cast(Orders[Any, Any], first.param.kind)
        order = kind.index_order(first.param.targets[0], first.modifier, first.values[0])
        return None if order is None else (first, order)

    def entry_search(self, measure: Any) -> dict[str, Any]:
        """What a match's entry.search shows of its measure (the `ranked` clause's type decides)."""
        if measure is None:
            return {}
        ranked = self.ranked
        if ranked is None:
            return {}
        return cast(Ranks[Any, Any], ranked.param.kind).entry_search(measure)

    @property
    def counts(self) -> bool:
        return self.total != "none" or self.summary == "count"

    @property
    def keyset(self) -> bool | None:
        """Pages follow the id (descending: False) when that is the whole order, or the `led` index's order and
        the id (True: the position is the last id's, server.search.order.resume_query); None: they go by offset."""
        if self.ranked is None and not self.sort:
            return True
        if len(self.sort) == 1 and self.sort[0].param.name == "_id":
            return not self.sort[0].descending
        return None

    def following(self, last_id: str | None) -> PageAt:
        """The next page: by keyset when the order allows (deep pages cost what the first costs)."""
        after = last_id if self.keyset is not None else None
        return PageAt(self.own_pairs, self.paging.at(self.skip + self.count), after)

    @property
    def after_raw(self) -> str | None:
        return self.after

    @cached_property
    def key(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        """What selects the matches (not how they are paged or shown): the count cache's key."""
        return self.resource_type, tuple((c.key, c.raw) for c in (*self.all_clauses, *self.joined))

    @cached_property
    def _query_string(self) -> str:  # built once per request: a page's links repeat it
        return super().query_string()

    def query_string(self) -> str:
        """The applied parameters, rebuilt from the typed form (the self/next links show exactly these)."""
        return self._query_string

    @cached_property
    def own_pairs(self) -> tuple[tuple[str, str], ...]:
        """The applied parameters but where the page starts (_count, _skip, _after): what every link repeats."""
        pairs = [(c.key, c.raw) for c in (*self.clauses, *self.joined)]
        if self.sort:
            pairs.append(("_sort", ",".join(k.raw for k in self.sort)))
        pairs += [(i.key, i.raw) for i in self.includes]
        if self.total != "estimate":
            pairs.append(("_total", self.total))
        if self.summary:
            pairs.append(("_summary", self.summary))
        if self.elements is not None:
            pairs.append(("_elements", ",".join(self.elements)))
        return tuple(pairs)


def _one_of(name: str, raw: str, allowed: Sequence[str]) -> str:
    if raw not in allowed:
        raise InvalidValue(f"{name} must be one of {', '.join(allowed)}, got {raw!r}")
    return raw


def _sort(provider: ResourceProvider, raw: str) -> tuple[SortKey, ...]:
    keys = []
    for part in raw.split(","):
        name = part.strip().removeprefix("-")
        param = provider.params_by_name.get(name)
        if param is None or param.sort is None:
            sortable = ", ".join(n for n, p in provider.params_by_name.items() if p.sort is not None)
            raise UnsupportedParameter(f"_sort: cannot sort {provider.resource_type} by {name!r}; use {sortable}")
        keys.append(SortKey(param, part.strip().startswith("-")))
    return tuple(keys)


def _include(providers: Mapping[str, Any], resource_type: str, key: str, raw: str) -> Include:
    reverse, iterate = key.startswith("_revinclude"), key.endswith(":iterate")
    source, _, rest = raw.partition(":")
    name, _, target = rest.partition(":")
    provider = providers.get(source)
    param = provider.params_by_name.get(name) if isinstance(provider, ResourceProvider) else None
    targets = param.referenced_types if param is not None else frozenset()
    target = target or (next(iter(targets)) if len(targets) == 1 else "")
    near = target if reverse else source
    if param is None or target not in targets or (not iterate and near != resource_type):
        kind = "_revinclude" if reverse else "_include"
        raise UnsupportedParameter(
            f"{key}={raw!r} is not supported; use {kind}=Type:parameter with a reference parameter of "
            f"{'a type that refers to ' + resource_type if reverse else resource_type}, or {kind}:iterate=Type:"
            f"parameter with one {'referring to' if reverse else 'of'} a type the results hold")
    return Include(source, param, target, iterate, reverse)


def _iterated(includes: Sequence[Include], resource_type: str) -> None:
    """Each :iterate include starts from a type the results hold: the matches', or one another include brings
    (else it could bring nothing: a 400 says so, rather than an answer silently without it)."""
    held = {resource_type}
    grew = True
    while grew:
        grew = False
        for include in includes:
            if include.near in held and include.far not in held:
                held.add(include.far)
                grew = True
    for include in includes:
        if include.near not in held:
            raise UnsupportedParameter(
                f"{include.key}={include.raw!r}: no {include.near} is among the results of this {resource_type} "
                f"search, its matches or what its other _include and _revinclude bring; bring them first (e.g. "
                f"_include={resource_type}:[a reference to {include.near}])")


def parse_search(
    provider: ResourceProvider,
    items: Sequence[tuple[str, str]],
    *,
    limits: FhirApi = FhirApi(),
    strict: bool = False,
    providers: Mapping[str, Any] | None = None,
    max_values: int = MAX_VALUES,
) -> SearchRequest:
    """`max_values`: the OR-ed values one parameter may hold (MAX_VALUES from a client; more from an in-process
    look-up's batch, server.engine.lookup)."""
    paging, rest = parse_paging(items, limits)
    given: dict[str, Any] = {}  # the result parameters, the last of each (the request is made once, at the end)
    clauses: list[Clause] = []
    includes: list[Include] = []
    ignored: list[str] = []
    for key, raw in rest:
        if not key:
            raise InvalidRequest("a query parameter has an empty name")
        if key == "_after":
            given["after"] = _after(provider, raw)
        elif key == "_sort":
            if raw:
                given["sort"] = _sort(provider, raw)
        elif key == "_total":
            given["total"] = _one_of("_total", raw, TOTAL_MODES)
        elif key == "_summary":
            if raw == "text":
                raise UnsupportedParameter("_summary=text is not supported (resources here carry no narrative)")
            given["summary"] = _one_of("_summary", raw, SUMMARY_MODES)
        elif key == "_elements":
            if elements := _elements(raw):
                given["elements"] = elements
        elif key.startswith(("_include:", "_revinclude:")) and key.partition(":")[2] != "iterate":
            raise UnsupportedParameter(f"{key}: the only modifier of _include and _revinclude is :iterate")
        elif key in ("_include", "_include:iterate", "_revinclude", "_revinclude:iterate"):
            for part in raw.split(","):
                includes.append(_include(providers or {provider.resource_type: provider}, provider.resource_type,
                                         key, part.strip()))
        elif (clause := _clause(provider, key, raw, strict and not _result_control(key), max_values)) is not None:
            clauses.append(clause)
        elif key.partition(":")[0] not in provider.params_by_name:
            ignored.append(key)  # lenient handling: left out, and the Bundle says so
    if len(includes) > MAX_INCLUDES:
        raise InvalidRequest(f"too many _include/_revinclude values ({len(includes)}); at most {MAX_INCLUDES}")
    _iterated(includes, provider.resource_type)
    if len(clauses) > MAX_CLAUSES:
        raise InvalidRequest(f"too many search parameters ({len(clauses)}); at most {MAX_CLAUSES}")
    if given.get("summary") == "count":
        paging = replace(paging, count=0)  # the total only: no entries, no links
    request = SearchRequest(provider.resource_type, paging=paging, clauses=tuple(clauses),
                            includes=tuple(dict.fromkeys(includes)), ignored=tuple(ignored), **given)
    if request.after is not None and request.keyset is None:
        raise InvalidRequest("_after continues a search in _id order only (next links carry it); "
                             "use _skip with _sort or near")
    return request


def _after(provider: ResourceProvider, raw: str) -> str:
    if stored_id(provider, raw) is None:
        raise InvalidValue(f"_after must be a {provider.resource_type} id (as in the next link), got {raw!r}")
    return raw


def parse_subset(items: Sequence[tuple[str, str]]) -> tuple[Summary | None, tuple[str, ...] | None]:
    """_summary and _elements on read and vread."""
    summary: Summary | None = None
    elements: tuple[str, ...] | None = None
    for key, raw in items:
        if key == "_summary" and raw:
            if raw in ("count", "text"):
                raise UnsupportedParameter(f"_summary={raw} does not apply to a read")
            summary = _one_of("_summary", raw, SUMMARY_MODES)  # type: ignore[assignment]
        elif key == "_elements" and raw:
            elements = _elements(raw)
    return summary, elements


def _elements(raw: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip() and n.strip() != "resourceType"))


# the search parameters FHIR R4 defines for every resource (the `_` names that filter): unknown to a provider, each
# is refused when strict. Any other `_` name is a result control of some server (fhirpy's `_totalMethod=count` for
# Aidbox), never a filter: ignored with the warning entry, strict or not (fhir.unknown_parameters, README)
FHIR_COMMON_FILTERS = frozenset({"_content", "_filter", "_has", "_id", "_lastUpdated", "_list", "_profile", "_query",
                                 "_security", "_source", "_tag", "_text", "_type"})


def _result_control(key: str) -> bool:
    """A `_` name FHIR does not define as a search parameter (and no chain: `_x.y`): another server's result
    control, never a filter."""
    return key.startswith("_") and key.partition(":")[0] not in FHIR_COMMON_FILTERS and "." not in key


def _clause(provider: ResourceProvider, key: str, raw: str, strict: bool,
            max_values: int = MAX_VALUES) -> Clause | None:
    name, _, modifier = key.partition(":")
    param = provider.params_by_name.get(name)
    if param is None:
        if strict:
            raise UnsupportedParameter(
                f"unknown search parameter {name!r} for {provider.resource_type}; "
                f"supported: {', '.join(sorted(provider.params_by_name))} and the result parameters "
                f"(Prefer: handling=lenient to have it ignored)")
        return None
    if modifier and modifier not in param.modifiers:
        allowed = ", ".join(f":{m}" for m in sorted(param.modifiers)) or "none"
        raise UnsupportedParameter(f"modifier :{modifier} is not supported on {name} ({param.type}); "
                                   f"supported: {allowed}")
    if not raw:
        return None  # an empty value is ignored, as the FHIR search page says
    parts = _COMMA.split(raw) if param.kind.split and modifier != "missing" else [raw]
    if len(parts) > max_values:
        raise InvalidRequest(f"{key}: too many values ({len(parts)}); at most {max_values} per parameter")
    if any(not part.strip() for part in parts):  # a prefix of nothing, say: it would match every resource
        raise InvalidValue(f"{key}={raw[:100]!r}: a value is blank (spaces only, or nothing between commas); "
                           "leave the parameter out to match every resource")
    values = tuple(parse_value(param, modifier or None, part.replace("\\,", ",")) for part in parts)
    return Clause(param, modifier or None, values)


def bind_operation(provider: ResourceProvider, request: SearchRequest, operation: str, resource_id: str) -> SearchRequest:
    op = provider.operations_by_name[operation]
    assert op.param is not None, "only a search operation is bound to a reference parameter"
    param = provider.params_by_name[op.param]
    clause = Clause(param, None, (parse_value(param, None, f"{provider.resource_type}/{resource_id}"),))
    return replace(request, fixed=(clause,))
