"""Chained parameters (`partof.identifier=`, `partof:Location.name:exact=`, `partof.partof.identifier=`) and reverse
chaining (`_has:Location:partof:type=`, nested), over every reference parameter the providers declare.

A key is parsed into the typed form (`Chained`: its hops, then one ordinary clause on the last type, with every
modifier that parameter supports) before any SQL; then compiled, innermost hop first, into ONE condition on the
searched rows: each hop a subquery answered through the reference's index, each applying the caller's scope on its
own type (and leaving deleted rows out), so a chain never tells whether a resource outside the scope exists.

What cannot be followed is a 400, never ignored (an ignored chain would widen the results): a parameter that is not a
reference, a type no provider serves, a reference that does not lead to the type named, more than MAX_HOPS hops."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import ColumnElement, Connection, Select, and_, or_, select, union

from server.engine.provider import ResourceProvider
from server.errors import InvalidRequest, UnsupportedParameter
from server.search.param import SearchParam
from server.search.referred import foreign_key, referred, tables_of
from server.search.request import MAX_CLAUSES, Clause, SearchRequest, _clause, parse_search
from server.search.sql import JOINED, look_up, where_clause
from server.search.types.reference import ReferenceTarget

MAX_HOPS = 3  # references crossed by one parameter, chained and _has together
HAS = "_has"

Visible = Callable[[ResourceProvider], ColumnElement[bool] | None]  # the caller's scope on a provider's rows


@dataclass(frozen=True)
class Hop:
    """One reference crossed: `param` of `source` refers to `target`. Forward (a chain) the search goes from
    `source` to `target`; reverse (`_has`) from `target` back to the `source` resources referring to it."""

    source: str
    param: SearchParam
    target: str
    reverse: bool = False
    qualified: bool = False  # written `param:Type.` (the type named in the key)

    @property
    def near(self) -> str:
        """The type this hop starts from."""
        return self.target if self.reverse else self.source

    @property
    def far(self) -> str:
        return self.source if self.reverse else self.target

    @property
    def prefix(self) -> str:
        if self.reverse:
            return f"{HAS}:{self.source}:{self.param.name}:"
        return f"{self.param.name}:{self.target}." if self.qualified else f"{self.param.name}."


@dataclass(frozen=True)
class Chained:
    """A chained or _has parameter: the hops in the order the key names them, then a clause on the last type."""

    hops: tuple[Hop, ...]
    clause: Clause

    @property
    def key(self) -> str:
        return "".join(h.prefix for h in self.hops) + self.clause.key

    @property
    def raw(self) -> str:
        return self.clause.raw

    @property
    def types(self) -> tuple[str, ...]:
        """The searched type, then each type a hop reaches."""
        return (self.hops[0].near, *(h.far for h in self.hops))


def is_joined(key: str) -> bool:
    """Whether a query key is a chained or _has parameter (a `.` never appears in other keys)."""
    return key == HAS or key.startswith(HAS + ":") or "." in key


def _served(providers: Mapping[str, Any], rtype: str, key: str) -> ResourceProvider:
    provider = providers.get(rtype)
    if not isinstance(provider, ResourceProvider):
        raise UnsupportedParameter(f"{key}: this server does not search {rtype or 'that type'} by parameters, so "
                                   "it cannot follow a reference there")
    return provider


def _reference(provider: ResourceProvider, name: str, key: str) -> tuple[SearchParam, list[str]]:
    param = provider.params_by_name.get(name)
    if param is None or param.type != "reference":
        references = sorted(n for n, p in provider.params_by_name.items() if p.type == "reference")
        raise UnsupportedParameter(f"{key}: {name!r} is not a reference parameter of {provider.resource_type}, so "
                                   f"it cannot be chained; references: {', '.join(references) or 'none'}")
    return param, sorted({t.resource_type for t in param.targets if isinstance(t, ReferenceTarget)})


def _walk(providers: Mapping[str, Any], rtype: str, key: str, rest: str,
          hops: tuple[Hop, ...]) -> tuple[tuple[Hop, ...], str, str]:
    """(the hops, the last type, the key of its parameter) of `rest`, a key over `rtype`."""
    if len(hops) > MAX_HOPS:
        raise InvalidRequest(f"{key}: a parameter may cross at most {MAX_HOPS} references (chained and _has)")
    if rest == HAS or rest.startswith(HAS + ":"):
        parts = rest.split(":", 3)
        if len(parts) < 4 or not all(parts[1:]):
            raise InvalidRequest(f"{key}: write _has:[type]:[reference parameter]:[parameter]=[value]")
        _, source_type, name, inner = parts
        param, targets = _reference(_served(providers, source_type, key), name, key)
        if rtype not in targets:
            raise UnsupportedParameter(f"{key}: {source_type}.{name} refers to {' or '.join(targets)}, not {rtype}")
        return _walk(providers, source_type, key, inner, (*hops, Hop(source_type, param, rtype, reverse=True)))
    head, dot, inner = rest.partition(".")
    if not dot:
        return hops, rtype, rest
    name, _, qualifier = head.partition(":")
    param, targets = _reference(_served(providers, rtype, key), name, key)
    if not qualifier and len(targets) > 1:
        raise InvalidRequest(f"{key}: {name} refers to {', '.join(targets)}: name one ({name}:[type].)")
    target = qualifier or targets[0]
    if target not in targets:
        raise UnsupportedParameter(f"{key}: {rtype}.{name} refers to {' or '.join(targets)}, not {target}")
    _served(providers, target, key)
    return _walk(providers, target, key, inner, (*hops, Hop(rtype, param, target, qualified=bool(qualifier))))


def parse_chained(providers: Mapping[str, Any], resource_type: str, key: str, raw: str) -> Chained | None:
    """The typed form of a chained or _has parameter (None: an empty value, ignored as any empty parameter)."""
    hops, last, final = _walk(providers, resource_type, key, key, ())
    if not hops or not final:
        raise InvalidRequest(f"{key}: a chain names a reference, a '.', then a parameter of the type it refers to")
    if len(hops) > MAX_HOPS:
        raise InvalidRequest(f"{key}: a parameter may cross at most {MAX_HOPS} references (chained and _has)")
    clause = _clause(providers[last], final, raw, strict=True)
    return None if clause is None else Chained(hops, clause)


def parse_request(provider: ResourceProvider, items: Sequence[tuple[str, str]], *, providers: Mapping[str, Any],
                  default_count: int, max_count: int, strict: bool = False) -> SearchRequest:
    """parse_search, with the chained and _has parameters in `joined`."""
    joined: list[Chained] = []
    plain: list[tuple[str, str]] = []
    for key, raw in items:
        if is_joined(key):
            chained = parse_chained(providers, provider.resource_type, key, raw)
            if chained is not None:
                joined.append(chained)
        else:
            plain.append((key, raw))
    request = parse_search(provider, plain, default_count=default_count, max_count=max_count, strict=strict,
                           providers=providers)
    if len(request.clauses) + len(joined) > MAX_CLAUSES:
        raise InvalidRequest(f"too many search parameters ({len(request.clauses) + len(joined)}); "
                             f"at most {MAX_CLAUSES}")
    unique = {(j.key, j.raw): j for j in joined}  # a parameter sent twice is applied once
    return replace(request, joined=tuple(unique.values())) if joined else request


# ------------------------------------------------------------------ SQL


def _rows(provider: ResourceProvider, cond: ColumnElement[bool], column: ColumnElement[Any]) -> Select[Any]:
    """`column` of the provider's rows meeting `cond`, from its table alone when that is all they use. Never
    correlated: the same table may be searched around it (partof.partof...), the inner one names its own rows."""
    source = provider.table if tables_of(cond, column) <= {provider.table} else provider.source
    return select(column).select_from(source).where(cond).correlate(None)


def _targets(hop: Hop) -> list[ReferenceTarget]:
    return [t for t in hop.param.targets if isinstance(t, ReferenceTarget) and t.resource_type == hop.target]


def _holding(provider: ResourceProvider, cond: ColumnElement[bool]) -> ColumnElement[bool]:
    """A condition on a table the provider's rows are joined with, as one on the provider's rows: through the
    foreign key to it (its index), else through the joined rows."""
    if foreign_key(provider.table, cond) is not None:  # type: ignore[arg-type]
        return referred(provider.table, cond)  # type: ignore[arg-type]
    return provider.id_column.in_(select(provider.id_column).select_from(provider.source).where(cond).correlate(None))


def _forward(source: ResourceProvider, hop: Hop, target: ResourceProvider,
             cond: ColumnElement[bool]) -> ColumnElement[bool]:
    """The rows of `source` whose reference points at a row of `target` meeting `cond`."""
    ids = _rows(target, cond, target.id_column)
    arms: list[ColumnElement[bool]] = []
    for t in _targets(hop):
        if t.through is not None:
            arms.append(source.id_column.in_(t.through.ids(t.column.in_(ids)).correlate(None)))
        elif getattr(t.column, "table", None) is source.table:
            arms.append(t.column.in_(ids))
        else:  # held in a joined table
            arms.append(_holding(source, t.column.in_(ids)))
    return or_(*arms)


def _reverse(searched: ResourceProvider, hop: Hop, source: ResourceProvider,
             cond: ColumnElement[bool]) -> ColumnElement[bool]:
    """The rows of `searched` that a row of `source` meeting `cond` refers to."""
    refs: list[Select[Any]] = []
    for t in _targets(hop):
        if t.through is not None:
            held = select(t.column).select_from(t.through.table).where(
                t.through.key.in_(_rows(source, cond, source.id_column)), t.column.is_not(None)).correlate(None)
            refs.append(held if t.through.where is None else held.where(t.through.where))
        else:
            refs.append(_rows(source, and_(cond, t.column.is_not(None)), t.column))
    return searched.id_column.in_(refs[0] if len(refs) == 1 else union(*refs))


def _own(provider: ResourceProvider, visible: ColumnElement[bool] | None) -> list[ColumnElement[bool]]:
    """What every hop applies on its type: live rows (when versioned), the caller's scope."""
    live = [provider.versioning.deleted.is_(False)] if provider.versioning is not None else []
    return [*live, *([visible] if visible is not None else [])]


def compile_chained(conn: Connection, providers: Mapping[str, Any], chained: Chained,
                    visible: Visible) -> ColumnElement[bool]:
    """The condition on the searched rows (their own scope is the search's). The last type's clause is compiled
    as the same parameter is unchained (with the look-ups its type needs, among the rows the caller sees)."""
    types = [providers[t] for t in chained.types]
    scopes = {p.resource_type: visible(p) for p in types[1:]}
    last = types[-1]
    sub = SearchRequest(last.resource_type, clauses=(chained.clause,))
    cond = where_clause(last, sub, look_up(conn, last, sub, scopes[last.resource_type]), scopes[last.resource_type])
    for i in reversed(range(len(chained.hops))):
        hop, near, far = chained.hops[i], types[i], types[i + 1]
        cond = _reverse(near, hop, far, cond) if hop.reverse else _forward(near, hop, far, cond)
        if i:
            cond = and_(cond, *_own(near, scopes[near.resource_type]))
    return cond


def compile_joined(conn: Connection, providers: Mapping[str, Any], request: SearchRequest,
                   visible: Visible) -> dict[Any, ColumnElement[bool]]:
    """found[(JOINED, key, raw)] of every chained and _has parameter of the request (server.search.sql)."""
    return {(JOINED, j.key, j.raw): compile_chained(conn, providers, j, visible)
            for j in request.joined if isinstance(j, Chained)}


def crossed(providers: Mapping[str, Any], request: SearchRequest) -> list[ResourceProvider]:
    """The other types the request's chained and _has parameters search (their data decides its matches too)."""
    names = dict.fromkeys(t for j in request.joined if isinstance(j, Chained) for t in j.types[1:])
    return [providers[n] for n in names if n != request.resource_type]
