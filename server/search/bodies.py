"""The queries of stored bodies (server.declare.provider.Prerendered) and, beside each, the decoder of its rows:
a column is named once, here, and read by name everywhere else (the event loop's driver gives plain tuples).

- `body_query`: a read from the history alone (the newest version of one id);
- `body_page_query`: a search page of ids and stored bodies;
- `current_body`: the stored body of each row, beside the columns of a query of rows (included resources)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, bindparam, case, literal_column, null, select

from server.declare.provider import ResourceProvider
from server.search.order import MEASURE, index_walk, measure_column, ordered, sort_keys
from server.search.request import SearchRequest
from server.search.sql import page_rows, paged, table_for


@dataclass(frozen=True, slots=True)
class StoredVersion:
    """A row of body_query: the newest version of one resource; `partition` and `path` when scoped."""

    deleted: bool
    version: Any
    updated: Any
    body: bytes | None
    partition: Any = None
    path: str | None = None

    @classmethod
    def of(cls, row: Sequence[Any]) -> StoredVersion:
        deleted, version, updated, body, *scope = row
        return cls(bool(deleted), version, updated, None if body is None else bytes(body), *scope)


def body_query(provider: ResourceProvider, scoped: bool = False) -> Select[Any]:
    """A read from the history alone: the newest version's deletion flag, number, instant and stored body
    (NULL: render it), for the id bound as `id` (rows: StoredVersion). The writer records every version in the
    history as it writes it, so the newest one is the current one. `scoped`: also the row's partition and path
    (tenancy), for the caller's scope to be checked."""
    v, spec = provider.versioning, provider.prerendered
    assert v is not None and spec is not None
    query = (select(v.history_deleted.label("deleted"), v.history_version.label("version"),
                    v.history_updated.label("updated"), spec.body.label("body"))
             .where(v.history_id == bindparam("id", type_=provider.id_column.type))
             .order_by(v.history_version.desc()).limit(1))
    tenancy = provider.tenancy
    if not scoped or tenancy is None:
        return query
    partition = tenancy.partition if tenancy.partition is not None else null()  # none: scoped via a reference
    path = tenancy.path if tenancy.path is not None else null()
    return (query.add_columns(partition.label("partition"), path.label("path"))
            .join(provider.table, provider.id_column == v.history_id))


PAGE_ROW = ("id", "body", "measure")  # body_page_query's columns, in order, before those its includes follow
ID, BODY, MEASURE_AT, FOLLOWS = 0, 1, 2, 3
"""Where a row of body_page_query holds its id, its stored body (None: render it), the ranked search's measure
(None: not ranked), and from FOLLOWS on the values of the columns the page's forward includes follow (in order).
A page's rows are read by these positions, not decoded into an object each (a page holds a hundred)."""


PAGE = "page"  # the page's subquery, whose columns the bodies' query names


def body_page_query(provider: ResourceProvider, request: SearchRequest, *, where: ColumnElement[bool],
                    extra_row: int = 0, total: int | None = None, resume: Any = None,
                    follows: Sequence[ColumnElement[Any]] = ()) -> Select[Any]:
    """Ids and stored bodies (NULL where the body cannot serve this page) instead of the columns (rows:
    PageEntry). The page is chosen first (its ids, versions and sort keys: what the condition's indexes and rows
    give), then the bodies of its rows only are looked up: a sort of many matches never carries their bodies.
    `follows`: columns of the provider's rows the page's includes follow (their references), read with the page
    (an include search reads them in no statement of its own)."""
    v, spec = provider.versioning, provider.prerendered
    assert v is not None and spec is not None
    keys = sort_keys(provider, request)
    flags = [spec.in_search.label("_in_search")] if spec.in_search is not None else []
    sorting = [e.label(f"_key{i}") for i, (e, _) in enumerate(keys[:-1])]
    followed = [c.label(f"_follows{i}") for i, c in enumerate(follows)]
    inner = select(provider.id_column, v.version.label("_version"), *flags, *sorting, *measure_column(request),
                   *followed)
    walk = index_walk(request)
    rows = table_for(provider, where, *flags, *measure_column(request), *follows,
                     *(e for e, _ in keys[:-1] if walk is None))
    inner = inner.select_from(page_rows(provider, request, rows))
    page = paged(provider, request, inner, where, extra_row, total, resume).subquery(PAGE)
    page_id, body = _bodies(provider)
    measure = literal_column(f"{PAGE}.{MEASURE}") if request.ranked is not None else null()
    order = ordered([*((literal_column(f"{PAGE}._key{i}"), d) for i, (_, d) in enumerate(keys[:-1])), (page_id, None)])
    return select(page_id.label(PAGE_ROW[ID]), body, measure.label(PAGE_ROW[MEASURE_AT]),
                  *(literal_column(f"{PAGE}._follows{i}", c.type).label(f"_follows{i}") for i, c in enumerate(follows))
                  ).select_from(page).order_by(*order)


def _bodies(provider: ResourceProvider) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
    """The page's id and its stored body (NULL where it cannot serve a search), as columns of the page's
    subquery."""
    spec = provider.prerendered
    assert spec is not None
    page_id = literal_column(f"{PAGE}.{provider.id_column.key}", provider.id_column.type)
    stored = stored_body(provider, page_id, literal_column(f"{PAGE}._version"))
    body = stored if spec.in_search is None else case((literal_column(f"{PAGE}._in_search"), stored), else_=None)
    return page_id, body.label(PAGE_ROW[BODY])


def stored_body(provider: ResourceProvider, rid: ColumnElement[Any], version: ColumnElement[Any]) -> ColumnElement[Any]:
    """The stored body of the current version `version` of the resource `rid` (NULL: none stored): from the
    current bodies' table where the provider keeps one (its row serves only while it holds that version), else
    from the history."""
    v, spec = provider.versioning, provider.prerendered
    assert v is not None and spec is not None
    if spec.current is not None:
        current = spec.current
        return select(current.body).where(current.id == rid, current.version == version).scalar_subquery()
    return select(spec.body).where(v.history_id == rid, v.history_version == version).scalar_subquery()


INCLUDED_BODY = "_body"  # the column of a row's stored body in the included resources' queries (server.search.include)


def current_body(provider: ResourceProvider, search: bool = False) -> ColumnElement[Any]:
    """The stored body of the current version of each of the provider's rows (NULL: render it), as a column of a
    query of its rows (an included resource's); `search`: NULL also where the body cannot serve a row rendered from
    the search columns (Prerendered.in_search)."""
    v, spec = provider.versioning, provider.prerendered
    assert v is not None and spec is not None
    stored = stored_body(provider, provider.id_column, v.version)
    body = stored if not search or spec.in_search is None else case((spec.in_search, stored), else_=None)
    return body.label(INCLUDED_BODY)


def included_body(row: Mapping[str, Any]) -> bytes | None:
    """The stored body a row of a query with `current_body` holds (None: render the row)."""
    body = row[INCLUDED_BODY]
    return None if body is None else bytes(body)
