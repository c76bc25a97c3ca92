"""The interactions over a versioned provider's kept versions: vread, history-instance, history-type."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

from server.engine.context import ServerContext
from server.engine.bundle import history, history_entry
from server.engine.caller import Caller
from server.declare.provider import ResourceProvider, Versioning
from server.engine.reads import (
    Resource,
    count,
    not_found,
    resource_provider,
    subset_of,
    visibility,
    visible,
)
from server.declare.rendered import Rendered
from server.errors import ResourceGone, ResourceNotFound
from server.search.history import (
    HistoryRequest,
    history_count,
    history_page,
    parse_history,
    version_query,
    write_cursor,
)
from server.params.ids import stored_id
from server.search.request import parse_subset
from server.search.sql import within


def _versioned(provider: ResourceProvider) -> Versioning:
    if provider.versioning is None:
        raise ResourceNotFound(f"{provider.resource_type} keeps no versions: _history is not supported")
    return provider.versioning


def _bodies(ctx: ServerContext, conn: Connection, provider: ResourceProvider) -> Any | None:
    """The stored-body column when the bodies may be spliced, else None."""
    spliced = ctx.freshness.splices(conn, provider)  # never for a provider without prerendered bodies
    return provider.prerendered.body if spliced and provider.prerendered else None


def _version(provider: ResourceProvider, snapshot: Any, body: bytes | None) -> Resource:
    return Rendered(bytes(body)) if body is not None else provider.to_resource(snapshot)


def vread(ctx: ServerContext, caller: Caller, resource_type: str, rid: str, vid: str,
          items: Sequence[tuple[str, str]] = ()) -> Resource:
    provider = resource_provider(ctx, resource_type, "_history")
    versioning = _versioned(provider)
    stored = stored_id(provider, rid)
    if stored is None or not vid.isdigit() or len(vid) > 9:
        raise ResourceNotFound(f"{resource_type}/{rid}/_history/{vid} is not known")
    with ctx.db.connect() as conn:
        row = conn.execute(version_query(versioning, stored, int(vid), _bodies(ctx, conn, provider))).first() \
            if visible(ctx, conn, provider, stored, caller) else None
    if row is None:
        raise ResourceNotFound(f"{resource_type}/{rid} has no version {vid}")
    deleted, snapshot, body = row
    if deleted:
        raise ResourceGone(f"version {vid} of {resource_type}/{rid} is its deletion")
    return subset_of(_version(provider, snapshot, body), *parse_subset(items))


def _history(ctx: ServerContext, provider: ResourceProvider, request: HistoryRequest, base: str, path: str,
             stored: Any | None, caller: Caller) -> dict[str, Any]:
    versioning = _versioned(provider)
    with ctx.db.connect() as conn:
        vis = visibility(ctx, conn, provider, caller)
        clause = vis.clause
        # one resource's history: its visibility was checked by the caller
        scoped = within(provider, versioning.history_id, clause) if clause is not None and stored is None else None
        synced = ctx.freshness.snapshot(conn).synced  # every version before it is committed: a fixed set
        request = request.bounded(synced)
        total = count(ctx, conn, provider, (path, request.key, vis.key),
                      lambda: history_count(versioning, request, stored, scoped))
        body = _bodies(ctx, conn, provider)
        rows = conn.execute(history_page(versioning, request, stored, body, scoped, extra_row=1)).all() \
            if request.count else []
    has_next = len(rows) > request.count
    rows = rows[:request.count]
    entries = [
        history_entry(base, provider.resource_type, str(rid), version, updated,
                      None if deleted else _version(provider, snapshot, stored_body))
        for rid, version, updated, deleted, snapshot, stored_body in rows
    ]
    last = write_cursor((rows[-1][2], rows[-1][1], str(rows[-1][0]))) if rows else None
    return history(base, path, request, entries, total, has_next, last, request.till or synced)


def _parse_history(ctx: ServerContext, items: Sequence[tuple[str, str]], strict: bool) -> HistoryRequest:
    return parse_history(items, default_count=ctx.settings.fhir.default_count,
                         max_count=ctx.settings.fhir.max_count, strict=strict)


def history_instance(ctx: ServerContext, caller: Caller, base: str, resource_type: str, rid: str,
                     items: Sequence[tuple[str, str]], *, strict: bool = False) -> dict[str, Any]:
    provider = resource_provider(ctx, resource_type, "_history")
    versioning = _versioned(provider)
    request = _parse_history(ctx, items, strict)
    stored = stored_id(provider, rid)
    if stored is None:
        raise not_found(resource_type, rid)
    with ctx.db.connect() as conn:
        known = visible(ctx, conn, provider, stored, caller) and \
            conn.execute(history_count(versioning, HistoryRequest(), stored)).scalar_one()
    if not known:
        raise not_found(resource_type, rid)
    return _history(ctx, provider, request, base, f"{resource_type}/{rid}/_history", stored, caller)


def history_type(ctx: ServerContext, caller: Caller, base: str, resource_type: str,
                 items: Sequence[tuple[str, str]], *, strict: bool = False) -> dict[str, Any]:
    provider = resource_provider(ctx, resource_type, "_history")
    request = _parse_history(ctx, items, strict)
    return _history(ctx, provider, request, base, f"{resource_type}/_history", None, caller)
