"""Reading one resource (read, capabilities), and what every interaction shares: the caller's visibility of a
provider, fetching one instance, _summary/_elements, counts cached per data generation.

The interactions are plain functions of (context, caller, what was asked) returning FHIR dicts or Rendered
bodies: no HTTP here (server.http.pipeline parses the request, admits the caller and renders the answer)."""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from sqlalchemy import Connection, Select

from server.access.scope import NOTHING, Visibility, sees
from server.engine.context import ServerContext
from server.engine.caller import Caller
from server.engine.capabilities import for_base
from server.declare.instants import as_utc
from server.declare.provider import ResourceProvider, StaticProvider
from server.declare.rendered import Rendered
from server.engine.static import read_static
from server.engine.subset import subset
from server.errors import ResourceGone, ResourceNotFound
from server.params.ids import stored_id
from server.search.request import parse_subset
from server.search.sql import read_query
from server.storage.freshness import database_of

Resource = dict[str, Any] | Rendered


def visibility(ctx: ServerContext, conn: Connection, provider: ResourceProvider, caller: Caller) -> Visibility:
    """Nothing of a type the token's SMART scopes do not reach (so _include/_revinclude never return it)."""
    scopes = caller.principal.scopes if caller.principal is not None else None
    if scopes is not None and not scopes.sees(provider.resource_type):
        return NOTHING
    return ctx.scoper.visibility(conn, provider, caller.scope)


def visible(ctx: ServerContext, conn: Connection, provider: ResourceProvider, stored: Any, caller: Caller) -> bool:
    """Whether the caller may see the resource `stored` (False or True when it does not exist: the caller's next
    query tells that)."""
    return sees(conn, provider, visibility(ctx, conn, provider, caller), stored)


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


def fetch(ctx: ServerContext, provider: ResourceProvider, rid: str, caller: Caller) -> Resource:
    """The resource, or 404 when unknown or outside the caller's scope (the same answer), 410 when deleted."""
    stored = stored_id(provider, rid)
    if stored is None:
        raise not_found(provider.resource_type, rid)
    with ctx.db.connect() as conn:
        vis = visibility(ctx, conn, provider, caller)
        clause = vis.clause
        if ctx.freshness.splices(conn, provider):
            if clause is None:
                found = ctx.reads[provider.resource_type].run(conn, id=stored).first()
            else:
                found = ctx.scoped_reads[provider.resource_type].run(conn, id=stored).first()
                found = found if found is not None and sees(conn, provider, vis, stored, (found[4], found[5])) else None
            if found is None:
                raise not_found(provider.resource_type, rid)
            deleted, version, updated, body = found[:4]
            if deleted:
                raise gone(provider, rid, version)
            if body is not None:
                return Rendered(bytes(body), str(version), as_utc(updated))
        row = conn.execute(read_query(provider, [stored], visible=clause)).mappings().first()
    if row is None:
        raise not_found(provider.resource_type, rid)
    if provider.versioning is not None and row[provider.versioning.deleted.key]:
        raise gone(provider, rid, row[provider.versioning.version.key])
    return provider.to_resource(row)


def subset_of(resource: Resource, summary: str | None, elements: tuple[str, ...] | None) -> Resource:
    if summary is None and elements is None:
        return resource
    return subset(resource.resource() if isinstance(resource, Rendered) else resource, summary, elements)


def count(ctx: ServerContext, conn: Connection, provider: ResourceProvider, key: Hashable,
          query: Callable[[], Select[Any]]) -> int:
    """A count; for a versioned provider, cached until it has a newer version (the query built on a miss)."""
    if provider.versioning is None:
        return int(conn.execute(query()).scalar_one())
    # keyed by the database that counts and what it holds: a lagging replica's totals are its own
    return ctx.counts.get((database_of(conn), ctx.freshness.generation(conn, provider), key),
                          lambda: int(conn.execute(query()).scalar_one()))


def read(ctx: ServerContext, caller: Caller, resource_type: str, rid: str,
         items: Sequence[tuple[str, str]] = ()) -> Resource:
    provider = ctx.registry.get(resource_type)
    if isinstance(provider, StaticProvider):
        with ctx.db.connect() as conn:
            return read_static(provider, conn, rid, items, static_account(ctx, conn, provider, caller))
    summary, elements = parse_subset(items)
    return subset_of(fetch(ctx, provider, rid, caller), summary, elements)


def capabilities(ctx: ServerContext, base: str) -> dict[str, Any]:
    return for_base(ctx.capability_statement, base)
