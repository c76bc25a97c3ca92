"""A SearchRequest -> SQL: its clauses as one condition on the provider's rows (each value compiled by its
parameter's type, server.params.types: values OR-ed within a clause, clauses AND-ed), then the queries of searches
and reads: a page (of columns or of stored bodies), a count, rows by id, the resources referring to a page, a read
from the history (compiled once: server.storage.prepared)."""
from __future__ import annotations

from collections.abc import Generator, Hashable, Mapping
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Connection,
    FromClause,
    Select,
    and_,
    bindparam,
    case,
    exists,
    false,
    func,
    literal,
    literal_column,
    not_,
    null,
    or_,
    select,
    true,
    union,
)
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import AsBoolean, False_

from server.declare.provider import ResourceProvider
from server.params.ids import coerce_id
from server.search.request import Clause, SearchRequest
from server.params.types.base import (
    CompileContext,
    LooksUp,
    Match,
    MissingValue,
    implements,
)
from server.search.order import MEASURE, SORT_BELOW, measure_column, order_of, ordered, sort_keys
from server.storage.dialects import sorted_matches
from server.search.referred import keys_query, kept_keys, referred, tables_of
from server.params.types.reference import ReferenceTarget, referring

Found = Mapping[Hashable, Any]  # what LooksUp types looked up before the search, by their own keys


def _context(provider: ResourceProvider, clause: Clause, found: Found) -> CompileContext:
    return CompileContext(provider.id_column, provider.source, clause.param.name, found)


def _condition(provider: ResourceProvider, match: Match) -> ColumnElement[bool]:
    return provider.id_column.in_(match) if isinstance(match, Select) else referred(provider.table, match)


REFERRED = "referred"  # found[(REFERRED, clause key, clause raw, position)]: keys of a referred table's rows
JOINED = "joined"  # found[(JOINED, key, raw)]: the condition of a chained or _has parameter (server.search.chains)
WALK = "walk"  # found[WALK]: the search has many matches (WALK_ABOVE): its page walks the id order
MATCHES = "matches"  # found[(MATCHES, clause key, clause raw)]: its values compiled by look_up, reused
WALK_ABOVE = 10_000


def _matches(provider: ResourceProvider, clause: Clause, at: CompileContext) -> list[Match]:
    """What each value matches in each target, but what can match nothing (a token's system another target's) when
    something else can: an arm `0 = 1` left in an OR keeps SQLite from reading the others by their indexes."""
    kind, targets = clause.param.kind, clause.param.targets
    matches = [m for v in clause.values for t in targets if (m := kind.compile(t, clause.modifier, v, at)) is not None]
    return [m for m in matches if not _never(m)] or matches


def _never(match: Match) -> bool:
    if isinstance(match, Select):
        return any(_never(c) for c in match._where_criteria)
    return isinstance(match, False_) or (isinstance(match, AsBoolean) and match.operator is operators.is_true
                                         and isinstance(match.element, False_))


def _any(provider: ResourceProvider, clause: Clause, matches: list[Match], found: Found) -> ColumnElement[bool]:
    """OR of conditions and side-table selects. Mixed, they become one id IN (... UNION ...): each arm uses its
    own index, where an OR holding an IN (subquery) would scan the whole table; a condition on joined tables alone
    becomes id IN (its select), so counts and pages read the provider's table alone. A condition on a referred
    table (server.search.referred) becomes one on the foreign key, with the keys look_up found."""
    direct = [referred(provider.table, m, found.get((REFERRED, clause.key, clause.raw, i)))
              for i, m in enumerate(matches) if not isinstance(m, Select)]
    side = [m for m in matches if isinstance(m, Select)]
    if not side and (len(direct) != 1 or tables_of(direct[0]) <= {provider.table}):
        return or_(*direct) if direct else false()
    if found.get(WALK):  # many matches: the page walks the id order, looking each row up in the side table
        return or_(*direct, *(s.where(s.selected_columns[0] == provider.id_column).exists() for s in side))
    arms = [*([select(provider.id_column).select_from(provider.source).where(or_(*direct))] if direct else []), *side]
    return provider.id_column.in_(arms[0] if len(arms) == 1 else union(*arms))


def _clause(provider: ResourceProvider, clause: Clause, found: Found) -> ColumnElement[bool]:
    kind, targets, at = clause.param.kind, clause.param.targets, _context(provider, clause, found)
    if clause.modifier == "missing":
        value = clause.values[0]
        assert isinstance(value, MissingValue)
        present = or_(*(_condition(provider, kind.present(t, at)) for t in targets))
        return not_(present) if value.missing else present
    matches = found.get((MATCHES, clause.key, clause.raw))
    matched = _any(provider, clause, matches if matches is not None else _matches(provider, clause, at), found)
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


Lookups = Generator[tuple[Select[Any], bool], Any, dict[Hashable, Any]]


def lookups(provider: ResourceProvider, request: SearchRequest, visible: ColumnElement[bool] | None = None) -> Lookups:
    """What the search looks up before its query, one query at a time: yields (query, many) and is sent the first
    column of its first row (None when none), or of every row (`many`); returns what look_up returns. So a thread
    (look_up) and the event loop (server.engine.fast) run the same look-ups."""
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
                    found[key] = yield query.where(*live, *scope).limit(1), False
    for clause in request.all_clauses:  # then the keys of conditions on referred tables (their rows' scope is
        if clause.modifier == "missing":  # the provider's, applied by the search itself)
            continue
        matches = found[(MATCHES, clause.key, clause.raw)] = _matches(provider, clause, _context(provider, clause, found))
        for i, match in enumerate(matches):
            query = None if isinstance(match, Select) else keys_query(provider.table, match)
            if query is not None and (keys := kept_keys((yield query, True))) is not None:
                found[(REFERRED, clause.key, clause.raw, i)] = keys
    return found


def look_up(conn: Connection, provider: ResourceProvider, request: SearchRequest,
            visible: ColumnElement[bool] | None = None) -> dict[Hashable, Any]:
    """What the request's LooksUp types need (the path of a :below value...), looked up before the search query
    among the live rows the caller may see (`visible`): what it may not see is unknown; and the keys of conditions
    on referred tables (server.search.referred)."""
    run = lookups(provider, request, visible)
    try:
        query, many = next(run)
        while True:
            result = conn.execute(query)
            query, many = run.send(result.scalars().all() if many else result.scalar())
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


AFTER = "_after"  # the bind of a keyset page's position: a compiled page serves every position


def _paged(provider: ResourceProvider, request: SearchRequest, query: Select[Any], where: ColumnElement[bool],
           extra_row: int, total: int | None = None) -> Select[Any]:
    """`total`: the search's exact total, when counted: few matches are read by the condition's index and sorted."""
    order = order_of(provider, request)
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
    columns = [*(provider.search_columns or provider.columns), *measure_column(request)]
    where = where if where is not None else where_clause(provider, request, found)
    return _paged(provider, request, select(*columns).select_from(provider.source), where, extra_row, total)


def _from(provider: ResourceProvider, where: ColumnElement[bool], *elements: Any) -> FromClause:
    """The provider's table alone when that is all the condition and the elements use: fewer joins to plan."""
    return provider.table if tables_of(where, *elements) <= {provider.table} else provider.source


def body_page_query(provider: ResourceProvider, request: SearchRequest, found: Found | None = None,
                    extra_row: int = 0, where: ColumnElement[bool] | None = None,
                    total: int | None = None) -> Select[Any]:
    """Ids and stored bodies (NULL where the body cannot serve this page) instead of the columns. The page is
    chosen first (its ids, versions and sort keys: what the condition's indexes and rows give), then the bodies of
    its rows only are looked up: a sort of many matches never carries their bodies."""
    v, spec = provider.versioning, provider.prerendered
    assert v is not None and spec is not None
    where = where if where is not None else where_clause(provider, request, found)
    keys = sort_keys(provider, request)
    flags = [spec.in_search.label("_in_search")] if spec.in_search is not None else []
    sorting = [e.label(f"_key{i}") for i, (e, _) in enumerate(keys[:-1])]
    inner = select(provider.id_column, v.version.label("_version"), *flags, *sorting, *measure_column(request))
    inner = inner.select_from(_from(provider, where, *(e for e, _ in keys[:-1]), *flags, *measure_column(request)))
    page = _paged(provider, request, inner, where, extra_row, total).subquery(PAGE)
    page_id, body = _bodies(provider)
    measure = [literal_column(f"{PAGE}.{MEASURE}")] if request.ranked is not None else []
    order = ordered([*((literal_column(f"{PAGE}._key{i}"), d) for i, (_, d) in enumerate(keys[:-1])), (page_id, None)])
    return select(page_id, body, *measure).select_from(page).order_by(*order)


PAGE = "page"  # the page's subquery, whose columns the bodies' query names


def _bodies(provider: ResourceProvider) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
    """The page's id and its stored body (NULL where it cannot serve a search), as columns of the page's subquery
    (built per statement: what compiles it once is its cache key, server.storage.prepared)."""
    v, spec = provider.versioning, provider.prerendered
    assert v is not None and spec is not None
    page_id = literal_column(f"{PAGE}.{provider.id_column.key}", provider.id_column.type)
    stored = (select(spec.body).where(v.history_id == page_id, v.history_version == literal_column(f"{PAGE}._version"))
              .scalar_subquery())
    body = stored if spec.in_search is None else case((literal_column(f"{PAGE}._in_search"), stored), else_=None)
    return page_id, body.label("_body")


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
