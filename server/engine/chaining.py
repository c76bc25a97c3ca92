"""What a search's chained and _has parameters need of the server: each hop's scope for this caller (compiled into
the search's one condition, server.search.hops), the conditions kept while the data they were compiled against
stands, and the totals' cache key extended with what the other types crossed hold."""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from functools import partial
from typing import Any

from sqlalchemy import ColumnElement, Connection, Select

from server.engine.context import ServerContext
from server.engine.caller import Caller
from server.declare.provider import ResourceProvider
from server.engine.reads import count, visibility
from server.search.chains import Chained, parse_request
from server.search.hops import compile_chained, crossed
from server.search.request import SearchRequest
from server.search.sql import JOINED
from server.storage.freshness import database_of

def forget(ctx: ServerContext) -> None:
    """Drop the conditions kept for this context (benchmarks of a first request)."""
    ctx.conditions.clear()


def joined_conditions(ctx: ServerContext, conn: Connection, caller: Caller, request: SearchRequest) -> dict[Any, Any]:
    """The conditions of the request's chained and _has parameters, for where_clause's `found`. Kept when every
    type crossed keeps versions (the data generations then say when they no longer hold); else built each time."""
    if not request.joined:
        return {}
    providers = ctx.registry.providers

    def clause(provider: ResourceProvider) -> ColumnElement[bool] | None:
        return visibility(ctx, conn, provider, caller).clause

    found: dict[Any, Any] = {}
    for joined in request.joined:
        assert isinstance(joined, Chained)
        crossing = [providers[t] for t in joined.types[1:]]
        build = partial(compile_chained, conn, providers, joined, clause)
        if any(p.versioning is None for p in crossing):
            found[(JOINED, joined.key, joined.raw)] = build()
            continue
        key = (database_of(conn), ctx.freshness.snapshot(conn).stamp, request.resource_type, joined.key, joined.raw,
               tuple(visibility(ctx, conn, p, caller).key for p in crossing))
        found[(JOINED, joined.key, joined.raw)] = ctx.conditions.get(key, build)
    return found


def total(ctx: ServerContext, conn: Connection, provider: ResourceProvider, caller: Caller, request: SearchRequest,
          key: Hashable, query: Callable[[], Select[Any]]) -> int:
    """The search's count, cached as any count (server.engine.reads.count) with, for each other type a chain
    crosses, what the caller sees of it and its data generation; counted every time when one of them keeps no
    versions (its changes would go unseen)."""
    others = crossed(ctx.registry.providers, request)
    if any(p.versioning is None for p in others):
        return int(conn.execute(query()).scalar_one())
    if others:
        key = (key, tuple((p.resource_type, visibility(ctx, conn, p, caller).key, ctx.freshness.generation(conn, p))
                          for p in others))
    return count(ctx, conn, provider, key, query)


def parse(ctx: ServerContext, provider: ResourceProvider, items: Sequence[tuple[str, str]],
          strict: bool) -> SearchRequest:
    """The search as this server takes it: its limits, its chains over the types it serves."""
    return parse_request(provider, items, default_count=ctx.settings.fhir.default_count,
                         max_count=ctx.settings.fhir.max_count, strict=strict, providers=ctx.registry.providers)
