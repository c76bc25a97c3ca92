"""What a search's chained and _has parameters need of the server: each hop's scope for this caller (compiled into
the search's one condition, server.search.chains), and the totals' cache key extended with what the other types
crossed hold."""
from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from sqlalchemy import Connection, Select

from server.context import ServerContext
from server.engine.caller import Caller
from server.engine.provider import ResourceProvider
from server.engine.reads import count, visibility
from server.search.hops import compile_joined, crossed
from server.search.request import SearchRequest


def joined_conditions(ctx: ServerContext, conn: Connection, caller: Caller, request: SearchRequest) -> dict[Any, Any]:
    """The conditions of the request's chained and _has parameters, for where_clause's `found`."""
    if not request.joined:
        return {}
    return compile_joined(conn, ctx.registry.providers, request,
                          lambda provider: visibility(ctx, conn, provider, caller).clause)


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
