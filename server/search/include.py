"""_include / _revinclude: the resources a page's references lead to (and back), fetched in bulk."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement

from server.declare.provider import ResourceProvider
from server.declare.registry import Registry
from server.params.ids import coerce_id
from server.search.asks import Asks
from server.search.referred import keys_query, kept_keys
from server.search.request import Include
from server.search.sql import read_query, referring_query
from server.params.types.reference import ReferenceTarget, held, targets_to

Row = Mapping[str, Any]  # a row by column name
MAX_ITERATE_DEPTH = 10
MAX_INCLUDED = 1000


@dataclass(frozen=True)
class Included:
    rows: list[tuple[ResourceProvider, Row]]
    truncated: bool = False  # _revinclude stopped at MAX_INCLUDED
    too_deep: bool = False  # _include:iterate stopped at MAX_ITERATE_DEPTH with references left to follow


def _referenced(provider: ResourceProvider, target: ReferenceTarget, rows: Sequence[Row]) -> Asks[list[Any]]:
    """The ids the rows' reference `target` holds: in each row, or (through a side table) in one query."""
    if target.through is None:
        key = target.column.key
        return [row[key] for row in rows if key in row and row[key] is not None]
    ids = [row[provider.id_column.key] for row in rows]
    return [ref for _, ref in (yield held(target, ids), "rows")] if ids else []


def _referring_keys(provider: ResourceProvider, target: ReferenceTarget, ids: list[Any]) -> Asks[Any]:
    """For a reference held in a table the provider's rows refer to by a foreign key: the keys of that table's rows
    that point at `ids`, looked up first (constants the planners weigh with their statistics); else None."""
    if target.through is not None or getattr(target.column, "table", None) is provider.table:
        return None
    query = keys_query(provider.table, target.column.in_(ids))  # type: ignore[arg-type]
    return None if query is None else kept_keys((yield query, "scalars"))


Visible = Callable[[ResourceProvider], ColumnElement[bool] | None]  # the caller's scope on a provider


def fetch_included(registry: Registry, provider: ResourceProvider, includes: Sequence[Include],
                   page: Sequence[Row], visible: Visible = lambda provider: None) -> Asks[Included]:
    """What the page's references lead to, within the caller's scope (`visible`): a parent outside it stays a
    reference only."""
    seen = {(provider.resource_type, str(row[provider.id_column.key])) for row in page}
    out: list[tuple[ResourceProvider, Row]] = []
    truncated = too_deep = False
    for include in includes:
        if include.reverse:
            source = registry.get(include.source)
            assert isinstance(source, ResourceProvider)  # parse_search checked it has the reference parameter
            ids = [row[provider.id_column.key] for row in page]
            for target in targets_to(include.param.targets, include.target):
                room = MAX_INCLUDED - len(out)
                keys = (yield from _referring_keys(source, target, ids)) if ids else None
                rows = (yield referring_query(source, target, ids, room + 1, visible(source), keys), "mappings") \
                    if ids else []
                truncated |= len(rows) > room
                for row in rows[:room]:
                    key = (source.resource_type, str(row[source.id_column.key]))
                    if key not in seen:
                        seen.add(key)
                        out.append((source, row))
            continue
        frontier = list(page)
        for depth in range(MAX_ITERATE_DEPTH + 1 if include.iterate else 1):
            target_provider = registry.providers.get(include.target)
            if not isinstance(target_provider, ResourceProvider) or not frontier:
                break
            wanted: list[Any] = []
            for target in targets_to(include.param.targets, include.target):
                for ref in (yield from _referenced(provider, target, frontier)):
                    key = (include.target, str(ref))
                    if key not in seen:
                        seen.add(key)
                        wanted.append(coerce_id(target_provider.id_column, str(ref)))
            if not wanted:
                break
            if depth == MAX_ITERATE_DEPTH:
                too_deep = True
                break
            query = read_query(target_provider, wanted, visible=visible(target_provider), live=True)
            frontier = list((yield query, "mappings"))
            out += [(target_provider, r) for r in frontier]
    return Included(out, truncated, too_deep)
