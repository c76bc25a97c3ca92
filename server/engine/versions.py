"""The interactions over a versioned provider's kept versions: vread, history-instance, history-type, as steps
(server.storage.steps) that either driver runs; `vread` and the like run one in the calling thread."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from server.declare.provider import ResourceProvider, Versioning
from server.declare.rendered import Rendered, tagged
from server.engine.bundle import history, history_entry
from server.engine.caller import Caller
from server.engine.context import ServerContext
from server.engine.drivers import in_thread
from server.engine.counts import count
from server.engine.instances import Resource, fresh, not_found, resource_provider, subset_of
from server.engine.visibility import visibility_of, shown_gone
from server.storage.steps import Steps, rows, scalar
from server.errors import ResourceGone, ResourceNotFound
from server.params.ids import stored_id
from server.search.history import (
    HistoryRequest,
    history_count,
    history_page,
    parse_history,
    version_query,
    write_cursor,
)
from server.search.request import parse_subset
from server.storage.freshness import Snapshot


def _versioned(provider: ResourceProvider) -> Versioning:
    if provider.versioning is None:
        raise ResourceNotFound(f"{provider.resource_type} keeps no versions: _history is not supported")
    return provider.versioning


def _bodies(provider: ResourceProvider, snapshot: Snapshot) -> Any | None:
    """The stored-body column when the bodies may be spliced, else None."""
    return provider.prerendered.body if snapshot.splices(provider) and provider.prerendered else None


def _version(provider: ResourceProvider, snapshot: Any, body: bytes | None) -> Resource:
    return Rendered(bytes(body)) if body is not None else provider.version_resource(snapshot)


def vread_steps(ctx: ServerContext, caller: Caller, resource_type: str, rid: str, vid: str,
                items: Sequence[tuple[str, str]] = ()) -> Steps[Resource]:
    provider = resource_provider(ctx, resource_type, "_history")
    versioning = _versioned(provider)
    stored = stored_id(provider, rid)
    if stored is None or not vid.isdigit() or len(vid) > 9:
        raise ResourceNotFound(f"{resource_type}/{rid}/_history/{vid} is not known")
    snapshot = yield from fresh(ctx)
    vis = yield from visibility_of(ctx, provider, caller, snapshot)
    found = yield from rows(version_query(versioning, stored, int(vid), _bodies(provider, snapshot), vis.versions,
                                               vis.departed))
    if not found:
        raise ResourceNotFound(f"{resource_type}/{rid} has no version {vid}")
    deleted, content, body = found[0]
    if deleted:
        raise ResourceGone(f"version {vid} of {resource_type}/{rid} is its deletion")
    return subset_of(tagged(bytes(body)) if body is not None else provider.version_resource(content),
                     *parse_subset(items))


def _history(ctx: ServerContext, provider: ResourceProvider, request: HistoryRequest, base: str, path: str,
             stored: Any | None, caller: Caller, snapshot: Snapshot) -> Steps[dict[str, Any]]:
    versioning = _versioned(provider)
    vis = yield from visibility_of(ctx, provider, caller, snapshot)
    scoped = vis.versions  # the versions the caller sees (None: every one)
    synced = snapshot.synced  # every version before it is committed: a fixed set
    request = request.bounded(synced)

    # departures: those proven, and to a sync (`_since`) what no longer matches a query scope
    departed = shown_gone(provider, vis, request.since[1] if request.since else None)

    def counted() -> Steps[Any]:
        return history_count(versioning, request, stored, scoped, departed)
        yield  # no look-up first

    total = yield from count(ctx, provider, snapshot, (path, request.key, vis.key), counted)
    body = _bodies(provider, snapshot)
    found = (yield from rows(history_page(versioning, request, stored, body, scoped, extra_row=1,
                                               departed=departed),
                             bounded=False)) if request.count else []
    has_next = len(found) > request.count
    found = found[:request.count]
    entries = [
        history_entry(base, provider.resource_type, str(rid), version, updated,
                      None if deleted else _version(provider, content, stored_body))
        for rid, version, updated, deleted, content, stored_body in found
    ]
    last = write_cursor((found[-1][2], found[-1][1], str(found[-1][0]))) if found else None
    return history(base, path, request, entries, total, has_next, last, request.till or synced)


def _parse_history(ctx: ServerContext, items: Sequence[tuple[str, str]], strict: bool) -> HistoryRequest:
    return parse_history(items, limits=ctx.settings.api, strict=strict)


def history_instance_steps(ctx: ServerContext, caller: Caller, base: str, resource_type: str, rid: str,
                           items: Sequence[tuple[str, str]], *, strict: bool = False) -> Steps[dict[str, Any]]:
    provider = resource_provider(ctx, resource_type, "_history")
    versioning = _versioned(provider)
    request = _parse_history(ctx, items, strict)
    stored = stored_id(provider, rid)
    if stored is None:
        raise not_found(resource_type, rid)
    snapshot = yield from fresh(ctx)
    vis = yield from visibility_of(ctx, provider, caller, snapshot)
    # known when one of its versions is visible: the same query for an id out of sight and an unknown one
    known = yield from scalar(history_count(versioning, HistoryRequest(), stored, vis.versions, vis.departed))
    if not known:
        raise not_found(resource_type, rid)
    return (yield from _history(ctx, provider, request, base, f"{resource_type}/{rid}/_history", stored, caller,
                                snapshot))


def history_type_steps(ctx: ServerContext, caller: Caller, base: str, resource_type: str,
                       items: Sequence[tuple[str, str]], *, strict: bool = False) -> Steps[dict[str, Any]]:
    provider = resource_provider(ctx, resource_type, "_history")
    request = _parse_history(ctx, items, strict)
    snapshot = yield from fresh(ctx)
    return (yield from _history(ctx, provider, request, base, f"{resource_type}/_history", None, caller, snapshot))


def vread(ctx: ServerContext, caller: Caller, resource_type: str, rid: str, vid: str,
          items: Sequence[tuple[str, str]] = ()) -> Resource:
    return in_thread(ctx, vread_steps(ctx, caller, resource_type, rid, vid, items))


def history_instance(ctx: ServerContext, caller: Caller, base: str, resource_type: str, rid: str,
                     items: Sequence[tuple[str, str]], *, strict: bool = False) -> dict[str, Any]:
    return in_thread(ctx, history_instance_steps(ctx, caller, base, resource_type, rid, items, strict=strict))


def history_type(ctx: ServerContext, caller: Caller, base: str, resource_type: str,
                 items: Sequence[tuple[str, str]], *, strict: bool = False) -> dict[str, Any]:
    return in_thread(ctx, history_type_steps(ctx, caller, base, resource_type, items, strict=strict))
