"""How a search's matches are ordered: by its measure (near), its _sort keys, then the id; and the hint that makes
SQLite sort few matches found by an index instead of walking the whole table in id order."""
from __future__ import annotations

from typing import Any, cast

from sqlalchemy import ColumnElement

from server.declare.provider import ResourceProvider
from server.search.request import SearchRequest
from server.params.types.base import Ranks

MEASURE = "_measure"  # the label of a ranked search's measure (near: the distance in km) in page rows


def measure_of(request: SearchRequest) -> ColumnElement[Any] | None:
    ranked = request.ranked
    if ranked is None:
        return None
    return cast(Ranks[Any, Any], ranked.param.kind).measure(ranked.param.targets[0], ranked.values[0])


def sort_keys(provider: ResourceProvider, request: SearchRequest) -> list[tuple[ColumnElement[Any], bool | None]]:
    """What orders the matches, in turn: (expression, descending; None: the measure, ascending, nulls as they
    come), the id last."""
    measure = measure_of(request)
    keys: list[tuple[ColumnElement[Any], bool | None]] = [(measure, None)] if measure is not None and not request.sort \
        else []
    for key in request.sort:
        assert key.param.sort is not None
        keys.append((key.param.sort, key.descending))
    return [*keys, (provider.id_column, None)]


def ordered(keys: list[tuple[ColumnElement[Any], bool | None]]) -> list[Any]:
    return [e if d is None else e.desc().nulls_last() if d else e.asc().nulls_last() for e, d in keys]


def order_of(provider: ResourceProvider, request: SearchRequest) -> list[Any]:
    return ordered(sort_keys(provider, request))


def measure_column(request: SearchRequest) -> list[ColumnElement[Any]]:
    measure = measure_of(request)
    return [] if measure is None else [measure.label(MEASURE)]


SORT_BELOW = 1000  # a search known to match at most this many rows sorts them (sorted_matches)
