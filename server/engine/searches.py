"""Searches: search-type and operations (a search bound to one instance), as searchset Bundles."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

from server.engine.context import ServerContext
from server.engine.bundle import search_entry, searchset
from server.engine.caller import Caller
from server.engine.chaining import joined_conditions, parse, total as counted
from server.engine.operations import call_handler
from server.declare.provider import ResourceProvider, StaticProvider
from server.engine.reads import (
    Resource,
    fetch,
    resource_provider,
    static_account,
    subset_of,
    visibility,
)
from server.declare.rendered import Rendered
from server.engine.static import search_static
from server.errors import ResourceNotFound, operation_outcome
from server.search.include import MAX_INCLUDED, MAX_ITERATE_DEPTH, fetch_included
from server.search.request import SearchRequest, bind_operation
from server.params.types.reference import SCOPE_ROOTS
from server.search.sql import (
    MEASURE,
    WALK,
    WALK_ABOVE,
    body_page_query,
    count_query,
    look_up,
    page_query,
    read_query,
    where_clause,
)
from server.storage.freshness import synced





Match = tuple[str, Resource, Any]  # id, resource, measure (SearchRequest.ranked: near's distance)


def _rendered_page(conn: Connection, provider: ResourceProvider, rows: Sequence[Any], ranked: bool) -> list[Match]:
    """Stored bodies as they are; the rows without one (rendered per request) fetched in one query."""
    missing = [row[0] for row in rows if row[1] is None]
    rendered = {row[provider.id_column.key]: provider.to_resource(row) for row in
                conn.execute(read_query(provider, missing, search=True)).mappings()} if missing else {}
    return [(str(row[0]), Rendered(bytes(row[1])) if row[1] is not None else rendered[row[0]],
             row[2] if ranked else None) for row in rows]


def _run_search(ctx: ServerContext, provider: ResourceProvider, request: SearchRequest, base: str, path: str,
                caller: Caller) -> dict[str, Any]:
    page, ranked = request.count, request.ranked is not None
    with ctx.db.connect() as conn:
        vis = visibility(ctx, conn, provider, caller)
        splice = not request.includes and ctx.freshness.splices(conn, provider)
        sync = synced(ctx.freshness.snapshot(conn), provider)  # taken before the page is read
        found = {**look_up(conn, provider, request, vis.clause), **joined_conditions(ctx, conn, caller, request),
                 SCOPE_ROOTS: vis.paths}
        where = where_clause(provider, request, found, vis.clause)
        total = counted(ctx, conn, provider, caller, request, (request.key, vis.key),
                        lambda: count_query(provider, request, where=where)) if request.counts else None
        if total is not None and total > WALK_ABOVE and not request.sort and request.ranked is None:
            where = where_clause(provider, request, {**found, WALK: True}, vis.clause)
        query = (body_page_query if splice else page_query)(provider, request, extra_row=1, where=where, total=total)
        rows: Sequence[Any] = (conn.execute(query).all() if splice else conn.execute(query).mappings().all()) \
            if page else []
        has_next = len(rows) > page
        rows = rows[:page]
        if splice:
            matches = _rendered_page(conn, provider, rows, ranked)
        else:
            id_key = provider.id_column.key
            matches = [(str(r[id_key]), provider.to_resource(r), r[MEASURE] if ranked else None) for r in rows]
        included = fetch_included(
            conn, ctx.registry, provider, request.includes, rows,
            lambda p: visibility(ctx, conn, p, caller).clause) if rows and not splice else None
    rtype = provider.resource_type
    entries = [search_entry(base, rtype, rid, subset_of(resource, request.summary, request.elements), "match",
                            request.entry_search(measure)) for rid, resource, measure in matches]
    if included is not None:
        entries += [search_entry(base, p.resource_type, str(r[p.id_column.key]), p.to_resource(r), "include")
                    for p, r in included.rows]
        if included.truncated:
            entries.append({"resource": operation_outcome(
                "warning", "too-costly", f"_revinclude stopped at {MAX_INCLUDED} included resources"),
                "search": {"mode": "outcome"}})
        if included.too_deep:
            entries.append({"resource": operation_outcome(
                "warning", "too-costly", f"_include:iterate stopped after {MAX_ITERATE_DEPTH} levels"),
                "search": {"mode": "outcome"}})
    if request.ignored:
        entries.append({"resource": _ignored(provider, request.ignored), "search": {"mode": "outcome"}})
    last_id = matches[-1][0] if matches else None
    return searchset(base, path, request, entries, total, has_next and bool(page), last_id, sync)


def _ignored(provider: ResourceProvider, names: Sequence[str]) -> dict[str, Any]:
    """The warning of a search that left unknown parameters out (a misspelt `nme=` would otherwise match all)."""
    plural = "s" if len(names) > 1 else ""
    return operation_outcome(
        "warning", "not-supported",
        f"unknown search parameter{plural} {', '.join(names)} ignored: the results are not filtered by "
        f"{'them' if plural else 'it'}; {provider.resource_type} supports {', '.join(sorted(provider.params_by_name))} "
        "and the result parameters (send Prefer: handling=strict to have it refused)")


def search_type(ctx: ServerContext, caller: Caller, base: str, resource_type: str,
                items: Sequence[tuple[str, str]], *, strict: bool = False) -> dict[str, Any]:
    provider = ctx.registry.get(resource_type)
    if isinstance(provider, StaticProvider):
        with ctx.db.connect() as conn:
            return search_static(provider, conn, base, items, default_count=ctx.settings.fhir.default_count,
                                 max_count=ctx.settings.fhir.max_count, strict=strict,
                                 account=static_account(ctx, conn, provider, caller))
    request = parse(ctx, provider, items, strict)
    return _run_search(ctx, provider, request, base, resource_type, caller)


def run_operation(ctx: ServerContext, caller: Caller, base: str, resource_type: str, rid: str | None,
                  operation: str, items: Sequence[tuple[str, str]], *, strict: bool = False) -> dict[str, Any]:
    """`[type]/[id]/$name`, or `[type]/$name` (rid None): a named search, or the operation's own handler."""
    provider = resource_provider(ctx, resource_type, f"${operation}")
    op = provider.operations_by_name.get(operation)
    if op is None:
        raise ResourceNotFound(f"{resource_type} has no operation {operation!r}; "
                               f"available: {', '.join('$' + n for n in provider.operations_by_name) or 'none'}")
    if op.handler is not None:
        return call_handler(ctx, caller, base, provider, op, rid, items, strict)
    if rid is None:
        raise ResourceNotFound(f"${operation} is answered at [base]/{resource_type}/[id]/${operation} only")
    request = parse(ctx, provider, items, strict)
    fetch(ctx, provider, rid, caller)  # the instance must exist and be visible: 404 (or 410) otherwise
    request = bind_operation(provider, request, operation, rid)
    return _run_search(ctx, provider, request, base, f"{resource_type}/{rid}/${operation}", caller)
