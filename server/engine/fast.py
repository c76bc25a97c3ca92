"""The hot path: the interactions users repeat, answered on the event loop from what is at hand (the freshness
snapshot, the caller's visibility, the statements compiled once) and one statement on the driver's own
connection (server.storage.hot): no worker thread, no pool checkout, no SQLAlchemy per request.

Each function gives the same answer and raises the same errors as the interaction it stands for, or returns None
whenever something is not at hand (a snapshot due, a visibility not built yet, a body not stored, no hot database):
the pipeline then runs that interaction in a worker thread, which builds what was missing for the next request."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from server.context import ServerContext
from server.engine.caller import Caller
from server.engine.instants import as_utc
from server.engine.provider import ResourceProvider
from server.engine.reads import Resource, capabilities as capability_statement, gone, not_found, subset_of
from server.engine.rendered import Rendered
from server.search.ids import stored_id
from server.search.request import parse_subset


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
