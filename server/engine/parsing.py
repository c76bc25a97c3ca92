"""A search's query as this server takes it (server.search.chains.parse_request with the server's page limits and
the types it serves, for chained and _has parameters): the typed SearchRequest every search interaction runs."""
from __future__ import annotations

from collections.abc import Sequence

from server.declare.provider import ResourceProvider
from server.engine.context import ServerContext
from server.search.chains import parse_request
from server.errors import InvalidRequest
from server.search.request import MAX_VALUES, SearchRequest, selection_pairs


def parse(ctx: ServerContext, provider: ResourceProvider, items: Sequence[tuple[str, str]],
          strict: bool, max_values: int = MAX_VALUES) -> SearchRequest:
    """The search as this server takes it: its limits, its chains over the types it serves (`max_values`: the
    OR-ed values of one parameter; more than a client's for an in-process look-up's batch)."""
    return parse_request(provider, items, limits=ctx.settings.api, strict=strict, providers=ctx.registry.providers,
                         max_values=max_values)


def parse_selection(ctx: ServerContext, provider: ResourceProvider, query: str | Sequence[tuple[str, str]],
                    what: str) -> SearchRequest:
    """A query that selects `provider`'s resources (server.search.request.selection_pairs), parsed strictly as
    `[type]?query` is; InvalidRequest when it names no criterion (it would select every resource)."""
    request = parse(ctx, provider, selection_pairs(query, what), strict=True)
    if not request.clauses and not request.joined:
        raise InvalidRequest(f"{what} names no search criterion (every {provider.resource_type}: leave it out)")
    return request
