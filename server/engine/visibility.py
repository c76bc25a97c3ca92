"""What a caller sees of a provider, decided here only: nothing of a type its SMART scopes do not reach, else its
access scope's visibility (server.access.tenancy: built once per data generation, at hand afterwards); and whether
it sees one row. The engine's interactions and Bulk Data ask here; no one asks the scoper directly (a test
checks it)."""
from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, literal, select

from server.access.tenancy import NOTHING, Visibility
from server.declare.provider import ResourceProvider, StaticProvider
from server.engine.caller import Caller
from server.engine.context import ServerContext
from server.engine.steps import Steps, blocking, rows
from server.storage.freshness import Snapshot


def _beyond_smart_scopes(provider: ResourceProvider, caller: Caller) -> bool:
    """A type the token's SMART scopes do not reach: the caller sees nothing of it (so _include/_revinclude never
    return it), whichever path asks."""
    scopes = caller.principal.scopes if caller.principal is not None else None
    return scopes is not None and not scopes.sees(provider.resource_type)


def visibility(ctx: ServerContext, conn: Connection, provider: ResourceProvider, caller: Caller) -> Visibility:
    """What the caller sees of the provider: SMART scopes, then its access scope (built on a miss)."""
    if _beyond_smart_scopes(provider, caller):
        return NOTHING
    return ctx.scoper.visibility(conn, provider, caller.scope)


def known_visibility(ctx: ServerContext, provider: ResourceProvider, caller: Caller, snapshot: Snapshot,
                     database_name: str) -> Visibility | None:
    """`visibility` when already built for this snapshot, without a query; None when it is not built yet."""
    if _beyond_smart_scopes(provider, caller):
        return NOTHING
    return ctx.scoper.peek(provider, caller.scope, snapshot, database_name)


def seen_by(ctx: ServerContext, provider: ResourceProvider, caller: Caller, snapshot: Snapshot) -> Steps[Visibility]:
    """The caller's visibility of the provider: at hand once built for this snapshot, else built in a thread."""
    return (yield from blocking(lambda conn: visibility(ctx, conn, provider, caller),
                                lambda name: known_visibility(ctx, provider, caller, snapshot, name)))


def sees(ctx: ServerContext, provider: ResourceProvider, vis: Visibility, stored: Any,
         row: tuple[Any, Any] | None = None) -> Steps[bool]:
    """Whether the caller sees the row `stored` (False when there is none): from its (partition, path) when given
    and enough, else with one query, the same for an unknown id."""
    if vis.clause is None:
        return True
    if row is not None and vis.by_row:
        return vis.admits(*row)
    query = select(literal(1)).select_from(provider.table).where(provider.id_column == stored, vis.clause)
    return bool((yield from rows(ctx, query)))


def static_account(ctx: ServerContext, conn: Connection, provider: StaticProvider, caller: Caller) -> str | None:
    return ctx.scoper.account(conn, caller.scope) if provider.per_account else None
