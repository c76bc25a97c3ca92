"""The four interactions as plain functions returning FHIR dicts (no HTTP here)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from server.auth import Principal
from server.bundle import searchset
from server.capabilities import for_base
from server.context import ServerContext
from server.errors import Forbidden, ResourceNotFound
from server.interaction import Interaction
from server.provider import ResourceProvider
from server.search.request import SearchRequest, bind_operation, parse_search
from server.search.sql import coerce_id, count_query, page_query, read_query
from server.search.values import FHIR_ID


def authorize(ctx: ServerContext, principal: Principal | None, interaction: Interaction) -> None:
    if principal is None:
        return  # only capabilities may be public, by settings
    denials = [d for d in ctx.pm.hook.authorize(principal=principal, interaction=interaction, settings=ctx.settings) if d]
    if denials:
        raise Forbidden("; ".join(denials))


def _not_found(resource_type: str, rid: str) -> ResourceNotFound:
    return ResourceNotFound(f"{resource_type}/{rid} is not known")


def _fetch(ctx: ServerContext, provider: ResourceProvider, rid: str) -> dict[str, Any]:
    stored = coerce_id(provider.id_column, rid) if FHIR_ID.fullmatch(rid) else None
    if stored is None:
        raise _not_found(provider.resource_type, rid)
    with ctx.db.connect() as conn:
        row = conn.execute(read_query(provider, stored)).mappings().first()
    if row is None:
        raise _not_found(provider.resource_type, rid)
    return provider.to_resource(row)


def read(ctx: ServerContext, principal: Principal | None, resource_type: str, rid: str) -> dict[str, Any]:
    provider = ctx.registry.get(resource_type)
    authorize(ctx, principal, Interaction("read", resource_type, rid))
    return _fetch(ctx, provider, rid)


def _parse(ctx: ServerContext, provider: ResourceProvider, items: Sequence[tuple[str, str]], strict: bool) -> SearchRequest:
    return parse_search(provider, items, default_count=ctx.settings.fhir.default_count,
                        max_count=ctx.settings.fhir.max_count, strict=strict)


def _run_search(ctx: ServerContext, provider: ResourceProvider, request: SearchRequest, base: str, path: str,
                extra: Sequence[tuple[str, str]]) -> dict[str, Any]:
    with ctx.db.connect() as conn:
        total = conn.execute(count_query(provider, request)).scalar_one()
        rows = conn.execute(page_query(provider, request)).mappings().all() if request.count else []
    return searchset(base, path, request, (provider.to_resource(r) for r in rows), total, extra)


def search_type(ctx: ServerContext, principal: Principal | None, base: str, resource_type: str,
                items: Sequence[tuple[str, str]], *, strict: bool = False,
                extra: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    provider = ctx.registry.get(resource_type)
    authorize(ctx, principal, Interaction("search-type", resource_type))
    request = _parse(ctx, provider, items, strict)
    return _run_search(ctx, provider, request, base, resource_type, extra)


def run_operation(ctx: ServerContext, principal: Principal | None, base: str, resource_type: str, rid: str,
                  operation: str, items: Sequence[tuple[str, str]], *, strict: bool = False,
                  extra: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    provider = ctx.registry.get(resource_type)
    if operation not in provider.operations_by_name:
        raise ResourceNotFound(f"{resource_type} has no operation {operation!r}; "
                               f"available: {', '.join('$' + n for n in provider.operations_by_name) or 'none'}")
    authorize(ctx, principal, Interaction("operation", resource_type, rid, operation))
    request = _parse(ctx, provider, items, strict)
    _fetch(ctx, provider, rid)  # the instance must exist: 404 otherwise
    request = bind_operation(provider, request, operation, rid)
    return _run_search(ctx, provider, request, base, f"{resource_type}/{rid}/${operation}", extra)


def capabilities(ctx: ServerContext, principal: Principal | None, base: str) -> dict[str, Any]:
    authorize(ctx, principal, Interaction("capabilities"))
    return for_base(ctx.capability_statement, base)
