"""SearchRequest -> SQLAlchemy Core: one page query, one count query."""
from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Select, and_, false, func, literal, or_, select, true

from server.provider import ReferenceTarget, ResourceProvider, StringTarget, Through, TokenTarget
from server.search.request import Clause, SearchRequest
from server.search.values import ReferenceValue, SearchValue, StringValue, TokenValue


def coerce_id(column: ColumnElement[Any], raw: str) -> Any | None:
    """A FHIR id as the column stores it, or None when it cannot be one (so nothing matches)."""
    try:
        python_type = column.type.python_type
    except NotImplementedError:
        return raw
    try:
        return python_type(raw) if python_type is not str else raw
    except (TypeError, ValueError):
        return None


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


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
    pattern = _like_escape(value.normalized)
    pattern = f"%{pattern}%" if modifier == "contains" else f"{pattern}%"
    return target.normalized.like(pattern, escape="\\")


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
    elif target.prefix and value.code.startswith(target.prefix):
        code_cond = target.code == value.code[len(target.prefix):]
    else:
        code_cond = target.code == value.code
    return and_(system_cond, code_cond)


def _reference(target: ReferenceTarget, value: ReferenceValue) -> ColumnElement[bool]:
    if value.resource_type != target.resource_type:
        return false()
    stored = coerce_id(target.column, value.id)
    return false() if stored is None else target.column == stored


def _value(provider: ResourceProvider, clause: Clause, value: SearchValue) -> ColumnElement[bool]:
    conds: list[ColumnElement[bool]] = []
    for target in clause.param.targets:
        if isinstance(target, StringTarget) and isinstance(value, StringValue):
            conds.append(_through(provider, target.through, _string(target, clause.modifier, value)))
        elif isinstance(target, TokenTarget) and isinstance(value, TokenValue):
            conds.append(_through(provider, target.through, _token(target, value)))
        elif isinstance(target, ReferenceTarget) and isinstance(value, ReferenceValue):
            conds.append(_reference(target, value))
    return or_(*conds) if conds else false()


def where_clause(provider: ResourceProvider, request: SearchRequest) -> ColumnElement[bool]:
    return and_(true(), *(or_(*(_value(provider, c, v) for v in c.values)) for c in request.all_clauses))


def page_query(provider: ResourceProvider, request: SearchRequest) -> Select[Any]:
    return (
        select(*provider.columns)
        .select_from(provider.source)
        .where(where_clause(provider, request))
        .order_by(provider.id_column)
        .limit(request.count)
        .offset(request.skip)
    )


def count_query(provider: ResourceProvider, request: SearchRequest) -> Select[Any]:
    return select(func.count()).select_from(provider.source).where(where_clause(provider, request))


def read_query(provider: ResourceProvider, stored_id: Any) -> Select[Any]:
    return select(*provider.columns).select_from(provider.source).where(provider.id_column == stored_id)
