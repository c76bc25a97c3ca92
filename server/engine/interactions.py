"""The interactions as plain functions returning FHIR dicts (no HTTP here)."""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from sqlalchemy import Connection, Select

from server.access.tokens import Principal
from server.engine.bundle import history, history_entry, search_entry, searchset
from server.engine.capabilities import for_base
from server.context import ServerContext
from server.errors import Forbidden, ResourceGone, ResourceNotFound, operation_outcome
from server.storage.freshness import database_of
from server.engine.interaction import Interaction
from server.engine.instants import as_utc
from server.engine.provider import ResourceProvider, StaticProvider, Versioning
from server.engine.rendered import Rendered
from server.access.scope import EVERYTHING, AccessScope, Visibility
from server.search.history import (
    HistoryRequest,
    history_count,
    history_page,
    parse_history,
    version_query,
)
from server.search.include import MAX_INCLUDED, MAX_ITERATE_DEPTH, fetch_included
from server.search.request import (
    SearchRequest,
    bind_operation,
    parse_search,
    parse_subset,
)
from server.search.ids import stored_id
from server.search.sql import (
    body_page_query,
    count_query,
    page_query,
    read_query,
    resolve_paths,
    scope_query,
    where_clause,
    within,
)
from server.engine.static import read_static, search_static
from server.engine.subset import subset


Resource = dict[str, Any] | Rendered


def authorize(ctx: ServerContext, principal: Principal | None, interaction: Interaction) -> None:
    if principal is None:
        return  # only capabilities may be public, by settings
    denials = [d for d in ctx.pm.hook.authorize(principal=principal, interaction=interaction, settings=ctx.settings) if d]
    if denials:
        raise Forbidden("; ".join(denials))


def access(ctx: ServerContext, principal: Principal | None) -> AccessScope:
    """The caller's scope: everything for a trusted in-process caller (no principal), else from its token."""
    if principal is None:
        return EVERYTHING
    return ctx.pm.hook.access_scope(principal=principal, settings=ctx.settings) or AccessScope()


def _visibility(ctx: ServerContext, conn: Connection, provider: ResourceProvider, scope: AccessScope) -> Visibility:
    return ctx.scoper.visibility(conn, provider, scope)


def _visible(ctx: ServerContext, conn: Connection, provider: ResourceProvider, stored: Any,
             scope: AccessScope) -> bool:
    """Whether the caller may see the resource `stored` (if it exists; the caller's next query tells that)."""
    vis = _visibility(ctx, conn, provider, scope)
    if provider.tenancy is None or not vis.restricted:
        return True
    found = conn.execute(scope_query(provider, stored)).first()
    return found is not None and vis.admits(found[0], found[1])


def _static_account(ctx: ServerContext, conn: Connection, provider: StaticProvider,
                    principal: Principal | None) -> str | None:
    return ctx.scoper.account(conn, access(ctx, principal)) if provider.per_account else None


def _not_found(resource_type: str, rid: str) -> ResourceNotFound:
    return ResourceNotFound(f"{resource_type}/{rid} is not known")


def _gone(provider: ResourceProvider, rid: str, version: Any) -> ResourceGone:
    return ResourceGone(f"{provider.resource_type}/{rid} was deleted (version {version}); see its _history")


def _fetch(ctx: ServerContext, provider: ResourceProvider, rid: str, scope: AccessScope) -> Resource:
    """The resource, or 404 when unknown or outside the caller's scope (the same answer), 410 when deleted."""
    stored = stored_id(provider, rid)
    if stored is None:
        raise _not_found(provider.resource_type, rid)
    with ctx.db.connect() as conn:
        vis = _visibility(ctx, conn, provider, scope)
        visible = vis.clause
        if ctx.freshness.splices(conn, provider):
            if visible is None:
                found = ctx.reads[provider.resource_type].run(conn, id=stored).first()
            else:
                found = ctx.scoped_reads[provider.resource_type].run(conn, id=stored).first()
                found = found if found is not None and vis.admits(found[4], found[5]) else None
            if found is None:
                raise _not_found(provider.resource_type, rid)
            deleted, version, updated, body = found[:4]
            if deleted:
                raise _gone(provider, rid, version)
            if body is not None:
                return Rendered(bytes(body), str(version), as_utc(updated))
        row = conn.execute(read_query(provider, [stored], visible=visible)).mappings().first()
    if row is None:
        raise _not_found(provider.resource_type, rid)
    if provider.versioning is not None and row[provider.versioning.deleted.key]:
        raise _gone(provider, rid, row[provider.versioning.version.key])
    return provider.to_resource(row)


def _subset(resource: Resource, summary: str | None, elements: tuple[str, ...] | None) -> Resource:
    if summary is None and elements is None:
        return resource
    return subset(resource.resource() if isinstance(resource, Rendered) else resource, summary, elements)


def _provider(ctx: ServerContext, resource_type: str, what: str) -> ResourceProvider:
    provider = ctx.registry.get(resource_type)
    if not isinstance(provider, ResourceProvider):
        raise ResourceNotFound(f"{resource_type} supports read and search only, not {what}")
    return provider


def read(ctx: ServerContext, principal: Principal | None, resource_type: str, rid: str,
         items: Sequence[tuple[str, str]] = ()) -> Resource:
    provider = ctx.registry.get(resource_type)
    authorize(ctx, principal, Interaction("read", resource_type, rid))
    if isinstance(provider, StaticProvider):
        with ctx.db.connect() as conn:
            return read_static(provider, conn, rid, items, _static_account(ctx, conn, provider, principal))
    summary, elements = parse_subset(items)
    return _subset(_fetch(ctx, provider, rid, access(ctx, principal)), summary, elements)


def _parse(ctx: ServerContext, provider: ResourceProvider, items: Sequence[tuple[str, str]], strict: bool) -> SearchRequest:
    return parse_search(provider, items, default_count=ctx.settings.fhir.default_count,
                        max_count=ctx.settings.fhir.max_count, strict=strict, providers=ctx.registry.providers)


def _count(ctx: ServerContext, conn: Connection, provider: ResourceProvider, key: Hashable,
           query: Callable[[], Select[Any]]) -> int:
    """A count; for a versioned provider, cached until it has a newer version (the query built on a miss)."""
    if provider.versioning is None:
        return int(conn.execute(query()).scalar_one())
    # keyed by the database that counts and what it holds: a lagging replica's totals are its own
    return ctx.counts.get((database_of(conn), ctx.freshness.generation(conn, provider), key),
                          lambda: int(conn.execute(query()).scalar_one()))


Match = tuple[str, Resource, float | None]  # id, resource, distance (near)


def _rendered_page(conn: Connection, provider: ResourceProvider, rows: Sequence[Any], near: bool) -> list[Match]:
    """Stored bodies as they are; the rows without one (rendered per request) fetched in one query."""
    missing = [row[0] for row in rows if row[1] is None]
    rendered = {row[provider.id_column.key]: provider.to_resource(row) for row in
                conn.execute(read_query(provider, missing, search=True)).mappings()} if missing else {}
    return [(str(row[0]), Rendered(bytes(row[1])) if row[1] is not None else rendered[row[0]],
             row[2] if near else None) for row in rows]


def _run_search(ctx: ServerContext, provider: ResourceProvider, request: SearchRequest, base: str, path: str,
                extra: Sequence[tuple[str, str]], scope: AccessScope) -> dict[str, Any]:
    count, near = request.count, request.near is not None
    with ctx.db.connect() as conn:
        vis = _visibility(ctx, conn, provider, scope)
        splice = not request.includes and ctx.freshness.splices(conn, provider)
        paths = resolve_paths(conn, provider, request, vis.clause)
        where = where_clause(provider, request, paths, vis.clause)
        total = _count(ctx, conn, provider, (request.key, vis.key),
                       lambda: count_query(provider, request, where=where)) if request.counts else None
        query = (body_page_query if splice else page_query)(provider, request, extra_row=1, where=where)
        rows: Sequence[Any] = (conn.execute(query).all() if splice else conn.execute(query).mappings().all()) \
            if count else []
        has_next = len(rows) > count
        rows = rows[:count]
        if splice:
            matches = _rendered_page(conn, provider, rows, near)
        else:
            id_key = provider.id_column.key
            matches = [(str(r[id_key]), provider.to_resource(r), r["_distance_km"] if near else None) for r in rows]
        included = fetch_included(
            conn, ctx.registry, provider, request.includes, rows,
            lambda p: _visibility(ctx, conn, p, scope).clause) if rows and not splice else None
    rtype = provider.resource_type
    entries = [search_entry(base, rtype, rid, _subset(resource, request.summary, request.elements), "match", distance)
               for rid, resource, distance in matches]
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
    last_id = matches[-1][0] if matches else None
    return searchset(base, path, request, entries, total, has_next and bool(count), extra, last_id)


def search_type(ctx: ServerContext, principal: Principal | None, base: str, resource_type: str,
                items: Sequence[tuple[str, str]], *, strict: bool = False,
                extra: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    provider = ctx.registry.get(resource_type)
    authorize(ctx, principal, Interaction("search-type", resource_type))
    if isinstance(provider, StaticProvider):
        with ctx.db.connect() as conn:
            return search_static(provider, conn, base, items, default_count=ctx.settings.fhir.default_count,
                                 max_count=ctx.settings.fhir.max_count, strict=strict, extra=extra,
                                 account=_static_account(ctx, conn, provider, principal))
    request = _parse(ctx, provider, items, strict)
    return _run_search(ctx, provider, request, base, resource_type, extra, access(ctx, principal))


def run_operation(ctx: ServerContext, principal: Principal | None, base: str, resource_type: str, rid: str,
                  operation: str, items: Sequence[tuple[str, str]], *, strict: bool = False,
                  extra: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    provider = _provider(ctx, resource_type, f"${operation}")
    if operation not in provider.operations_by_name:
        raise ResourceNotFound(f"{resource_type} has no operation {operation!r}; "
                               f"available: {', '.join('$' + n for n in provider.operations_by_name) or 'none'}")
    authorize(ctx, principal, Interaction("operation", resource_type, rid, operation))
    request = _parse(ctx, provider, items, strict)
    scope = access(ctx, principal)
    _fetch(ctx, provider, rid, scope)  # the instance must exist and be visible: 404 (or 410) otherwise
    request = bind_operation(provider, request, operation, rid)
    return _run_search(ctx, provider, request, base, f"{resource_type}/{rid}/${operation}", extra, scope)


def _versioned(provider: ResourceProvider) -> Versioning:
    if provider.versioning is None:
        raise ResourceNotFound(f"{provider.resource_type} keeps no versions: _history is not supported")
    return provider.versioning


def vread(ctx: ServerContext, principal: Principal | None, resource_type: str, rid: str, vid: str,
          items: Sequence[tuple[str, str]] = ()) -> Resource:
    provider = _provider(ctx, resource_type, "_history")
    authorize(ctx, principal, Interaction("vread", resource_type, rid))
    versioning = _versioned(provider)
    stored = stored_id(provider, rid)
    if stored is None or not vid.isdigit() or len(vid) > 9:
        raise ResourceNotFound(f"{resource_type}/{rid}/_history/{vid} is not known")
    with ctx.db.connect() as conn:
        row = conn.execute(version_query(versioning, stored, int(vid), _bodies(ctx, conn, provider))).first() \
            if _visible(ctx, conn, provider, stored, access(ctx, principal)) else None
    if row is None:
        raise ResourceNotFound(f"{resource_type}/{rid} has no version {vid}")
    deleted, snapshot, body = row
    if deleted:
        raise ResourceGone(f"version {vid} of {resource_type}/{rid} is its deletion")
    return _subset(_version(provider, snapshot, body), *parse_subset(items))


def _bodies(ctx: ServerContext, conn: Connection, provider: ResourceProvider) -> Any | None:
    """The stored-body column when the bodies may be spliced, else None."""
    spliced = ctx.freshness.splices(conn, provider)  # never for a provider without prerendered bodies
    return provider.prerendered.body if spliced and provider.prerendered else None


def _version(provider: ResourceProvider, snapshot: Any, body: bytes | None) -> Resource:
    return Rendered(bytes(body)) if body is not None else provider.to_resource(snapshot)


def _history(ctx: ServerContext, provider: ResourceProvider, request: HistoryRequest, base: str, path: str,
             stored: Any | None, extra: Sequence[tuple[str, str]], scope: AccessScope) -> dict[str, Any]:
    versioning = _versioned(provider)
    with ctx.db.connect() as conn:
        vis = _visibility(ctx, conn, provider, scope)
        visible = vis.clause
        # one resource's history: its visibility was checked by the caller
        scoped = within(provider, versioning.history_id, visible) if visible is not None and stored is None else None
        total = _count(ctx, conn, provider, (path, request.key, vis.key),
                       lambda: history_count(versioning, request, stored, scoped))
        body = _bodies(ctx, conn, provider)
        rows = conn.execute(history_page(versioning, request, stored, body, scoped)).all() if request.count else []
    entries = [
        history_entry(base, provider.resource_type, str(rid), version, updated,
                      None if deleted else _version(provider, snapshot, stored_body))
        for rid, version, updated, deleted, snapshot, stored_body in rows
    ]
    return history(base, path, request, entries, total, extra)


def _parse_history(ctx: ServerContext, items: Sequence[tuple[str, str]], strict: bool) -> HistoryRequest:
    return parse_history(items, default_count=ctx.settings.fhir.default_count,
                         max_count=ctx.settings.fhir.max_count, strict=strict)


def history_instance(ctx: ServerContext, principal: Principal | None, base: str, resource_type: str, rid: str,
                     items: Sequence[tuple[str, str]], *, strict: bool = False,
                     extra: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    provider = _provider(ctx, resource_type, "_history")
    authorize(ctx, principal, Interaction("history-instance", resource_type, rid))
    versioning = _versioned(provider)
    request = _parse_history(ctx, items, strict)
    stored = stored_id(provider, rid)
    if stored is None:
        raise _not_found(resource_type, rid)
    scope = access(ctx, principal)
    with ctx.db.connect() as conn:
        known = _visible(ctx, conn, provider, stored, scope) and \
            conn.execute(history_count(versioning, HistoryRequest(), stored)).scalar_one()
    if not known:
        raise _not_found(resource_type, rid)
    return _history(ctx, provider, request, base, f"{resource_type}/{rid}/_history", stored, extra, scope)


def history_type(ctx: ServerContext, principal: Principal | None, base: str, resource_type: str,
                 items: Sequence[tuple[str, str]], *, strict: bool = False,
                 extra: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    provider = _provider(ctx, resource_type, "_history")
    authorize(ctx, principal, Interaction("history-type", resource_type))
    request = _parse_history(ctx, items, strict)
    return _history(ctx, provider, request, base, f"{resource_type}/_history", None, extra, access(ctx, principal))


def capabilities(ctx: ServerContext, principal: Principal | None, base: str) -> dict[str, Any]:
    authorize(ctx, principal, Interaction("capabilities"))
    return for_base(ctx.capability_statement, base)
