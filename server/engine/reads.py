"""The read and capabilities interactions, as steps (server.storage.steps) that either driver runs; `read` runs one
in the calling thread (in-process callers, tests)."""
from __future__ import annotations

from collections.abc import Sequence

from server.declare.provider import StaticProvider
from server.declare.rendered import Rendered, json_bytes
from server.engine.caller import Caller
from server.engine.capabilities import for_base
from server.engine.context import ServerContext
from server.engine.drivers import in_thread
from server.engine.instances import Resource, fetch, subset_of
from server.engine.static import read_static
from server.storage.steps import Steps, blocking
from server.engine.visibility import static_account
from server.search.request import parse_subset


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


def capabilities_steps(ctx: ServerContext, base: str) -> Steps[Rendered]:
    """No step at all: the statement is built at start-up and rendered once per [base] (a generator all the
    same, as every interaction)."""
    yield from ()
    return ctx.capabilities.get(base, lambda: Rendered(json_bytes(for_base(ctx.capability_statement, base))))

