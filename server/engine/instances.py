"""One instance of a provider, as every interaction fetches it: the snapshot of what the database holds, whether
the stored bodies may be spliced, 404 for an unknown id or one outside the caller's scope (the same answer), 410
for a deleted one; _summary/_elements subsets."""
from __future__ import annotations

from typing import Any

from server.declare.instants import as_utc
from server.declare.provider import ResourceProvider
from server.declare.rendered import Rendered
from server.engine.caller import Caller
from server.engine.context import ServerContext
from server.storage.steps import Query, Steps, blocking, rows
from server.engine.subset import subset
from server.engine.visibility import sees, visibility_of
from server.errors import ResourceGone, ResourceNotFound
from server.params.ids import stored_id
from server.search.bodies import StoredVersion
from server.search.sql import read_query
from server.storage.freshness import Snapshot

Resource = dict[str, Any] | Rendered


def fresh(ctx: ServerContext) -> Steps[Snapshot]:
    """What the database holds (re-read at most once a second)."""
    return (yield from blocking(ctx.freshness.snapshot, ctx.freshness.current))


def not_found(resource_type: str, rid: str) -> ResourceNotFound:
    return ResourceNotFound(f"{resource_type}/{rid} is not known")


def gone(provider: ResourceProvider, rid: str, version: Any) -> ResourceGone:
    return ResourceGone(f"{provider.resource_type}/{rid} was deleted (version {version}); see its _history")


def resource_provider(ctx: ServerContext, resource_type: str, what: str) -> ResourceProvider:
    """The provider of the type, which must be a table-backed one (static providers read and search only)."""
    provider = ctx.registry.get(resource_type)
    if not isinstance(provider, ResourceProvider):
        raise ResourceNotFound(f"{resource_type} supports read and search only, not {what}")
    return provider


def fetch(ctx: ServerContext, provider: ResourceProvider, rid: str, caller: Caller) -> Steps[Resource]:
    """The resource, or 404 when unknown or outside the caller's scope (the same answer), 410 when deleted."""
    stored = stored_id(provider, rid)
    if stored is None:
        raise not_found(provider.resource_type, rid)
    snapshot = yield from fresh(ctx)
    vis = yield from visibility_of(ctx, provider, caller, snapshot)
    clause = vis.clause
    if snapshot.splices(provider):
        prepared = (ctx.reads if clause is None else ctx.scoped_reads)[provider.resource_type]
        found_rows = yield Query(prepared.bind(id=stored))
        found = StoredVersion.of(found_rows[0]) if found_rows else None
        if found is not None and not (yield from sees(ctx, provider, vis, stored,
                                                      (found.partition, found.path, found.deleted))):
            found = None  # outside the caller's scope: the same answer as an unknown id
        if found is None:
            raise not_found(provider.resource_type, rid)
        if found.deleted:
            raise gone(provider, rid, found.version)
        if found.body is not None:
            return Rendered(found.body, str(found.version), as_utc(found.updated))
    found_rows = yield from rows(read_query(provider, [stored], visible=clause), mappings=True)
    row = found_rows[0] if found_rows else None
    if row is None:
        raise not_found(provider.resource_type, rid)
    if provider.versioning is not None and row[provider.versioning.deleted.key]:
        raise gone(provider, rid, row[provider.versioning.version.key])
    return provider.to_resource(row)


def subset_of(resource: Resource, summary: str | None, elements: tuple[str, ...] | None) -> Resource:
    if summary is None and elements is None:
        return resource
    return subset(resource.resource() if isinstance(resource, Rendered) else resource, summary, elements)
