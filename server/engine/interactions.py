"""The interactions a route can name, as a table (`INTERACTIONS`) from each to the engine function that runs it,
over the one typed request every interaction reads (`Asked`): a reader follows `name` or `_count` from the route
to the statements through named, typed functions."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from server.declare.interaction import Interaction
from server.engine import operations, reads, searches, versions
from server.engine.caller import Caller
from server.engine.context import ServerContext
from server.storage.steps import Steps, threaded


@dataclass(frozen=True, slots=True)
class Found:
    """What a route found beside the interaction's kind, type and id, for the interactions that read it."""

    version: str | None = None  # a vread's version id
    segments: tuple[str, ...] = ()  # a server-wide operation's path after its name
    headers: tuple[tuple[str, str], ...] = ()  # the request headers an operation reads (prefer, range)
    query: str = ""  # the query as sent (a server-wide operation's url holds it)


NOTHING_MORE = Found()


@dataclass(frozen=True, slots=True)
class Asked:
    """An admitted request as an interaction reads it: what the route found in the path (`interaction`: kind,
    type, id, operation name; `found`), who asks, and the query."""

    interaction: Interaction
    caller: Caller
    base: str  # [base] of the links, as the client addressed the server
    items: tuple[tuple[str, str], ...]  # the query, in order
    strict: bool  # an unknown parameter is refused (Prefer: handling=strict, or fhir.unknown_parameters)
    found: Found = NOTHING_MORE

    @property
    def resource_type(self) -> str:
        assert self.interaction.resource_type is not None
        return self.interaction.resource_type

    @property
    def id(self) -> str:
        assert self.interaction.id is not None
        return self.interaction.id


Interact = Callable[[ServerContext, Asked], Steps[Any]]


def capabilities(ctx: ServerContext, asked: Asked) -> Steps[Any]:
    return reads.capabilities_steps(ctx, asked.base)


def read(ctx: ServerContext, asked: Asked) -> Steps[Any]:
    return reads.read_steps(ctx, asked.caller, asked.resource_type, asked.id, asked.items)


def search_type(ctx: ServerContext, asked: Asked) -> Steps[Any]:
    return searches.search_type_steps(ctx, asked.caller, asked.base, asked.resource_type, asked.items,
                                      strict=asked.strict)


def operation(ctx: ServerContext, asked: Asked) -> Steps[Any]:
    """A provider's operation: `[type]/[id]/$name` or `[type]/$name`."""
    assert asked.interaction.operation is not None
    return searches.run_operation_steps(ctx, asked.caller, asked.base, asked.resource_type, asked.interaction.id,
                                        asked.interaction.operation, asked.items, strict=asked.strict)


def server_operation(ctx: ServerContext, asked: Asked) -> Steps[Any]:
    """A plugin's server-wide operation (`[base]/$name[/segments]`, `[base]/[type]/$name`): its handler in a
    worker thread, on a read-only connection of its own."""
    name, rtype, found = asked.interaction.operation, asked.interaction.resource_type, asked.found
    assert name is not None
    path = "/" + "/".join((*([rtype] if rtype else []), f"${name}", *found.segments))
    url = f"{asked.base}{path}{'?' + found.query if found.query else ''}"
    call = operations.ServerCall(asked.caller, asked.base, name, rtype, tuple(found.segments), asked.items,
                                 asked.strict, dict(found.headers), url)
    return threaded(partial(operations.run_server_operation, ctx, call, searches.lookup(ctx, asked.caller)))


def vread(ctx: ServerContext, asked: Asked) -> Steps[Any]:
    assert asked.found.version is not None
    return versions.vread_steps(ctx, asked.caller, asked.resource_type, asked.id, asked.found.version, asked.items)


def history_instance(ctx: ServerContext, asked: Asked) -> Steps[Any]:
    return versions.history_instance_steps(ctx, asked.caller, asked.base, asked.resource_type, asked.id,
                                           asked.items, strict=asked.strict)


def history_type(ctx: ServerContext, asked: Asked) -> Steps[Any]:
    return versions.history_type_steps(ctx, asked.caller, asked.base, asked.resource_type, asked.items,
                                       strict=asked.strict)


# what each endpoint runs (server.http.routes names the key)
INTERACTIONS: Mapping[str, Interact] = {
    "capabilities": capabilities, "read": read, "search-type": search_type, "operation": operation,
    "server-operation": server_operation, "vread": vread, "history-instance": history_instance,
    "history-type": history_type,
}
