"""A SearchRequest -> SQL: its clauses as one condition on the provider's rows (each value compiled by its
parameter's type, server.search.types: values OR-ed within a clause, clauses AND-ed), then the queries of searches
and reads: a page (of columns or of stored bodies), a count, rows by id, the resources referring to a page, a read
from the history, and statements compiled once (Prepared)."""
from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import (
    ColumnClause,
    ColumnElement,
    Connection,
    CursorResult,
    Dialect,
    Exists,
    FromClause,
    ScalarSelect,
    Select,
    SelectBase,
    and_,
    bindparam,
    case,
    exists,
    false,
    func,
    not_,
    null,
    or_,
    select,
    true,
    union,
)

from server.engine.provider import ResourceProvider
from server.search.ids import coerce_id
from server.search.request import Clause, SearchRequest
from server.search.types.base import (
    CompileContext,
    LooksUp,
    Match,
    MissingValue,
    Ranks,
    implements,
)
from server.search.types.reference import ReferenceTarget, referring

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


MEASURE = "_measure"  # the label of a ranked search's measure (near: the distance in km) in page rows


def _measure(request: SearchRequest) -> ColumnElement[Any] | None:
    ranked = request.ranked
    if ranked is None:
        return None
    return cast(Ranks[Any, Any], ranked.param.kind).measure(ranked.param.targets[0], ranked.values[0])


def _order(provider: ResourceProvider, request: SearchRequest) -> list[Any]:
    measure = _measure(request)
    order: list[Any] = [measure] if measure is not None and not request.sort else []
    for key in request.sort:
        assert key.param.sort is not None
        order.append(key.param.sort.desc().nulls_last() if key.descending else key.param.sort.asc().nulls_last())
    return [*order, provider.id_column]


def _measure_column(request: SearchRequest) -> list[ColumnElement[Any]]:
    measure = _measure(request)
    return [] if measure is None else [measure.label(MEASURE)]


def _paged(provider: ResourceProvider, request: SearchRequest, query: Select[Any], where: ColumnElement[bool],
           extra_row: int) -> Select[Any]:
    query = query.where(where).order_by(*_order(provider, request))
    if request.after is not None and request.keyset is not None:  # keyset: no offset to walk through
        after = coerce_id(provider.id_column, request.after)
        query = query.where(provider.id_column > after if request.keyset else provider.id_column < after)
    elif request.skip:
        query = query.offset(request.skip)
    return query.limit(request.count + extra_row)


def page_query(provider: ResourceProvider, request: SearchRequest, found: Found | None = None,
               extra_row: int = 0, where: ColumnElement[bool] | None = None) -> Select[Any]:
    """`where`: the request's where_clause, when the caller has it already."""
    columns = [*(provider.search_columns or provider.columns), *_measure_column(request)]
    where = where if where is not None else where_clause(provider, request, found)
    return _paged(provider, request, select(*columns).select_from(provider.source), where, extra_row)


def _tables(*elements: Any) -> set[Any]:
    """The tables (and aliases) whose columns the elements use themselves, not inside their subqueries."""
    found: set[Any] = set()
    stack = list(elements)
    while stack:
        element = stack.pop()
        if isinstance(element, SelectBase | ScalarSelect | Exists):
            continue  # a subquery has its own FROM
        table = getattr(element, "table", None)
        if isinstance(element, ColumnClause) and table is not None:
            found.add(table)
        stack.extend(element.get_children())
    return found


def _from(provider: ResourceProvider, *elements: Any) -> FromClause:
    """The provider's table alone when that is all the elements use: fewer joins to plan."""
    return provider.table if _tables(*elements) <= {provider.table} else provider.source


def body_page_query(provider: ResourceProvider, request: SearchRequest, found: Found | None = None,
                    extra_row: int = 0, where: ColumnElement[bool] | None = None) -> Select[Any]:
    """Ids and stored bodies (NULL where the body cannot serve this page) instead of the columns. The body is
    a correlated subquery, looked up for the page's rows only (a join may be planned as a scan from the start)."""
    v, spec = provider.versioning, provider.prerendered
    assert v is not None and spec is not None
    stored = (select(spec.body).where(v.history_id == provider.id_column, v.history_version == v.version)
              .scalar_subquery())
    body = stored if spec.in_search is None else case((spec.in_search, stored), else_=None)
    where = where if where is not None else where_clause(provider, request, found)
    uses = [where, *_order(provider, request), *_measure_column(request),
            *([spec.in_search] if spec.in_search is not None else [])]
    query = select(provider.id_column, body.label("_body"), *_measure_column(request)).select_from(
        _from(provider, *uses))
    return _paged(provider, request, query, where, extra_row)


def body_query(provider: ResourceProvider, scoped: bool = False) -> Select[Any]:
    """A read from the history alone: the newest version's deletion flag, number, instant and stored body
    (NULL: render it), for the id bound as `id`. The writer records every version in the history as it
    writes it, so the newest one is the current one. `scoped`: also the row's partition and path (tenancy),
    for the caller's scope to be checked."""
    v, spec = provider.versioning, provider.prerendered
    assert v is not None and spec is not None
    query = (select(v.history_deleted, v.history_version, v.history_updated, spec.body)
             .where(v.history_id == bindparam("id", type_=provider.id_column.type))
             .order_by(v.history_version.desc()).limit(1))
    tenancy = provider.tenancy
    if not scoped or tenancy is None:
        return query
    partition = tenancy.partition if tenancy.partition is not None else null()  # none: scoped via a reference
    path = tenancy.path if tenancy.path is not None else null()
    return query.add_columns(partition, path).join(provider.table, provider.id_column == v.history_id)


def scope_query(provider: ResourceProvider, stored_id: Any) -> Select[Any]:
    """The partition and path of one row (live or deleted), to check a caller's scope."""
    tenancy = provider.tenancy
    assert tenancy is not None
    path = tenancy.path if tenancy.path is not None else null()
    return select(tenancy.partition, path).select_from(provider.table).where(provider.id_column == stored_id)


def within(provider: ResourceProvider, key: ColumnElement[Any], visible: ColumnElement[bool]) -> ColumnElement[bool]:
    """`key` (an id of the provider held elsewhere: a history row's) names a row the caller may see."""
    return exists().where(provider.id_column == key, visible)


@dataclass(frozen=True)
class Prepared:
    """A statement compiled once for one dialect and run as driver SQL: no building or compiling per request."""

    sql: str
    defaults: Mapping[str, Any]  # the statement's own values (limits...)
    positions: tuple[str, ...] | None  # bind names in order, for positional paramstyles

    @classmethod
    def compile(cls, statement: Select[Any], dialect: Dialect) -> Prepared:
        compiled = statement.compile(dialect=dialect)
        positions = tuple(compiled.positiontup) if compiled.positional and compiled.positiontup else None
        return cls(compiled.string, dict(compiled.params), positions)

    def run(self, conn: Connection, **values: Any) -> CursorResult[Any]:
        merged = {**self.defaults, **values}
        params: Any = tuple(merged[n] for n in self.positions) if self.positions is not None else merged
        return conn.exec_driver_sql(self.sql, params)


def count_query(provider: ResourceProvider, request: SearchRequest, found: Found | None = None,
                where: ColumnElement[bool] | None = None) -> Select[Any]:
    where = where if where is not None else where_clause(provider, request, found)
    return select(func.count()).select_from(_from(provider, where)).where(where)


def read_query(provider: ResourceProvider, stored_ids: list[Any], *, search: bool = False,
               visible: ColumnElement[bool] | None = None) -> Select[Any]:
    """Rows to render: all columns, or those of search pages (`search`); `visible`: the caller's scope."""
    columns = provider.search_columns or provider.columns if search else provider.columns
    scope = [visible] if visible is not None else []
    return select(*columns).select_from(provider.source).where(provider.id_column.in_(stored_ids), *scope)


def referring_query(provider: ResourceProvider, target: ReferenceTarget, stored_ids: list[Any], limit: int,
                    visible: ColumnElement[bool] | None = None) -> Select[Any]:
    """Live resources of `provider` whose reference `target` points at one of `stored_ids` (_revinclude)."""
    live = [provider.versioning.deleted.is_(False)] if provider.versioning else []
    scope = [visible] if visible is not None else []
    return (select(*(provider.search_columns or provider.columns)).select_from(provider.source)
            .where(referring(target, provider.id_column, stored_ids), *live, *scope)
            .order_by(provider.id_column).limit(limit))

