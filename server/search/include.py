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
from server.storage import steps
from server.storage.steps import Steps
from server.search.bodies import current_body, included_body
from server.search.referred import keys_query, kept_keys
from server.search.request import Include
from server.search.sql import read_query, referring_query, table_for
from server.params.types.reference import ReferenceTarget, held, targets_to

Row = Mapping[str, Any]  # a row by column name
MAX_ITERATE_DEPTH = 10
MAX_INCLUDED = 100  # resources _include and _revinclude (:iterate too) bring to one page, in all


@dataclass(frozen=True, slots=True)
class IncludedResource:
    provider: ResourceProvider
    id: Any
    body: bytes | None  # its stored body, spliced as it is
    row: Row | None  # else its row, rendered per request


@dataclass(frozen=True)
class Included:
    resources: list[IncludedResource]
    truncated: bool = False  # _include/_revinclude stopped at MAX_INCLUDED with more to bring
    too_deep: bool = False  # _include:iterate stopped at MAX_ITERATE_DEPTH with references left to follow


Visible = Callable[[ResourceProvider], ColumnElement[bool] | None]  # the caller's scope on a provider
Splices = Callable[[ResourceProvider], bool]  # whether the provider's stored bodies serve what the database holds


def _followed(includes: Iterable[Include], resource_type: str) -> set[str]:
    """The keys of the columns holding the references that the forward includes starting from `resource_type`
    follow (in the rows themselves)."""
    return {t.column.key for include in includes if not include.reverse and include.source == resource_type
            for t in targets_to(include.param.targets, include.target) if t.through is None}


def _columns(columns: Sequence[ColumnElement[Any]], keys: Collection[str]) -> list[ColumnElement[Any]]:
    """The columns among `columns` named by `keys`: what a row of all of them would hold of those keys."""
    return [c for c in columns if c.key in keys]


def page_follows(provider: ResourceProvider, includes: Sequence[Include]) -> list[ColumnElement[Any]]:
    """The provider's columns the forward includes starting from its type follow (the references its rows hold):
    what a page of stored bodies reads beside them (server.search.bodies.body_page_query's `follows`), for
    fetch_included's rows."""
    if not includes:  # every search of stored bodies asks: most have none
        return []
    return _columns(provider.search_columns or provider.columns, _followed(includes, provider.resource_type))


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
             follow: Collection[str], limit: int | None = None) -> Steps[tuple[list[Row], list[IncludedResource]]]:
    """The rows `query` selects (the provider's columns: its search columns when `search`; in id order, up to
    `limit`), and the resources they include. `stored`: the ids, the columns `follow` names and the stored bodies
    instead; then, in a second statement, the rows without a body (to render per request)."""
    key = provider.id_column.key
    if not stored:
        rows = list((yield from steps.rows(query, mappings=True)))
        return rows, [IncludedResource(provider, row[key], None, row) for row in rows]
    columns = provider.search_columns or provider.columns if search else provider.columns
    rows = list((yield from steps.rows(_narrow(provider, query, provider.id_column, *_columns(columns, follow),
                                               current_body(provider, search), limit=limit), mappings=True)))
    bodies = [included_body(row) for row in rows]
    missing = [row[key] for row, body in zip(rows, bodies) if body is None]
    rendered = {row[key]: row for row in (yield from steps.rows(query.where(provider.id_column.in_(missing)),
                                                                 mappings=True))} \
        if missing else {}
    return rows, [IncludedResource(provider, row[key], body, rendered.get(row[key]))
                  for row, body in zip(rows, bodies) if body is not None or row[key] in rendered]


def _referenced(provider: ResourceProvider, target: ReferenceTarget, rows: Sequence[Row]) -> Steps[list[Any]]:
    """The ids the rows' reference `target` holds: in each row, or (through a side table) in one query."""
    if target.through is None:
        key = target.column.key
        return [row[key] for row in rows if key in row and row[key] is not None]
    ids = [row[provider.id_column.key] for row in rows]
    return [ref for _, ref in (yield from steps.rows(held(target, ids)))] if ids else []


def _referring_keys(provider: ResourceProvider, target: ReferenceTarget, ids: list[Any]) -> Steps[Any]:
    """For a reference held in a table the provider's rows refer to by a foreign key: the keys of that table's rows
    that point at `ids`, looked up first (constants the planners weigh with their statistics); else None."""
    if target.through is not None or getattr(target.column, "table", None) is provider.table:
        return None
    query = keys_query(provider.table, target.column.in_(ids))  # type: ignore[arg-type]
    return None if query is None else kept_keys((yield from steps.scalars(query)))


def fetch_included(registry: Registry, provider: ResourceProvider, includes: Sequence[Include],
                   page: Sequence[Row], visible: Visible = lambda provider: None,
                   splices: Splices = lambda provider: False) -> Steps[Included]:
    """What the page's references lead to, within the caller's scope (`visible`): a parent outside it stays a
    reference only. `page`: the matches' rows (their ids, and the reference columns the includes starting from
    their type follow: page_follows); `splices`: the providers whose included resources are their stored bodies.

    Level by level, each resource once: the first applies every include to the matches; each next one applies the
    :iterate includes to what the one before brought of their types (matches or included: any type), for at most
    MAX_ITERATE_DEPTH levels (then `too_deep` when one more would bring something)."""
    listed = {(provider.resource_type, str(row[provider.id_column.key])) for row in page}
    out: list[IncludedResource] = []
    truncated = too_deep = False
    iterated = [include for include in includes if include.iterate]
    level: dict[str, list[Row]] = {provider.resource_type: list(page)}  # what the level before brought, by type
    for depth in range(MAX_ITERATE_DEPTH + 1):
        brought: dict[str, list[Row]] = {}
        for include in includes if depth == 0 else iterated:
            near, far, rows = registry.providers.get(include.near), registry.providers.get(include.far), \
                level.get(include.near)
            if not rows or not isinstance(near, ResourceProvider) or not isinstance(far, ResourceProvider):
                continue
            if depth == MAX_ITERATE_DEPTH and include.iterate:
                too_deep = too_deep or (yield from _would_bring(include, near, far, rows, listed, visible))
                continue
            room = max(0, MAX_INCLUDED - len(out))
            if not room:  # the page's includes are all in: one more would bring something?
                truncated = truncated or (yield from _would_bring(include, near, far, rows, listed, visible))
                continue
            new_rows, found, cut = yield from (_referring(include, near, far, rows, listed, room, visible, splices,
                                                          _followed(iterated, far.resource_type))
                                               if include.reverse else
                                               _referred(include, near, far, rows, listed, visible, splices,
                                                         _followed(iterated, far.resource_type)))
            if len(found) > room:  # forward includes: cut at the page's room, by id as they were fetched
                kept = {str(i.id) for i in found[:room]}
                found, cut = found[:room], True
                new_rows = [r for r in new_rows if str(r[far.id_column.key]) in kept]
            out += found
            truncated |= cut
            brought.setdefault(far.resource_type, []).extend(new_rows)
        level = brought
        if not level:
            break
    return Included(out, truncated, too_deep)


def _unlisted_references(include: Include, near: ResourceProvider, rows: Sequence[Row],
                         listed: set[tuple[str, str]]) -> Steps[list[str]]:
    """The ids the rows' references (of `include`) point at that are not among the resources `listed`, once each."""
    refs: dict[str, None] = {}
    for target in targets_to(include.param.targets, include.target):
        refs.update((str(ref), None) for ref in (yield from _referenced(near, target, rows)))
    return [ref for ref in refs if (include.far, ref) not in listed]


def _referred(include: Include, near: ResourceProvider, far: ResourceProvider, rows: Sequence[Row],
              listed: set[tuple[str, str]], visible: Visible, splices: Splices,
              follow: Collection[str]) -> Steps[tuple[list[Row], list[IncludedResource], bool]]:
    """_include: the resources the rows refer to that are not `listed` yet (then they are): their rows (with the
    columns `follow` names), the resources, and False (nothing cut)."""
    wanted = [stored for ref in (yield from _unlisted_references(include, near, rows, listed))
              if (stored := coerce_id(far.id_column, ref)) is not None]
    listed.update((far.resource_type, str(stored)) for stored in wanted)
    if not wanted:
        return [], [], False
    query = read_query(far, wanted, visible=visible(far), live=True).order_by(far.id_column)
    new_rows, found = yield from _fetched(far, query, splices(far), False, follow)
    return new_rows, found, False


def _referring(include: Include, near: ResourceProvider, far: ResourceProvider, rows: Sequence[Row],
               listed: set[tuple[str, str]], room: int, visible: Visible, splices: Splices,
               follow: Collection[str]) -> Steps[tuple[list[Row], list[IncludedResource], bool]]:
    """_revinclude: the resources referring to the rows that are not `listed` yet (then they are), at most `room` of
    them: their rows, the resources, and whether there were more."""
    ids = [row[near.id_column.key] for row in rows]
    key = far.id_column.key
    new_rows: list[Row] = []
    out: list[IncludedResource] = []
    cut = False
    for target in targets_to(include.param.targets, include.target):
        keys = yield from _referring_keys(far, target, ids)
        limit = room - len(out) + 1
        fetched, found = yield from _fetched(far, referring_query(far, target, ids, limit, visible(far), keys),
                                             splices(far), True, follow, limit)
        cut |= len(fetched) >= limit
        new = set()
        for resource in found[:limit - 1]:
            if (far.resource_type, str(resource.id)) not in listed:
                listed.add((far.resource_type, str(resource.id)))
                out.append(resource)
                new.add(resource.id)
        new_rows += [row for row in fetched if row[key] in new]
    return new_rows, out, cut


def _would_bring(include: Include, near: ResourceProvider, far: ResourceProvider, rows: Sequence[Row],
                 listed: set[tuple[str, str]], visible: Visible) -> Steps[bool]:
    """Whether `include` would bring a resource not `listed` from the rows (an :iterate one past the depth limit)."""
    if not include.reverse:
        return bool((yield from _unlisted_references(include, near, rows, listed)))
    ids = [row[near.id_column.key] for row in rows]
    known = sum(1 for rtype, _ in listed if rtype == far.resource_type)
    for target in targets_to(include.param.targets, include.target):  # one more than those listed: one is new
        found = yield from steps.rows(referring_query(far, target, ids, known + 1, visible(far)), mappings=True)
        if any((far.resource_type, str(row[far.id_column.key])) not in listed for row in found):
            return True
    return False
