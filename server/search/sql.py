"""SearchRequest -> SQLAlchemy Core: one page query, one count query."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnClause,
    ColumnElement,
    Exists,
    FromClause,
    ScalarSelect,
    SelectBase,
    CursorResult,
    Dialect,
    bindparam,
    Connection,
    Select,
    and_,
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

from server.engine.provider import (
    DateTarget,
    NearTarget,
    ReferenceTarget,
    ResourceProvider,
    StringTarget,
    Target,
    Through,
    TokenTarget,
)
from server.search.dates import DateRange
from server.search.request import Clause, SearchRequest
from server.search.ids import coerce_id
from server.search.values import (
    NearValue,
    ReferenceValue,
    SearchValue,
    StringValue,
    TextValue,
    TokenValue,
)

EARTH_RADIUS_KM = 6371.0088
Paths = Mapping[tuple[str, str], str | None]  # (param name, referenced id) -> materialized path


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _starts_with(column: ColumnElement[Any], text: str) -> ColumnElement[bool]:
    return column.like(f"{_like_escape(text)}%", escape="\\")


def _via(through: Through | None, cond: ColumnElement[bool]) -> ColumnElement[bool] | Select[Any]:
    """The condition itself, or (on a side table) the select of the ids whose side rows meet it."""
    if through is None:
        return cond
    inner = select(through.key).where(cond)
    return inner if through.where is None else inner.where(through.where)


def _through(provider: ResourceProvider, through: Through | None, cond: ColumnElement[bool]) -> ColumnElement[bool]:
    found = _via(through, cond)
    return provider.id_column.in_(found) if isinstance(found, Select) else found


def _string(target: StringTarget, modifier: str | None, value: StringValue) -> ColumnElement[bool]:
    if modifier == "exact":
        return target.exact == value.raw
    if modifier == "contains":
        return target.normalized.like(f"%{_like_escape(value.normalized)}%", escape="\\")
    return _starts_with(target.normalized, value.normalized)


def _token(target: TokenTarget, value: TokenValue) -> ColumnElement[bool]:
    if value.system is None:
        system_cond: ColumnElement[bool] = true()
    elif target.system is None:
        system_cond = true() if value.system == "" else false()
    elif isinstance(target.system, str):
        system_cond = true() if target.system == value.system else false()
    else:
        system_cond = target.system == literal(value.system)
    if value.code is None:
        return and_(system_cond, target.code.is_not(None))
    if target.codes is not None:
        stored = target.codes.get(value.code)
        code_cond = target.code.in_(stored) if stored else false()
    else:
        code = value.code[len(target.prefix):] if target.prefix and value.code.startswith(target.prefix) else value.code
        typed = coerce_id(target.code, code)
        code_cond = false() if typed is None else target.code == typed
    return and_(system_cond, code_cond)


def _reference(provider: ResourceProvider, target: ReferenceTarget, modifier: str | None, value: ReferenceValue,
               paths: Paths, param: str) -> ColumnElement[bool]:
    if value.resource_type != target.resource_type:
        return false()
    if modifier in ("below", "above") and target.path is not None:
        path = paths.get((param, value.id))
        if path is None:
            return false()
        if modifier == "below":  # strictly inside the subtree: paths that extend this one
            return and_(target.path > path, target.path < path[:-1] + "0")
        ancestors = [coerce_id(provider.id_column, part) for part in path.strip("/").split("/")[:-1]]
        return provider.id_column.in_([a for a in ancestors if a is not None]) if ancestors else false()
    stored = coerce_id(target.column, value.id)
    return false() if stored is None else target.column == stored


def _date(target: DateTarget, value: DateRange) -> ColumnElement[bool]:
    column, lower, upper = target.column, value.lower, value.upper
    return {
        "eq": and_(column >= lower, column < upper),
        "ne": or_(column < lower, column >= upper),
        "gt": column >= upper,
        "sa": column >= upper,
        "ge": column >= lower,
        "lt": column < lower,
        "eb": column < lower,
        "le": column < upper,
    }[value.prefix]


def distance_km(target: NearTarget, value: NearValue) -> ColumnElement[Any]:
    """Great-circle (haversine) distance in km from the value's point to the target's position."""
    lat1, lon1 = func.radians(literal(value.latitude)), func.radians(literal(value.longitude))
    lat2, lon2 = func.radians(target.latitude), func.radians(target.longitude)
    a = func.power(func.sin((lat2 - lat1) / 2), 2) + \
        func.cos(lat1) * func.cos(lat2) * func.power(func.sin((lon2 - lon1) / 2), 2)
    return 2 * EARTH_RADIUS_KM * func.asin(func.sqrt(case((a > 1.0, 1.0), else_=a)))


def _near(target: NearTarget, value: NearValue) -> ColumnElement[bool]:
    dlat = value.km / 111.0
    dlon = value.km / max(1e-6, 111.320 * math.cos(math.radians(value.latitude)))
    box = and_(target.latitude.is_not(None), target.longitude.is_not(None),
               target.latitude.between(value.latitude - dlat, value.latitude + dlat))
    if dlon < 180:
        box = and_(box, target.longitude.between(value.longitude - dlon, value.longitude + dlon))
    return and_(box, distance_km(target, value) <= value.km)


def _present(provider: ResourceProvider, target: Target) -> ColumnElement[bool]:
    if isinstance(target, StringTarget):
        return _through(provider, target.through, target.exact.is_not(None))
    if isinstance(target, TokenTarget):
        return _through(provider, target.through, target.code.is_not(None))
    if isinstance(target, ReferenceTarget | DateTarget):
        return target.column.is_not(None)
    return and_(target.latitude.is_not(None), target.longitude.is_not(None))


def _match(provider: ResourceProvider, clause: Clause, target: Target, value: SearchValue,
           paths: Paths) -> ColumnElement[bool] | Select[Any] | None:
    if isinstance(value, TextValue) and isinstance(target, TokenTarget):
        if target.text is None:
            return None
        return _via(target.through, _starts_with(func.lower(target.text), value.raw.lower()))
    if isinstance(target, StringTarget) and isinstance(value, StringValue):
        return _via(target.through, _string(target, clause.modifier, value))
    if isinstance(target, TokenTarget) and isinstance(value, TokenValue):
        return _via(target.through, _token(target, value))
    if isinstance(target, ReferenceTarget) and isinstance(value, ReferenceValue):
        return _reference(provider, target, clause.modifier, value, paths, clause.param.name)
    if isinstance(target, DateTarget) and isinstance(value, DateRange):
        return _date(target, value)
    if isinstance(target, NearTarget) and isinstance(value, NearValue):
        return _near(target, value)
    return None


def _any(provider: ResourceProvider, matches: list[ColumnElement[bool] | Select[Any]]) -> ColumnElement[bool]:
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


def _clause(provider: ResourceProvider, clause: Clause, paths: Paths) -> ColumnElement[bool]:
    targets = clause.param.targets
    if clause.modifier == "missing":
        present = or_(*(_present(provider, t) for t in targets))
        return not_(present) if clause.values[0].missing else present  # type: ignore[union-attr]
    matches = [m for v in clause.values for t in targets if (m := _match(provider, clause, t, v, paths)) is not None]
    matched = _any(provider, matches)
    if clause.modifier == "not":  # resources with no matching value, including those with no value at all
        return provider.id_column.not_in(select(provider.id_column).select_from(provider.source).where(matched))
    return matched


def where_clause(provider: ResourceProvider, request: SearchRequest, paths: Paths | None = None,
                 visible: ColumnElement[bool] | None = None) -> ColumnElement[bool]:
    """`visible`: the caller's scope (server.access.scope.Visibility.condition), when it restricts anything."""
    live = [provider.versioning.deleted.is_(False)] if provider.versioning else []
    scope = [visible] if visible is not None else []
    return and_(true(), *live, *scope, *(_clause(provider, c, paths or {}) for c in request.all_clauses))


def resolve_paths(conn: Connection, provider: ResourceProvider, request: SearchRequest,
                  visible: ColumnElement[bool] | None = None) -> dict[tuple[str, str], str | None]:
    """The materialized paths that :below / :above values need, looked up before the search query; a value
    the caller may not see (`visible`) is unknown."""
    paths: dict[tuple[str, str], str | None] = {}
    for clause in request.all_clauses:
        if clause.modifier not in ("below", "above"):
            continue
        for target in clause.param.targets:
            if not isinstance(target, ReferenceTarget) or target.path is None:
                continue
            for value in clause.values:
                assert isinstance(value, ReferenceValue)
                stored = coerce_id(target.column, value.id)
                table = target.path.table
                id_column = table.c[provider.id_column.key]
                live = [table.c[provider.versioning.deleted.key].is_(False)] if provider.versioning else []
                if visible is not None:
                    live.append(visible)
                paths[(clause.param.name, value.id)] = None if stored is None else conn.execute(
                    select(target.path).where(id_column == stored, *live)).scalar()
    return paths


def _order(provider: ResourceProvider, request: SearchRequest) -> list[Any]:
    order: list[Any] = []
    near = request.near
    if not request.sort and near is not None:
        target = near.param.targets[0]
        assert isinstance(target, NearTarget) and isinstance(near.values[0], NearValue)
        order.append(distance_km(target, near.values[0]))
    for key in request.sort:
        assert key.param.sort is not None
        order.append(key.param.sort.desc().nulls_last() if key.descending else key.param.sort.asc().nulls_last())
    return [*order, provider.id_column]


def _distance_column(request: SearchRequest) -> list[ColumnElement[Any]]:
    near = request.near
    if near is None:
        return []
    target = near.param.targets[0]
    assert isinstance(target, NearTarget) and isinstance(near.values[0], NearValue)
    return [distance_km(target, near.values[0]).label("_distance_km")]


def _paged(provider: ResourceProvider, request: SearchRequest, query: Select[Any], where: ColumnElement[bool],
           extra_row: int) -> Select[Any]:
    query = query.where(where).order_by(*_order(provider, request))
    if request.after is not None and request.keyset is not None:  # keyset: no offset to walk through
        after = coerce_id(provider.id_column, request.after)
        query = query.where(provider.id_column > after if request.keyset else provider.id_column < after)
    elif request.skip:
        query = query.offset(request.skip)
    return query.limit(request.count + extra_row)


def page_query(provider: ResourceProvider, request: SearchRequest, paths: Paths | None = None,
               extra_row: int = 0, where: ColumnElement[bool] | None = None) -> Select[Any]:
    """`where`: the request's where_clause, when the caller has it already."""
    columns = [*(provider.search_columns or provider.columns), *_distance_column(request)]
    where = where if where is not None else where_clause(provider, request, paths)
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


def body_page_query(provider: ResourceProvider, request: SearchRequest, paths: Paths | None = None,
                    extra_row: int = 0, where: ColumnElement[bool] | None = None) -> Select[Any]:
    """Ids and stored bodies (NULL where the body cannot serve this page) instead of the columns. The body is
    a correlated subquery, looked up for the page's rows only (a join may be planned as a scan from the start)."""
    v, spec = provider.versioning, provider.prerendered
    assert v is not None and spec is not None
    stored = (select(spec.body).where(v.history_id == provider.id_column, v.history_version == v.version)
              .scalar_subquery())
    body = stored if spec.in_search is None else case((spec.in_search, stored), else_=None)
    where = where if where is not None else where_clause(provider, request, paths)
    uses = [where, *_order(provider, request), *_distance_column(request),
            *([spec.in_search] if spec.in_search is not None else [])]
    query = select(provider.id_column, body.label("_body"), *_distance_column(request)).select_from(
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
    path = tenancy.path if tenancy.path is not None else null()
    return query.add_columns(tenancy.partition, path).join(provider.table, provider.id_column == v.history_id)


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


def count_query(provider: ResourceProvider, request: SearchRequest, paths: Paths | None = None,
                where: ColumnElement[bool] | None = None) -> Select[Any]:
    where = where if where is not None else where_clause(provider, request, paths)
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
            .where(target.column.in_(stored_ids), *live, *scope).order_by(provider.id_column).limit(limit))

