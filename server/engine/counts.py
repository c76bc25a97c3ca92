"""Counts, cached per data generation: a versioned provider's count is kept until it, or a type it is scoped
through, has a newer version."""
from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from sqlalchemy import Select

from server.declare.provider import ResourceProvider
from server.engine.context import ServerContext
from server.storage.steps import Steps, database, scalar
from server.storage.freshness import Snapshot
from server.storage.prepared import Bound


def count(ctx: ServerContext, provider: ResourceProvider, snapshot: Snapshot, key: Hashable,
          query: Callable[[], Steps[Bound | Select[Any]]], *, kept_only: bool = False,
          known: int | None = None) -> Steps[int | None]:
    """A count; for a versioned provider, cached until it has a newer version (the query built on a miss).
    `kept_only`: the count kept, None when there is none (nothing counted); `known`: the count found otherwise
    (a page that holds every match), kept as if counted."""
    def counted() -> Steps[int]:
        return int((yield from scalar((yield from query()), bounded=False)))

    # what the caller sees of the provider depends on the types it is scoped through: their data generations too
    deciding = (provider, *ctx.registry.scoped_through(provider.resource_type))
    if any(not isinstance(p, ResourceProvider) or p.versioning is None for p in deciding):
        return known if known is not None or kept_only else (yield from counted())
    # keyed by the database that counts and what it holds: a lagging replica's totals are its own
    kept_as = ((yield from database()), tuple(snapshot.generations.get(p.resource_type) for p in deciding), key)
    if known is not None:
        ctx.counts.put(kept_as, known)
        return known
    kept = ctx.counts.peek(kept_as)
    if kept is None and not kept_only:
        kept = yield from counted()
        ctx.counts.put(kept_as, kept)
    return kept
