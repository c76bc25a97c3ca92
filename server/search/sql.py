"""SearchRequest -> SQLAlchemy Core: one page query, one count query."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    and_,
    case,
    false,
    func,
    literal,
    not_,
    or_,
    select,
    true,
)

from server.provider import (
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
from server.search.values import (
    FHIR_ID,
    NearValue,
    ReferenceValue,
    SearchValue,
    StringValue,
    TextValue,
    TokenValue,
)

EARTH_RADIUS_KM = 6371.0088
Paths = Mapping[tuple[str, str], str | None]  # (param name, referenced id) -> materialized path


def coerce_id(column: ColumnElement[Any], raw: str) -> Any | None:
    """A value as the column stores it, or None when it cannot be one (so nothing matches)."""
    try:
        python_type = column.type.python_type
    except NotImplementedError:
        return raw
    if python_type is int:
        return int(raw) if raw.isascii() and raw.lstrip("-").isdigit() and len(raw) < 19 else None
    return raw


def stored_id(provider: ResourceProvider, rid: str) -> Any | None:
    """The provider's stored id for a FHIR id, or None when `rid` cannot be one of its ids."""
    return coerce_id(provider.id_column, rid) if FHIR_ID.fullmatch(rid) else None


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _starts_with(column: ColumnElement[Any], text: str) -> ColumnElement[bool]:
    return column.like(f"{_like_escape(text)}%", escape="\\")


def _through(provider: ResourceProvider, through: Through | None, cond: ColumnElement[bool]) -> ColumnElement[bool]:
    if through is None:
        return cond
    inner = select(through.key).where(cond)
    if through.where is not None:
        inner = inner.where(through.where)
    return provider.id_column.in_(inner)


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
           paths: Paths) -> ColumnElement[bool] | None:
    if isinstance(value, TextValue) and isinstance(target, TokenTarget):
        if target.text is None:
            return None
        return _through(provider, target.through, _starts_with(func.lower(target.text), value.raw.lower()))
    if isinstance(target, StringTarget) and isinstance(value, StringValue):
        return _through(provider, target.through, _string(target, clause.modifier, value))
    if isinstance(target, TokenTarget) and isinstance(value, TokenValue):
        return _through(provider, target.through, _token(target, value))
    if isinstance(target, ReferenceTarget) and isinstance(value, ReferenceValue):
        return _reference(provider, target, clause.modifier, value, paths, clause.param.name)
    if isinstance(target, DateTarget) and isinstance(value, DateRange):
        return _date(target, value)
    if isinstance(target, NearTarget) and isinstance(value, NearValue):
        return _near(target, value)
    return None


def _clause(provider: ResourceProvider, clause: Clause, paths: Paths) -> ColumnElement[bool]:
    targets = clause.param.targets
    if clause.modifier == "missing":
        present = or_(*(_present(provider, t) for t in targets))
        return not_(present) if clause.values[0].missing else present  # type: ignore[union-attr]
    matches = [m for v in clause.values for t in targets if (m := _match(provider, clause, t, v, paths)) is not None]
    matched = or_(*matches) if matches else false()
    if clause.modifier == "not":  # resources with no matching value, including those with no value at all
        return provider.id_column.not_in(select(provider.id_column).select_from(provider.source).where(matched))
    return matched


def where_clause(provider: ResourceProvider, request: SearchRequest, paths: Paths | None = None) -> ColumnElement[bool]:
    live = [provider.versioning.deleted.is_(False)] if provider.versioning else []
    return and_(true(), *live, *(_clause(provider, c, paths or {}) for c in request.all_clauses))


def resolve_paths(conn: Connection, provider: ResourceProvider, request: SearchRequest) -> dict[tuple[str, str], str | None]:
    """The materialized paths that :below / :above values need, looked up before the search query."""
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


def page_query(provider: ResourceProvider, request: SearchRequest, paths: Paths | None = None,
               extra_row: int = 0) -> Select[Any]:
    columns = list(provider.search_columns or provider.columns)
    near = request.near
    if near is not None:
        target = near.param.targets[0]
        assert isinstance(target, NearTarget) and isinstance(near.values[0], NearValue)
        columns.append(distance_km(target, near.values[0]).label("_distance_km"))
    return (
        select(*columns)
        .select_from(provider.source)
        .where(where_clause(provider, request, paths))
        .order_by(*_order(provider, request))
        .limit(request.count + extra_row)
        .offset(request.skip)
    )


def count_query(provider: ResourceProvider, request: SearchRequest, paths: Paths | None = None) -> Select[Any]:
    return select(func.count()).select_from(provider.source).where(where_clause(provider, request, paths))


def read_query(provider: ResourceProvider, stored_ids: list[Any]) -> Select[Any]:
    return select(*provider.columns).select_from(provider.source).where(provider.id_column.in_(stored_ids))


def referring_query(provider: ResourceProvider, target: ReferenceTarget, stored_ids: list[Any], limit: int) -> Select[Any]:
    """Live resources of `provider` whose reference `target` points at one of `stored_ids` (_revinclude)."""
    live = [provider.versioning.deleted.is_(False)] if provider.versioning else []
    return (select(*(provider.search_columns or provider.columns)).select_from(provider.source)
            .where(target.column.in_(stored_ids), *live).order_by(provider.id_column).limit(limit))

