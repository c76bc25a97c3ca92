"""A search's total when its chained, _has or look-up parameters cross other types: the count's cache key extended
with what the caller sees of each type crossed and its data generation (the conditions themselves are compiled by
server.engine.conditions)."""
from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

from sqlalchemy import Select

from server.access.tenancy import Visibility
from server.declare.provider import ResourceProvider
from server.engine.context import ServerContext
from server.engine.counts import count
from server.storage.steps import Steps, scalar
from server.search.hops import crossed
from server.search.request import SearchRequest
from server.storage.freshness import Snapshot
from server.storage.prepared import Bound


def total(ctx: ServerContext, provider: ResourceProvider, request: SearchRequest, snapshot: Snapshot,
          others: Mapping[str, Visibility], key: Hashable, query: Callable[[], Steps[Bound | Select[Any]]], *,
          kept_only: bool = False, known: int | None = None) -> Steps[int | None]:
    """The search's count, cached as any count (server.engine.counts.count) with, for each other type a chain
    crosses, what the caller sees of it (`others`) and its data generation; counted every time when one of them
    keeps no versions (its changes would go unseen). `kept_only`, `known`: as counts.count."""
    crossing = crossed(ctx.registry.providers, request)
    if any(p.versioning is None for p in crossing):
        if known is not None or kept_only:
            return known
        return int((yield from scalar((yield from query()), bounded=False)))
    if crossing:
        key = (key, tuple((p.resource_type, others[p.resource_type].key, snapshot.generations.get(p.resource_type))
                          for p in crossing))
    return (yield from count(ctx, provider, snapshot, key, query, kept_only=kept_only, known=known))
