"""Reading one resource (read, capabilities), and what every interaction shares: the caller's visibility of a
provider, the snapshot of what the database holds, fetching one instance (404/410), _summary/_elements, counts
cached per data generation.

The interactions are generators of steps (server.engine.steps): no I/O and no HTTP here; a driver
(server.engine.drivers) runs their statements, server.http.pipeline parses the request, admits the caller and
renders the answer. `read` and the like run one in the calling thread (in-process callers, tests)."""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from sqlalchemy import Connection, Select, literal, select

from server.access.scope import NOTHING, Visibility
from server.declare.instants import as_utc
from server.declare.provider import ResourceProvider, StaticProvider
from server.declare.rendered import Rendered
from server.engine.caller import Caller
from server.engine.capabilities import for_base
from server.engine.context import ServerContext
from server.engine.drivers import in_thread
from server.engine.static import read_static
from server.engine.steps import Query, Steps, blocking, database, rows, scalar
from server.engine.subset import subset
from server.errors import ResourceGone, ResourceNotFound
from server.params.ids import stored_id
from server.search.bodies import StoredVersion
from server.search.request import parse_subset
from server.search.sql import read_query
from server.storage.freshness import Snapshot

Resource = dict[str, Any] | Rendered


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


def fresh(ctx: ServerContext) -> Steps[Snapshot]:
    """What the database holds (re-read at most once a second)."""
    return (yield from blocking(ctx.freshness.snapshot, ctx.freshness.current))


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


def splices(provider: ResourceProvider, snapshot: Snapshot) -> bool:
    """Whether the provider's stored bodies may be spliced (all rendered for what the database holds)."""
    return provider.prerendered is not None and provider.resource_type in snapshot.bodies


def fetch(ctx: ServerContext, provider: ResourceProvider, rid: str, caller: Caller) -> Steps[Resource]:
    """The resource, or 404 when unknown or outside the caller's scope (the same answer), 410 when deleted."""
    stored = stored_id(provider, rid)
    if stored is None:
        raise not_found(provider.resource_type, rid)
    snapshot = yield from fresh(ctx)
    vis = yield from seen_by(ctx, provider, caller, snapshot)
    clause = vis.clause
    if splices(provider, snapshot):
        prepared = (ctx.reads if clause is None else ctx.scoped_reads)[provider.resource_type]
        found_rows = yield Query(prepared.bind(id=stored))
        found = StoredVersion.of(found_rows[0]) if found_rows else None
        if found is not None and not (yield from sees(ctx, provider, vis, stored, (found.partition, found.path))):
            found = None  # outside the caller's scope: the same answer as an unknown id
        if found is None:
            raise not_found(provider.resource_type, rid)
        if found.deleted:
            raise gone(provider, rid, found.version)
        if found.body is not None:
            return Rendered(found.body, str(found.version), as_utc(found.updated))
    found_rows = yield from rows(ctx, read_query(provider, [stored], visible=clause), mappings=True)
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


def count(ctx: ServerContext, provider: ResourceProvider, snapshot: Snapshot, key: Hashable,
          query: Callable[[], Steps[Select[Any]]]) -> Steps[int]:
    """A count; for a versioned provider, cached until it has a newer version (the query built on a miss)."""
    if provider.versioning is None:
        return int((yield from scalar(ctx, (yield from query()), bounded=False)))
    # keyed by the database that counts and what it holds: a lagging replica's totals are its own
    kept_as = ((yield from database()), snapshot.generations.get(provider.resource_type), key)
    kept = ctx.counts.peek(kept_as)
    if kept is None:
        kept = int((yield from scalar(ctx, (yield from query()), bounded=False)))
        ctx.counts.put(kept_as, kept)
    return kept


def read_steps(ctx: ServerContext, caller: Caller, resource_type: str, rid: str,
               items: Sequence[tuple[str, str]] = ()) -> Steps[Resource]:
    provider = ctx.registry.get(resource_type)
    if isinstance(provider, StaticProvider):
        return (yield from blocking(lambda conn: read_static(provider, conn, rid, items,
                                                             static_account(ctx, conn, provider, caller))))
    summary, elements = parse_subset(items)
    return subset_of((yield from fetch(ctx, provider, rid, caller)), summary, elements)


def read(ctx: ServerContext, caller: Caller, resource_type: str, rid: str,
         items: Sequence[tuple[str, str]] = ()) -> Resource:
    return in_thread(ctx, read_steps(ctx, caller, resource_type, rid, items))


def capabilities_steps(ctx: ServerContext, base: str) -> Steps[dict[str, Any]]:
    return for_base(ctx.capability_statement, base)
    yield  # a generator: no I/O at all


def capabilities(ctx: ServerContext, base: str) -> dict[str, Any]:
    return for_base(ctx.capability_statement, base)
