"""A SearchRequest's clauses -> one SQL condition on the provider's rows, each value compiled by its parameter's
type (server.search.types): values OR-ed within a clause, clauses AND-ed."""
from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, cast

from sqlalchemy import ColumnElement, Connection, Select, and_, false, not_, or_, select, true, union

from server.engine.provider import ResourceProvider
from server.search.request import Clause, SearchRequest
from server.search.types.base import CompileContext, LooksUp, Match, MissingValue, implements

Found = Mapping[Hashable, Any]  # what LooksUp types looked up before the search, by their own keys


def _context(provider: ResourceProvider, clause: Clause, found: Found) -> CompileContext:
    return CompileContext(provider.id_column, provider.source, clause.param.name, found)


def _condition(provider: ResourceProvider, match: Match) -> ColumnElement[bool]:
    return provider.id_column.in_(match) if isinstance(match, Select) else match


def _any(provider: ResourceProvider, matches: list[Match]) -> ColumnElement[bool]:
    """OR of conditions and side-table selects. Mixed, they become one id IN (... UNION ...): each arm uses its
    own index, where an OR holding an IN (subquery) would scan the whole table."""
    direct = [m for m in matches if not isinstance(m, Select)]
    side = [m for m in matches if isinstance(m, Select)]
    if not side:
        return or_(*direct) if direct else false()
    if not direct and len(side) == 1:
        return provider.id_column.in_(side[0])
    arms = [select(provider.id_column).select_from(provider.source).where(or_(*direct))] if direct else []
    return provider.id_column.in_(union(*arms, *side))


def _clause(provider: ResourceProvider, clause: Clause, found: Found) -> ColumnElement[bool]:
    kind, targets, at = clause.param.kind, clause.param.targets, _context(provider, clause, found)
    if clause.modifier == "missing":
        value = clause.values[0]
        assert isinstance(value, MissingValue)
        present = or_(*(_condition(provider, kind.present(t, at)) for t in targets))
        return not_(present) if value.missing else present
    matches = [m for v in clause.values for t in targets if (m := kind.compile(t, clause.modifier, v, at)) is not None]
    matched = _any(provider, matches)
    if clause.modifier == "not":  # resources with no matching value, including those with no value at all
        return provider.id_column.not_in(select(provider.id_column).select_from(provider.source).where(matched))
    return matched


def where_clause(provider: ResourceProvider, request: SearchRequest, found: Found | None = None,
                 visible: ColumnElement[bool] | None = None) -> ColumnElement[bool]:
    """`found`: look_up's result; `visible`: the caller's scope (server.access.scope.Visibility.clause)."""
    live = [provider.versioning.deleted.is_(False)] if provider.versioning else []
    scope = [visible] if visible is not None else []
    return and_(true(), *live, *scope, *(_clause(provider, c, found or {}) for c in request.all_clauses))


def look_up(conn: Connection, provider: ResourceProvider, request: SearchRequest,
            visible: ColumnElement[bool] | None = None) -> dict[Hashable, Any]:
    """What the request's LooksUp types need (the path of a :below value...), looked up before the search query
    among the live rows the caller may see (`visible`): what it may not see is unknown."""
    live = [provider.versioning.deleted.is_(False)] if provider.versioning else []
    scope = [visible] if visible is not None else []
    found: dict[Hashable, Any] = {}
    for clause in request.all_clauses:
        if not implements(type(clause.param.kind), LooksUp):
            continue
        kind = cast(LooksUp[Any, Any], clause.param.kind)
        at = _context(provider, clause, found)
        for target in clause.param.targets:
            for value in clause.values:
                for key, query in kind.lookups(target, clause.modifier, value, at):
                    found[key] = conn.execute(query.where(*live, *scope).limit(1)).scalar()
    return found
