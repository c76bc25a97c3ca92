"""A SearchRequest -> SQL: its clauses as one condition on the provider's rows (each value compiled by its
parameter's type, server.search.types: values OR-ed within a clause, clauses AND-ed), then the queries of searches
and reads: a page (of columns or of stored bodies), a count, rows by id, the resources referring to a page, a read
from the history (compiled once: server.storage.prepared)."""
from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Connection,
    FromClause,
    FunctionElement,
    Select,
    and_,
    bindparam,
    case,
    exists,
    false,
    func,
    literal,
    not_,
    null,
    or_,
    select,
    true,
    union,
)

from sqlalchemy.ext.compiler import compiles

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
from server.search.referred import referred, referred_keys, tables_of
from server.search.types.reference import ReferenceTarget, referring

Found = Mapping[Hashable, Any]  # what LooksUp types looked up before the search, by their own keys


def _context(provider: ResourceProvider, clause: Clause, found: Found) -> CompileContext:
    return CompileContext(provider.id_column, provider.source, clause.param.name, found)


def _condition(provider: ResourceProvider, match: Match) -> ColumnElement[bool]:
    return provider.id_column.in_(match) if isinstance(match, Select) else referred(provider.table, match)


REFERRED = "referred"  # found[(REFERRED, clause key, clause raw, position)]: keys of a referred table's rows
JOINED = "joined"  # found[(JOINED, key, raw)]: the condition of a chained or _has parameter (server.search.chains)
WALK = "walk"  # found[WALK]: the search has many matches (WALK_ABOVE): its page walks the id order
WALK_ABOVE = 10_000


def _matches(provider: ResourceProvider, clause: Clause, at: CompileContext) -> list[Match]:
    kind, targets = clause.param.kind, clause.param.targets
    return [m for v in clause.values for t in targets if (m := kind.compile(t, clause.modifier, v, at)) is not None]


def _any(provider: ResourceProvider, clause: Clause, matches: list[Match], found: Found) -> ColumnElement[bool]:
    """OR of conditions and side-table selects. Mixed, they become one id IN (... UNION ...): each arm uses its
    own index, where an OR holding an IN (subquery) would scan the whole table. A condition on a referred table
    (server.search.referred) becomes one on the foreign key, with the keys look_up found."""
    direct = [referred(provider.table, m, found.get((REFERRED, clause.key, clause.raw, i)))
              for i, m in enumerate(matches) if not isinstance(m, Select)]
    side = [m for m in matches if isinstance(m, Select)]
    if not side:
        return or_(*direct) if direct else false()
    if found.get(WALK):  # many matches: the page walks the id order, looking each row up in the side table
        return or_(*direct, *(s.where(s.selected_columns[0] == provider.id_column).exists() for s in side))
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
    matched = _any(provider, clause, _matches(provider, clause, at), found)
    if clause.modifier == "not":  # resources with no matching value, including those with no value at all
        return provider.id_column.not_in(select(provider.id_column).select_from(provider.source).where(matched))
    return matched


def where_clause(provider: ResourceProvider, request: SearchRequest, found: Found | None = None,
                 visible: ColumnElement[bool] | None = None) -> ColumnElement[bool]:
    """`found`: look_up's result (and the conditions of the request's chained parameters, compiled before);
    `visible`: the caller's scope (server.access.scope.Visibility.clause)."""
    live = [provider.versioning.deleted.is_(False)] if provider.versioning else []
    scope = [visible] if visible is not None else []
    joined = [(found or {})[(JOINED, j.key, j.raw)] for j in request.joined]  # KeyError: not compiled
    return and_(true(), *live, *scope, *(_clause(provider, c, found or {}) for c in request.all_clauses), *joined)


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
    for clause in request.all_clauses:  # then the keys of conditions on referred tables (their rows' scope is
        if clause.modifier == "missing":  # the provider's, applied by the search itself)
            continue
        for i, match in enumerate(_matches(provider, clause, _context(provider, clause, found))):
            keys = None if isinstance(match, Select) else referred_keys(conn, provider.table, match)
            if keys is not None:
                found[(REFERRED, clause.key, clause.raw, i)] = keys
    return found


MEASURE = "_measure"  # the label of a ranked search's measure (near: the distance in km) in page rows


def _measure(request: SearchRequest) -> ColumnElement[Any] | None:
    ranked = request.ranked
    if ranked is None:
        return None
    return cast(Ranks[Any, Any], ranked.param.kind).measure(ranked.param.targets[0], ranked.values[0])


def _sort_keys(provider: ResourceProvider, request: SearchRequest) -> list[tuple[ColumnElement[Any], bool | None]]:
    """What orders the matches, in turn: (expression, descending; None: the measure, ascending, nulls as they
    come), the id last."""
    measure = _measure(request)
    keys: list[tuple[ColumnElement[Any], bool | None]] = [(measure, None)] if measure is not None and not request.sort \
        else []
    for key in request.sort:
        assert key.param.sort is not None
        keys.append((key.param.sort, key.descending))
    return [*keys, (provider.id_column, None)]


def _ordered(keys: list[tuple[ColumnElement[Any], bool | None]]) -> list[Any]:
    return [e if d is None else e.desc().nulls_last() if d else e.asc().nulls_last() for e, d in keys]


def _order(provider: ResourceProvider, request: SearchRequest) -> list[Any]:
    return _ordered(_sort_keys(provider, request))


def _measure_column(request: SearchRequest) -> list[ColumnElement[Any]]:
    measure = _measure(request)
    return [] if measure is None else [measure.label(MEASURE)]


class sorted_matches(FunctionElement[Any]):
    """The id as an ORDER BY key that SQLite's planner cannot serve by walking the table in id order: it then
    reads the matches from the index of the condition and sorts them (SQLite plans without statistics of value
    ranges, and would walk the whole table for a page of a few matches). Other databases: the id itself."""

    inherit_cache = True
    name = "sorted_matches"


@compiles(sorted_matches)
def _sorted_matches(element: sorted_matches, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.clauses, **kw))


@compiles(sorted_matches, "sqlite")
def _sorted_matches_sqlite(element: sorted_matches, compiler: Any, **kw: Any) -> str:
    return "+" + str(compiler.process(element.clauses, **kw))


SORT_BELOW = 1000  # a search known to match at most this many rows sorts them (sorted_matches)
AFTER = "_after"  # the bind of a keyset page's position: a compiled page serves every position


def _paged(provider: ResourceProvider, request: SearchRequest, query: Select[Any], where: ColumnElement[bool],
           extra_row: int, total: int | None = None) -> Select[Any]:
    """`total`: the search's exact total, when counted: few matches are read by the condition's index and sorted."""
    order = _order(provider, request)
    if total is not None and total <= SORT_BELOW and not request.sort and request.ranked is None:
        order = [sorted_matches(provider.id_column)]
    query = query.where(where).order_by(*order)
    if request.after is not None and request.keyset is not None:  # keyset: no offset to walk through
        after = bindparam(AFTER, coerce_id(provider.id_column, request.after), type_=provider.id_column.type)
        query = query.where(provider.id_column > after if request.keyset else provider.id_column < after)
    elif request.skip:
        query = query.offset(literal(request.skip, literal_execute=True))
    # constants, not parameters: a planner that does not know the limit may not find the page by an index
    return query.limit(literal(request.count + extra_row, literal_execute=True))


def page_query(provider: ResourceProvider, request: SearchRequest, found: Found | None = None,
               extra_row: int = 0, where: ColumnElement[bool] | None = None, total: int | None = None) -> Select[Any]:
    """`where`: the request's where_clause, when the caller has it already; `total`: its count, when known."""
    columns = [*(provider.search_columns or provider.columns), *_measure_column(request)]
    where = where if where is not None else where_clause(provider, request, found)
    return _paged(provider, request, select(*columns).select_from(provider.source), where, extra_row, total)


def _from(provider: ResourceProvider, *elements: Any) -> FromClause:
    """The provider's table alone when that is all the elements use: fewer joins to plan."""
    return provider.table if tables_of(*elements) <= {provider.table} else provider.source


def body_page_query(provider: ResourceProvider, request: SearchRequest, found: Found | None = None,
                    extra_row: int = 0, where: ColumnElement[bool] | None = None,
                    total: int | None = None) -> Select[Any]:
    """Ids and stored bodies (NULL where the body cannot serve this page) instead of the columns. The page is
    chosen first (its ids, versions and sort keys: what the condition's indexes and rows give), then the bodies of
    its rows only are looked up: a sort of many matches never carries their bodies."""
    v, spec = provider.versioning, provider.prerendered
    assert v is not None and spec is not None
    where = where if where is not None else where_clause(provider, request, found)
    keys = _sort_keys(provider, request)
    flags = [spec.in_search.label("_in_search")] if spec.in_search is not None else []
    sorting = [e.label(f"_key{i}") for i, (e, _) in enumerate(keys[:-1])]
    inner = select(provider.id_column, v.version.label("_version"), *flags, *sorting, *_measure_column(request))
    inner = inner.select_from(_from(provider, where, *(e for e, _ in keys), *flags, *_measure_column(request)))
    page = _paged(provider, request, inner, where, extra_row, total).subquery("page")
    page_id = page.c[provider.id_column.key]
    stored = (select(spec.body).where(v.history_id == page_id, v.history_version == page.c["_version"])
              .scalar_subquery())
    body = stored if spec.in_search is None else case((page.c["_in_search"], stored), else_=None)
    measure = [page.c[MEASURE]] if request.ranked is not None else []
    order = _ordered([*((page.c[f"_key{i}"], d) for i, (_, d) in enumerate(keys[:-1])), (page_id, None)])
    return select(page_id, body.label("_body"), *measure).select_from(page).order_by(*order)


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
                    visible: ColumnElement[bool] | None = None, keys: Any = None) -> Select[Any]:
    """Live resources of `provider` whose reference `target` points at one of `stored_ids` (_revinclude); `keys`:
    for a reference held in a referred table, the keys of its rows, looked up before (server.search.include)."""
    live = [provider.versioning.deleted.is_(False)] if provider.versioning else []
    scope = [visible] if visible is not None else []
    cond = referring(target, provider.id_column, stored_ids)
    return (select(*(provider.search_columns or provider.columns)).select_from(provider.source)
            .where(cond if keys is None else referred(provider.table, cond, keys), *live, *scope)  # type: ignore
            .order_by(provider.id_column).limit(limit))
