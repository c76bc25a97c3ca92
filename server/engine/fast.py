"""The hot path: the interactions users repeat, answered on the event loop from what is at hand (the freshness
snapshot, the caller's visibility, the statements compiled once) and one statement on the driver's own
connection (server.storage.hot): no worker thread, no pool checkout, no SQLAlchemy per request.

Each function gives the same answer and raises the same errors as the interaction it stands for, or returns None
whenever something is not at hand (a snapshot due, a visibility not built yet, a body not stored, no hot database):
the pipeline then runs that interaction in a worker thread, which builds what was missing for the next request."""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select

from server.engine.context import ServerContext
from server.engine.bundle import search_entry, searchset
from server.engine.caller import Caller
from server.engine.chaining import parse
from server.declare.instants import as_utc
from server.declare.provider import ResourceProvider
from server.engine.reads import Resource, capabilities as capability_statement, gone, not_found, subset_of
from server.declare.rendered import Rendered
from server.params.ids import coerce_id, stored_id
from server.search.request import SearchRequest, bind_operation, parse_subset
from server.params.types.reference import SCOPE_ROOTS
from server.search.sql import (
    AFTER,
    SORT_BELOW,
    WALK,
    WALK_ABOVE,
    body_page_query,
    count_query,
    lookups,
    where_clause,
)
from server.storage.freshness import synced
from server.storage.hot import HotDatabase, OverBudget
from server.storage.prepared import driver_sql


async def read(ctx: ServerContext, caller: Caller, resource_type: str, rid: str,
               items: Sequence[tuple[str, str]] = ()) -> Resource | None:
    """server.engine.reads.read of a stored body."""
    hot = ctx.hot
    provider = ctx.registry.get(resource_type)  # 404 for a type not served, as read
    if hot is None or not isinstance(provider, ResourceProvider) or provider.prerendered is None:
        return None
    summary, elements = parse_subset(items)
    snapshot = ctx.freshness.current(hot.database)
    if snapshot is None or resource_type not in snapshot.bodies:
        return None
    visibility = ctx.scoper.peek(provider, caller.scope, snapshot, hot.database)
    if visibility is None or (visibility.clause is not None and not visibility.by_row):
        return None
    stored = stored_id(provider, rid)
    if stored is None:
        raise not_found(resource_type, rid)
    prepared = (ctx.reads if visibility.clause is None else ctx.scoped_reads)[resource_type]
    rows = await hot.rows(prepared.sql, prepared.params(id=stored))
    found: Any = rows[0] if rows else None
    if found is not None and visibility.clause is not None and not visibility.admits(found[4], found[5]):
        found = None  # outside the caller's scope: the same answer as an unknown id
    if found is None:
        raise not_found(resource_type, rid)
    deleted, version, updated, body = found[:4]
    if deleted:
        raise gone(provider, rid, version)
    if body is None:
        return None  # rendered per request: the interaction does it
    return subset_of(Rendered(bytes(body), str(version), as_utc(updated)), summary, elements)


async def capabilities(ctx: ServerContext, base: str) -> dict[str, Any]:
    """server.engine.reads.capabilities: no I/O at all."""
    return capability_statement(ctx, base)


# Searches: built per request as in a thread (the same functions), compiled once per shape (SQLAlchemy's cache key,
# the values apart: server.storage.prepared.driver_sql) and run on the driver's own connection.

def hot_search(request: SearchRequest) -> bool:
    """Whether the hot path can answer this search (its bodies spliced, nothing else fetched or added)."""
    return not request.includes and not request.joined and not request.ignored


async def search(ctx: ServerContext, caller: Caller, base: str, resource_type: str,
                 items: Sequence[tuple[str, str]], *, strict: bool = False) -> dict[str, Any] | None:
    """server.engine.searches.search_type, of stored bodies."""
    provider = ctx.registry.get(resource_type)
    if not isinstance(provider, ResourceProvider):
        return None
    request = parse(ctx, provider, items, strict)
    return await _search(ctx, caller, base, provider, request, resource_type)


async def operation(ctx: ServerContext, caller: Caller, base: str, resource_type: str, rid: str | None,
                    name: str, items: Sequence[tuple[str, str]], *, strict: bool = False) -> dict[str, Any] | None:
    """server.engine.searches.run_operation of a named search ($children)."""
    provider = ctx.registry.get(resource_type)
    op = provider.operations_by_name.get(name) if isinstance(provider, ResourceProvider) else None
    if rid is None or op is None or op.handler is not None:
        return None
    assert isinstance(provider, ResourceProvider)
    request = parse(ctx, provider, items, strict)
    if await read(ctx, caller, resource_type, rid) is None:  # it must exist and be visible: 404 (or 410)
        return None
    request = bind_operation(provider, request, name, rid)
    return await _search(ctx, caller, base, provider, request, f"{resource_type}/{rid}/${name}")


LOOP_BUDGET_S = 0.02  # a search statement longer than this on a driver that blocks the loop goes to the thread


async def _rows(ctx: ServerContext, hot: HotDatabase, statement: Select[Any]) -> list[Any]:
    bound = driver_sql(statement, ctx.db.dialect, hot.compiled)
    return await hot.rows(bound.sql, bound.params, LOOP_BUDGET_S)


def _bucket(total: int | None) -> str:
    """What of the total a page's SQL depends on (server.search.sql: few matches sorted, many walked)."""
    if total is None:
        return "unknown"
    return "few" if total <= SORT_BELOW else "many" if total > WALK_ABOVE else "some"


async def _look_up(ctx: ServerContext, hot: HotDatabase, provider: ResourceProvider, request: SearchRequest,
                   visible: ColumnElement[bool] | None) -> dict[Hashable, Any]:
    """server.search.sql.look_up, its queries run on the loop."""
    run = lookups(provider, request, visible)
    try:
        query, many = next(run)
        while True:
            rows = await _rows(ctx, hot, query)
            query, many = run.send([r[0] for r in rows] if many else rows[0][0] if rows else None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def _search(ctx: ServerContext, caller: Caller, base: str, provider: ResourceProvider,
                  request: SearchRequest, path: str) -> dict[str, Any] | None:
    try:
        return await _page(ctx, caller, base, provider, request, path)
    except OverBudget:
        return None  # a count or a page too long to hold the loop: the thread runs it


async def _page(ctx: ServerContext, caller: Caller, base: str, provider: ResourceProvider,
                request: SearchRequest, path: str) -> dict[str, Any] | None:
    """server.engine.searches._run_search of a page of stored bodies."""
    hot = ctx.hot
    if hot is None or not hot_search(request) or provider.prerendered is None or provider.versioning is None:
        return None
    rtype = provider.resource_type
    snapshot = ctx.freshness.current(hot.database)
    if snapshot is None or rtype not in snapshot.bodies:
        return None
    visibility = ctx.scoper.peek(provider, caller.scope, snapshot, hot.database)
    if visibility is None:
        return None
    counted = (hot.database, snapshot.generations.get(rtype), (request.key, visibility.key))
    total = ctx.counts.peek(counted) if request.counts else None
    # the page of the same search seen before (another position, another _elements or format): its SQL as sent
    seen = (path, request.key, visibility.key, snapshot.stamp, request.count, request.after is not None,
            None if request.after is not None else request.skip, tuple(k.raw for k in request.sort))
    page = hot.pages.get((*seen, _bucket(total))) if total is not None or not request.counts else None
    if (request.counts and total is None) or (request.count and page is None):  # else nothing to build or count
        found = {**await _look_up(ctx, hot, provider, request, visibility.clause), SCOPE_ROOTS: visibility.paths}
        where = where_clause(provider, request, found, visibility.clause)
        if request.counts and total is None:  # kept as the thread keeps it (server.engine.reads.count)
            total = int((await _rows(ctx, hot, count_query(provider, request, where=where)))[0][0])
            ctx.counts.put(counted, total)
        if total is not None and total > WALK_ABOVE and not request.sort and request.ranked is None:
            where = where_clause(provider, request, {**found, WALK: True}, visibility.clause)
        if request.count:
            page = driver_sql(body_page_query(provider, request, extra_row=1, where=where, total=total),
                              ctx.db.dialect, hot.compiled)
            hot.pages[(*seen, _bucket(total))] = page
    elif page is not None and request.after is not None:
        page = page.replace(AFTER, coerce_id(provider.id_column, request.after))
    rows = await hot.rows(page.sql, page.params, LOOP_BUDGET_S) if page is not None and request.count else []
    if any(row[1] is None for row in rows):
        return None  # some rendered per request: the interaction does it
    has_next = len(rows) > request.count
    rows = rows[:request.count]
    ranked = request.ranked is not None
    entries = [search_entry(base, rtype, str(row[0]), subset_of(Rendered(bytes(row[1])), request.summary,
                                                                request.elements),
                            "match", request.entry_search(row[2] if ranked else None)) for row in rows]
    return searchset(base, path, request, entries, total, has_next and bool(request.count),
                     str(rows[-1][0]) if rows else None, synced(snapshot, provider))
