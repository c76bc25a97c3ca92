"""What a search's chained and _has parameters need of the server: each hop's scope for this caller (compiled into
the search's one condition, server.search.hops), the conditions kept while the data they were compiled against
stands, and the totals' cache key extended with what the other types crossed hold. Steps (server.engine.steps):
a condition kept is at hand; one to compile is built in a thread (its look-ups run on the connection it holds)."""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select

from server.access.tenancy import Visibility
from server.declare.provider import ResourceProvider
from server.engine.caller import Caller
from server.engine.context import ServerContext
from server.engine.counts import count
from server.engine.visibility import seen_by
from server.engine.steps import Steps, blocking, database, scalar
from server.search.chains import Chained
from server.search.hops import chain_types, compile_chained, crossed
from server.search.request import SearchRequest
from server.search.sql import JOINED
from server.storage.freshness import Snapshot


def _seen(ctx: ServerContext, caller: Caller, snapshot: Snapshot,
          providers: Sequence[ResourceProvider]) -> Steps[dict[str, Visibility]]:
    seen: dict[str, Visibility] = {}
    for provider in providers:
        seen[provider.resource_type] = yield from seen_by(ctx, provider, caller, snapshot)
    return seen


def joined_conditions(ctx: ServerContext, caller: Caller, request: SearchRequest,
                      snapshot: Snapshot) -> Steps[dict[Any, Any]]:
    """The conditions of the request's chained and _has parameters, for where_clause's `found`. Kept when every
    type crossed keeps versions (the data generations then say when they no longer hold); else built each time."""
    found: dict[Any, Any] = {}
    if not request.joined:
        return found
    providers = ctx.registry.providers
    name = yield from database()
    for joined in request.joined:
        assert isinstance(joined, Chained)
        crossing = [providers[t] for t in chain_types(joined)]
        seen = yield from _seen(ctx, caller, snapshot, crossing)

        def build(conn: Any, joined: Chained = joined, seen: dict[str, Visibility] = seen) -> ColumnElement[bool]:
            return compile_chained(conn, providers, joined, lambda p: seen[p.resource_type].clause)

        if any(p.versioning is None for p in crossing):
            found[(JOINED, joined.key, joined.raw)] = yield from blocking(build)
            continue
        key = (name, snapshot.stamp, request.resource_type, joined.key, joined.raw,
               tuple(seen[p.resource_type].key for p in crossing))
        found[(JOINED, joined.key, joined.raw)] = yield from blocking(
            lambda conn, key=key, build=build: ctx.conditions.get(key, lambda: build(conn)),
            lambda _: ctx.conditions.peek(key))
    return found


def total(ctx: ServerContext, provider: ResourceProvider, caller: Caller, request: SearchRequest,
          snapshot: Snapshot, key: Hashable, query: Callable[[], Steps[Select[Any]]], *, kept_only: bool = False,
          known: int | None = None) -> Steps[int | None]:
    """The search's count, cached as any count (server.engine.counts.count) with, for each other type a chain
    crosses, what the caller sees of it and its data generation; counted every time when one of them keeps no
    versions (its changes would go unseen). `kept_only`, `known`: as counts.count."""
    others = crossed(ctx.registry.providers, request)
    if any(p.versioning is None for p in others):
        if known is not None or kept_only:
            return known
        return int((yield from scalar(ctx, (yield from query()), bounded=False)))
    if others:
        seen = yield from _seen(ctx, caller, snapshot, others)
        key = (key, tuple((p.resource_type, seen[p.resource_type].key, snapshot.generations.get(p.resource_type))
                          for p in others))
    return (yield from count(ctx, provider, snapshot, key, query, kept_only=kept_only, known=known))
