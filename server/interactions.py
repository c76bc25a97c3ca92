"""The interactions as plain functions returning FHIR dicts (no HTTP here)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from server.auth import Principal
from server.bundle import history, history_entry, search_entry, searchset
from server.capabilities import for_base
from server.context import ServerContext
from server.errors import Forbidden, ResourceGone, ResourceNotFound, operation_outcome
from server.interaction import Interaction
from server.provider import ResourceProvider, StaticProvider, Versioning
from server.search.history import (
    HistoryRequest,
    history_count,
    history_page,
    parse_history,
    version_query,
)
from server.search.include import MAX_INCLUDED, fetch_included
from server.search.request import (
    SearchRequest,
    bind_operation,
    parse_search,
    parse_subset,
)
from server.search.sql import (
    count_query,
    page_query,
    read_query,
    resolve_paths,
    stored_id,
)
from server.static import read_static, search_static
from server.subset import subset


def authorize(ctx: ServerContext, principal: Principal | None, interaction: Interaction) -> None:
    if principal is None:
        return  # only capabilities may be public, by settings
    denials = [d for d in ctx.pm.hook.authorize(principal=principal, interaction=interaction, settings=ctx.settings) if d]
    if denials:
        raise Forbidden("; ".join(denials))


def _not_found(resource_type: str, rid: str) -> ResourceNotFound:
    return ResourceNotFound(f"{resource_type}/{rid} is not known")


def _fetch(ctx: ServerContext, provider: ResourceProvider, rid: str) -> dict[str, Any]:
    stored = stored_id(provider, rid)
    if stored is None:
        raise _not_found(provider.resource_type, rid)
    with ctx.db.connect() as conn:
        row = conn.execute(read_query(provider, [stored])).mappings().first()
    if row is None:
        raise _not_found(provider.resource_type, rid)
    if provider.versioning is not None and row[provider.versioning.deleted.key]:
        raise ResourceGone(f"{provider.resource_type}/{rid} was deleted "
                           f"(version {row[provider.versioning.version.key]}); see its _history")
    return provider.to_resource(row)


def _provider(ctx: ServerContext, resource_type: str, what: str) -> ResourceProvider:
    provider = ctx.registry.get(resource_type)
    if not isinstance(provider, ResourceProvider):
        raise ResourceNotFound(f"{resource_type} supports read and search only, not {what}")
    return provider


def read(ctx: ServerContext, principal: Principal | None, resource_type: str, rid: str,
         items: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    provider = ctx.registry.get(resource_type)
    authorize(ctx, principal, Interaction("read", resource_type, rid))
    if isinstance(provider, StaticProvider):
        with ctx.db.connect() as conn:
            return read_static(provider, conn, rid, items)
    summary, elements = parse_subset(items)
    return subset(_fetch(ctx, provider, rid), summary, elements)


def _parse(ctx: ServerContext, provider: ResourceProvider, items: Sequence[tuple[str, str]], strict: bool) -> SearchRequest:
    return parse_search(provider, items, default_count=ctx.settings.fhir.default_count,
                        max_count=ctx.settings.fhir.max_count, strict=strict, providers=ctx.registry.providers)


def _run_search(ctx: ServerContext, provider: ResourceProvider, request: SearchRequest, base: str, path: str,
                extra: Sequence[tuple[str, str]]) -> dict[str, Any]:
    count = request.count
    with ctx.db.connect() as conn:
        paths = resolve_paths(conn, provider, request)
        total = conn.execute(count_query(provider, request, paths)).scalar_one() if request.counts else None
        rows = conn.execute(page_query(provider, request, paths, extra_row=1)).mappings().all() if count else []
        has_next = len(rows) > count if total is None else request.skip + count < total
        rows = rows[:count]
        included = fetch_included(conn, ctx.registry, provider, request.includes, rows) if rows else None
    near = request.near is not None
    entries = [search_entry(base, subset(provider.to_resource(r), request.summary, request.elements), "match",
                            r["_distance_km"] if near else None) for r in rows]
    if included is not None:
        entries += [search_entry(base, p.to_resource(r), "include") for p, r in included.rows]
        if included.truncated:
            entries.append({"resource": operation_outcome(
                "warning", "too-costly", f"_revinclude stopped at {MAX_INCLUDED} included resources"),
                "search": {"mode": "outcome"}})
    return searchset(base, path, request, entries, total, has_next and bool(count), extra)


def search_type(ctx: ServerContext, principal: Principal | None, base: str, resource_type: str,
                items: Sequence[tuple[str, str]], *, strict: bool = False,
                extra: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    provider = ctx.registry.get(resource_type)
    authorize(ctx, principal, Interaction("search-type", resource_type))
    if isinstance(provider, StaticProvider):
        with ctx.db.connect() as conn:
            return search_static(provider, conn, base, items, default_count=ctx.settings.fhir.default_count,
                                 max_count=ctx.settings.fhir.max_count, strict=strict, extra=extra)
    request = _parse(ctx, provider, items, strict)
    return _run_search(ctx, provider, request, base, resource_type, extra)


def run_operation(ctx: ServerContext, principal: Principal | None, base: str, resource_type: str, rid: str,
                  operation: str, items: Sequence[tuple[str, str]], *, strict: bool = False,
                  extra: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    provider = _provider(ctx, resource_type, f"${operation}")
    if operation not in provider.operations_by_name:
        raise ResourceNotFound(f"{resource_type} has no operation {operation!r}; "
                               f"available: {', '.join('$' + n for n in provider.operations_by_name) or 'none'}")
    authorize(ctx, principal, Interaction("operation", resource_type, rid, operation))
    request = _parse(ctx, provider, items, strict)
    _fetch(ctx, provider, rid)  # the instance must exist: 404 (or 410) otherwise
    request = bind_operation(provider, request, operation, rid)
    return _run_search(ctx, provider, request, base, f"{resource_type}/{rid}/${operation}", extra)


def _versioned(provider: ResourceProvider) -> Versioning:
    if provider.versioning is None:
        raise ResourceNotFound(f"{provider.resource_type} keeps no versions: _history is not supported")
    return provider.versioning


def vread(ctx: ServerContext, principal: Principal | None, resource_type: str, rid: str, vid: str,
          items: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    provider = _provider(ctx, resource_type, "_history")
    authorize(ctx, principal, Interaction("vread", resource_type, rid))
    versioning = _versioned(provider)
    stored = stored_id(provider, rid)
    if stored is None or not vid.isdigit() or len(vid) > 9:
        raise ResourceNotFound(f"{resource_type}/{rid}/_history/{vid} is not known")
    with ctx.db.connect() as conn:
        row = conn.execute(version_query(versioning, stored, int(vid))).first()
    if row is None:
        raise ResourceNotFound(f"{resource_type}/{rid} has no version {vid}")
    deleted, snapshot = row
    if deleted:
        raise ResourceGone(f"version {vid} of {resource_type}/{rid} is its deletion")
    return subset(provider.to_resource(snapshot), *parse_subset(items))


def _history(ctx: ServerContext, provider: ResourceProvider, request: HistoryRequest, base: str, path: str,
             stored: Any | None, extra: Sequence[tuple[str, str]]) -> dict[str, Any]:
    versioning = _versioned(provider)
    with ctx.db.connect() as conn:
        total = conn.execute(history_count(versioning, request, stored)).scalar_one()
        rows = conn.execute(history_page(versioning, request, stored)).all() if request.count else []
    entries = [
        history_entry(base, provider.resource_type, str(rid), version, updated,
                      None if deleted else provider.to_resource(snapshot))
        for rid, version, updated, deleted, snapshot in rows
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
    with ctx.db.connect() as conn:
        known = conn.execute(history_count(versioning, HistoryRequest(), stored)).scalar_one()
    if not known:
        raise _not_found(resource_type, rid)
    return _history(ctx, provider, request, base, f"{resource_type}/{rid}/_history", stored, extra)


def history_type(ctx: ServerContext, principal: Principal | None, base: str, resource_type: str,
                 items: Sequence[tuple[str, str]], *, strict: bool = False,
                 extra: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    provider = _provider(ctx, resource_type, "_history")
    authorize(ctx, principal, Interaction("history-type", resource_type))
    request = _parse_history(ctx, items, strict)
    return _history(ctx, provider, request, base, f"{resource_type}/_history", None, extra)


def capabilities(ctx: ServerContext, principal: Principal | None, base: str) -> dict[str, Any]:
    authorize(ctx, principal, Interaction("capabilities"))
    return for_base(ctx.capability_statement, base)
