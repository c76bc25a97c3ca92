"""How a search's matches are ordered: by its measure (near), its _sort keys, then the id; without either, a search
led by a clause read in an index's order (SearchRequest.led: a name prefix) by that index (the normalized name,
then the id: `Walk`), any other by the id. And the hint that makes SQLite sort few matches found by an index
instead of walking the whole table in id order."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import ColumnElement, FromClause, Select, and_, bindparam, exists, func, not_, or_, select, tuple_
from sqlalchemy.sql.util import ClauseAdapter

from server.declare.provider import ResourceProvider
from server.errors import InvalidRequest
from server.params.ids import coerce_id
from server.search.request import SearchRequest
from server.search.seen import seen
from server.params.types.base import Ranks


@dataclass(frozen=True)
class Walk:
    """A page led by a side table's index (server.params.types.base.IndexOrder): its rows meeting the match, in
    (value, key) order, joined to the provider's rows by id, a resource at its first matching row only."""

    rows: FromClause
    value: ColumnElement[Any]
    key: ColumnElement[Any]
    conditions: tuple[ColumnElement[bool], ...]  # the match, and no earlier matching row of the same resource

    def source(self, provider: ResourceProvider, rows: FromClause) -> FromClause:
        """The walked rows joined to the provider's `rows` (its table or source)."""
        return self.rows.join(rows, provider.id_column == self.key)


def index_walk(request: SearchRequest) -> Walk | None:
    """The walk of a search led by a clause read in an index's order (None: not led by one); built per call (a
    page built once per shape: server.engine.searches keeps its statement)."""
    led = request.led
    if led is None:
        return None
    order = led[1]
    walked, earlier = order.aliases

    def on(alias: FromClause, c: ColumnElement[Any]) -> ColumnElement[Any]:
        found = alias.corresponding_column(c)
        assert found is not None, f"{c} is not a column of {order.table}"
        return found

    value, key, tie = (on(walked, c) for c in (order.value, order.key, order.tie))
    e_value, e_key, e_tie = (on(earlier, c) for c in (order.value, order.key, order.tie))
    e_match = cast(ColumnElement[bool], ClauseAdapter(earlier).traverse(order.earlier))
    before = exists().where(e_key == key, e_match, or_(e_value < value, and_(e_value == value, e_tie < tie)))
    return Walk(walked, value, key, (cast(ColumnElement[bool], ClauseAdapter(walked).traverse(order.match)),
                                     not_(before)))


AFTER_VALUE = "_after_value"  # the bind of a walked page's position: the value of the last id's first matching row
RESUMED = "_resumed"  # the bind of the id whose position resume_query looks up


def resume_query(provider: ResourceProvider, request: SearchRequest,
                 visible: ColumnElement[bool] | None = None) -> Select[Any] | None:
    """The look-up of where a walked page resumes after `request.after` (None: the page is not walked, or not
    resumed): the value of that resource's first matching row, by its id (bound by name, RESUMED, as the range of
    the index: the statement serves every position) among the live rows the caller may see."""
    led = request.led
    if led is None or not resumes(request):  # led: narrowed for the type checker
        return None
    order, after = led[1], coerce_id(provider.id_column, request.after)
    return select(func.min(order.value)).select_from(
        order.table.join(provider.table, provider.id_column == order.key)).where(
        order.key == bindparam(RESUMED, after, type_=provider.id_column.type), order.match, *seen(provider, visible))


def resumes(request: SearchRequest) -> bool:
    """Whether a page is walked along an index from a position (its statement needs where, resume_query)."""
    return request.led is not None and request.after is not None


def resumed(request: SearchRequest, found: Any) -> Any:
    """The position resume_query found. An id that is no such match (another search's, deleted, renamed, out of
    scope) is refused, as a malformed one is: the position of what the caller may not see is not told."""
    if found is None:
        raise InvalidRequest(f"_after={request.after}: not a match of this search (continue from its next link, "
                             "or use _skip)")
    return found


MEASURE = "_measure"  # the label of a ranked search's measure (near: the distance in km) in page rows


def measure_of(request: SearchRequest) -> ColumnElement[Any] | None:
    ranked = request.ranked
    if ranked is None:
        return None
    return cast(Ranks[Any, Any], ranked.param.kind).measure(ranked.param.targets[0], ranked.values[0])


def sort_keys(provider: ResourceProvider, request: SearchRequest) -> list[tuple[ColumnElement[Any], bool | None]]:
    """What orders the matches, in turn: (expression, descending; None: ascending, nulls as they come: the
    measure, or the value of a walked index), the id last."""
    walk = index_walk(request)
    if walk is not None:
        return [(walk.value, None), (walk.key, None)]
    measure = measure_of(request)
    keys: list[tuple[ColumnElement[Any], bool | None]] = [(measure, None)] if measure is not None and not request.sort \
        else []
    for key in request.sort:
        assert key.param.sort is not None
        keys.append((key.param.sort, key.descending))
    return [*keys, (provider.id_column, None)]


def walked_after(walk: Walk, after: ColumnElement[Any], value: ColumnElement[Any]) -> ColumnElement[bool]:
    """The walked rows past a position (a row value: one range of the index on both backends)."""
    return tuple_(walk.value, walk.key) > tuple_(value, after)


def ordered(keys: list[tuple[ColumnElement[Any], bool | None]]) -> list[Any]:
    return [e if d is None else e.desc().nulls_last() if d else e.asc().nulls_last() for e, d in keys]


def order_of(provider: ResourceProvider, request: SearchRequest) -> list[Any]:
    return ordered(sort_keys(provider, request))


def measure_column(request: SearchRequest) -> list[ColumnElement[Any]]:
    measure = measure_of(request)
    return [] if measure is None else [measure.label(MEASURE)]


SORT_BELOW = 1000  # a search known to match at most this many rows sorts them (sorted_matches)
