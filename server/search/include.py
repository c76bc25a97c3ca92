"""_include / _revinclude: the resources a page's references lead to (and back), fetched in bulk. Of a provider
whose stored bodies serve what the database holds (server.declare.provider.Prerendered), each statement selects
the ids and stored bodies of the resources it includes (and the reference columns an iterate level follows), and
the rows without a usable body are read to be rendered per request; of another provider, the rows to render."""
from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, select

from server.declare.provider import ResourceProvider
from server.declare.registry import Registry
from server.params.ids import coerce_id
from server.search.asks import Asks
from server.search.bodies import current_body, included_body
from server.search.referred import keys_query, kept_keys
from server.search.request import Include
from server.search.sql import read_query, referring_query, table_for
from server.params.types.reference import ReferenceTarget, held, targets_to

Row = Mapping[str, Any]  # a row by column name
MAX_ITERATE_DEPTH = 10
MAX_INCLUDED = 1000


@dataclass(frozen=True, slots=True)
class IncludedResource:
    provider: ResourceProvider
    id: Any
    body: bytes | None  # its stored body, spliced as it is
    row: Row | None  # else its row, rendered per request


@dataclass(frozen=True)
class Included:
    resources: list[IncludedResource]
    truncated: bool = False  # _revinclude stopped at MAX_INCLUDED
    too_deep: bool = False  # _include:iterate stopped at MAX_ITERATE_DEPTH with references left to follow


Visible = Callable[[ResourceProvider], ColumnElement[bool] | None]  # the caller's scope on a provider
Splices = Callable[[ResourceProvider], bool]  # whether the provider's stored bodies serve what the database holds


def _followed(includes: Iterable[Include]) -> set[str]:
    """The keys of the columns holding the references the forward includes follow (in the rows themselves)."""
    return {t.column.key for include in includes if not include.reverse
            for t in targets_to(include.param.targets, include.target) if t.through is None}


def _columns(columns: Sequence[ColumnElement[Any]], keys: Collection[str]) -> list[ColumnElement[Any]]:
    """The columns among `columns` named by `keys`: what a row of all of them would hold of those keys."""
    return [c for c in columns if c.key in keys]


def page_references(provider: ResourceProvider, includes: Sequence[Include], ids: Sequence[Any],
                    visible: ColumnElement[bool] | None = None) -> Asks[list[Row]]:
    """A page of stored bodies as fetch_included reads its rows: their ids, and the reference columns the forward
    includes follow, in one narrow statement (none when they follow none), in the page's order."""
    key = provider.id_column.key
    columns = _columns(provider.search_columns or provider.columns, _followed(includes))
    if not columns or not ids:
        return [{key: i} for i in ids]
    query = _narrow(provider, read_query(provider, list(ids), visible=visible, live=True), provider.id_column, *columns)
    by_id = {row[key]: row for row in (yield query, "mappings")}
    return [by_id[i] for i in ids if i in by_id]


def _narrow(provider: ResourceProvider, query: Select[Any], *columns: ColumnElement[Any],
            limit: int | None = None) -> Select[Any]:
    """The rows `query` selects, by id, but these columns only: from the provider's table alone when they and the
    condition use no other (no joins to plan)."""
    where = query.whereclause
    assert where is not None
    narrow = select(*columns).select_from(table_for(provider, where, *columns)).where(where)
    narrow = narrow.order_by(provider.id_column)
    return narrow if limit is None else narrow.limit(limit)


def _fetched(provider: ResourceProvider, query: Select[Any], stored: bool, search: bool,
             follow: Collection[str], limit: int | None = None) -> Asks[tuple[list[Row], list[IncludedResource]]]:
    """The rows `query` selects (the provider's columns: its search columns when `search`; in id order, up to
    `limit`), and the resources they include. `stored`: the ids, the columns `follow` names and the stored bodies
    instead; then, in a second statement, the rows without a body (to render per request)."""
    key = provider.id_column.key
    if not stored:
        rows = list((yield query, "mappings"))
        return rows, [IncludedResource(provider, row[key], None, row) for row in rows]
    columns = provider.search_columns or provider.columns if search else provider.columns
    rows = list((yield _narrow(provider, query, provider.id_column, *_columns(columns, follow),
                               current_body(provider, search), limit=limit), "mappings"))
    bodies = [included_body(row) for row in rows]
    missing = [row[key] for row, body in zip(rows, bodies) if body is None]
    rendered = {row[key]: row for row in (yield query.where(provider.id_column.in_(missing)), "mappings")} \
        if missing else {}
    return rows, [IncludedResource(provider, row[key], body, rendered.get(row[key]))
                  for row, body in zip(rows, bodies) if body is not None or row[key] in rendered]


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


def fetch_included(registry: Registry, provider: ResourceProvider, includes: Sequence[Include],
                   page: Sequence[Row], visible: Visible = lambda provider: None,
                   splices: Splices = lambda provider: False) -> Asks[Included]:
    """What the page's references lead to, within the caller's scope (`visible`): a parent outside it stays a
    reference only. `page`: the matches' rows (their ids, and the reference columns the forward includes follow:
    page_references); `splices`: the providers whose included resources are their stored bodies."""
    seen = {(provider.resource_type, str(row[provider.id_column.key])) for row in page}
    out: list[IncludedResource] = []
    truncated = too_deep = False
    for include in includes:
        if include.reverse:
            source = registry.get(include.source)
            assert isinstance(source, ResourceProvider)  # parse_search checked it has the reference parameter
            ids = [row[provider.id_column.key] for row in page]
            for target in targets_to(include.param.targets, include.target):
                room = MAX_INCLUDED - len(out)
                keys = (yield from _referring_keys(source, target, ids)) if ids else None
                rows, found = (yield from _fetched(
                    source, referring_query(source, target, ids, room + 1, visible(source), keys), splices(source),
                    True, (), room + 1)) if ids else ([], [])
                truncated |= len(rows) > room
                for resource in found[:room]:
                    key = (source.resource_type, str(resource.id))
                    if key not in seen:
                        seen.add(key)
                        out.append(resource)
            continue
        frontier = list(page)
        follow = _followed([include]) if include.iterate else set()
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
            frontier, found = yield from _fetched(target_provider, query.order_by(target_provider.id_column),
                                                  splices(target_provider), False, follow)
            out += found
    return Included(out, truncated, too_deep)
