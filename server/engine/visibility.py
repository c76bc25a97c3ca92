"""What a caller sees of a provider, decided here only: nothing of a type its SMART scopes do not reach, else its
access scope's visibility (server.access.tenancy: built once per data generation, at hand afterwards), a SMART
scope's query compiled through the one path every query that selects takes (server.engine.conditions); and whether
it sees one row. The engine's interactions and Bulk Data ask here; no one asks the scoper directly (a test
checks it)."""
from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from sqlalchemy import ColumnElement, Connection, literal, or_, select

from server.access.smart_scopes import Query
from server.access.tenancy import NOTHING, AccessScope, Visibility, shown_gone
from server.declare.provider import ResourceProvider, StaticProvider
from server.engine.caller import Caller
from server.engine.conditions import Condition
from server.engine.context import ServerContext
from server.engine.drivers import in_thread
from server.engine.parsing import parse_selection
from server.storage.steps import Steps, blocking, rows
from server.search.hops import crossed
from server.search.request import SearchRequest
from server.storage.freshness import Snapshot

__all__ = ["known_visibility", "sees", "shown_gone", "static_account", "visibilities_crossed", "visibility",
           "visibility_of"]


def _beyond_smart_scopes(provider: ResourceProvider, caller: Caller) -> bool:
    """A type the token's SMART scopes do not reach: the caller sees nothing of it (so _include/_revinclude never
    return it, a chain through it matches nothing), whichever path asks."""
    return provider.resource_type in caller.scope.unseen


def visibility(ctx: ServerContext, conn: Connection, provider: ResourceProvider, caller: Caller) -> Visibility:
    """What the caller sees of the provider: SMART scopes, then its access scope (built on a miss)."""
    if _beyond_smart_scopes(provider, caller):
        return NOTHING
    return ctx.scoper.visibility(conn, provider, caller.scope, lambda *args: _narrowed(ctx, *args))


def _narrowed(ctx: ServerContext, conn: Connection, provider: ResourceProvider, scope: AccessScope,
              vis: Visibility, queries: tuple[Query, ...]) -> tuple[ColumnElement[bool], Hashable]:
    """What a token's scope queries on the provider select (a union), each compiled as `[type]?query` is for the
    caller without them (`scope`, seeing `vis` of the provider): the same look-ups, chains and `_has`, among what
    that caller sees of every type crossed. On every row, deleted ones too: a deletion stays seen where its
    resource was. With it, what each query was compiled against (Condition.others_key: the caller's view of each
    other type crossed), which the visibility's key holds."""
    caller = Caller(None, scope)
    snapshot = ctx.freshness.snapshot(conn)

    def selects(query: Query) -> Steps[tuple[ColumnElement[bool], Hashable]]:
        request = parse_selection(ctx, provider, query, "a scope's query")
        others = yield from visibilities_crossed(ctx, caller, request, snapshot)
        condition = Condition(ctx, provider, request, snapshot, vis, others)
        return (yield from condition.selects()), condition.others_key

    compiled = [in_thread(ctx, selects(query), conn) for query in queries]
    return or_(*(c for c, _ in compiled)), tuple(k for _, k in compiled)


def known_visibility(ctx: ServerContext, provider: ResourceProvider, caller: Caller, snapshot: Snapshot,
                     database_name: str) -> Visibility | None:
    """`visibility` when already built for this snapshot, without a query; None when it is not built yet."""
    if _beyond_smart_scopes(provider, caller):
        return NOTHING
    return ctx.scoper.peek(provider, caller.scope, snapshot, database_name)


def visibility_of(ctx: ServerContext, provider: ResourceProvider, caller: Caller,
                  snapshot: Snapshot) -> Steps[Visibility]:
    """The caller's visibility of the provider: at hand once built for this snapshot, else built in a thread."""
    return (yield from blocking(lambda conn: visibility(ctx, conn, provider, caller),
                                lambda name: known_visibility(ctx, provider, caller, snapshot, name)))


def visibilities_crossed(ctx: ServerContext, caller: Caller, request: SearchRequest,
                         snapshot: Snapshot) -> Steps[dict[str, Visibility]]:
    """What the caller sees of each other type the query's look-ups, chains and _has read: each decides its matches
    (and so which kept page serves it: a provider open to all, chained to a scoped one, is not the same page to
    all)."""
    others: dict[str, Visibility] = {}
    for other in crossed(ctx.registry.providers, request):
        others[other.resource_type] = yield from visibility_of(ctx, other, caller, snapshot)
    return others


def sees(ctx: ServerContext, provider: ResourceProvider, vis: Visibility, stored: Any,
         row: tuple[Any, Any, bool] | None = None) -> Steps[bool]:
    """Whether the caller sees the row `stored` (False when there is none): from its (partition, path, deleted) when given
    and enough, else with one query, the same for an unknown id."""
    if vis.clause is None:
        return True
    if row is not None and vis.by_row:
        return vis.admits(*row)
    query = select(literal(1)).select_from(provider.table).where(provider.id_column == stored, vis.clause)
    return bool((yield from rows(query)))


def static_account(ctx: ServerContext, conn: Connection, provider: StaticProvider, caller: Caller) -> str | None:
    return ctx.scoper.account(conn, caller.scope) if provider.per_account else None
