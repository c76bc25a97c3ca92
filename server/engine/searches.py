"""Searches: search-type and operations (a search bound to one instance, or an operation's own handler), as
searchset Bundles. Each is written once, as steps (server.storage.steps) that either driver runs: the look-ups, the
count (unless kept), the page, the includes and a chain's look-ups are statements; a visibility not built yet is
built in a thread. `search_type` and `run_operation` run one in the calling thread (in-process callers)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import ColumnElement, select

from server.access.tenancy import Visibility
from server.declare.provider import ResourceProvider, StaticProvider
from server.declare.rendered import Rendered
from server.engine.bundle import search_entries, search_entry, searchset
from server.engine.caller import TRUSTED, Caller
from server.engine.chaining import total as counted
from server.engine.conditions import Condition
from server.engine.parsing import parse
from server.engine.context import ServerContext
from server.engine.drivers import in_thread
from server.engine.operations import call_handler
from server.engine.lookup import EngineLookup
from server.engine.instances import Resource, fetch, fresh, resource_provider, subset_of
from server.engine.visibility import visibilities_crossed, visibility_of, static_account
from server.engine.static import search_static
from server.engine.templates import NO_PARTS, bound, named, rebind, shape_of
from server.storage.steps import Query, Steps, blocking, database, rows, scalar, threaded
from server.errors import ResourceNotFound, operation_outcome
from server.params.ids import coerce_id
from server.params.types.token import TokenTarget
from server.search.bodies import BODY, FOLLOWS, ID, MEASURE_AT, body_page_query
from server.search.include import MAX_INCLUDED, MAX_ITERATE_DEPTH, IncludedResource, fetch_included, page_follows
from server.search.order import AFTER_VALUE, MEASURE, RESUMED, SORT_BELOW, resume_query, resumed, resumes
from server.search.request import SearchRequest, bind_operation, selection_pairs
from server.search.sql import (AFTER, WALK_ABOVE, page_query, page_rows, paged, read_query)
from server.storage.freshness import Snapshot, synced

Match = tuple[str, Resource, Any]  # id, resource, measure (SearchRequest.ranked: near's distance)


def _shape(total: int | None) -> str:
    """What of the total a page's SQL depends on (server.search.sql: few matches sorted, many walked)."""
    if total is None:
        return "unknown"
    return "few" if total <= SORT_BELOW else "many" if total > WALK_ABOVE else "some"


def _rendered(ctx: ServerContext, provider: ResourceProvider, page: Sequence[Sequence[Any]]) -> Steps[list[Match]]:
    """A page of body_page_query's rows (server.search.bodies.ID...): stored bodies as they are;
    the rows without one (rendered per request) fetched in one query."""
    missing = [row[ID] for row in page if row[BODY] is None]
    found = (yield from rows(read_query(provider, missing, search=True), mappings=True)) if missing else []
    rendered = {row[provider.id_column.key]: provider.to_resource(row) for row in found}
    return [(str(row[ID]), Rendered(bytes(row[BODY])) if row[BODY] is not None else rendered[row[ID]],
             row[MEASURE_AT]) for row in page]


def _included_resource(included: IncludedResource) -> Resource:
    """Its stored body as it is, else rendered from its row."""
    if included.body is not None:
        return Rendered(included.body)
    assert included.row is not None
    return included.provider.to_resource(included.row)


def _included_visibility(ctx: ServerContext, caller: Caller, request: SearchRequest,
                         snapshot: Snapshot) -> Steps[Callable[[ResourceProvider], ColumnElement[bool] | None]]:
    clauses: dict[str, ColumnElement[bool] | None] = {}
    for include in request.includes:
        other = ctx.registry.providers.get(include.source if include.reverse else include.target)
        if isinstance(other, ResourceProvider) and other.resource_type not in clauses:
            clauses[other.resource_type] = (yield from visibility_of(ctx, other, caller, snapshot)).clause
    return lambda p: clauses[p.resource_type]


def _total(condition: Condition, kept_only: bool, known: int | None = None) -> Steps[tuple[int | None, bool]]:
    """(the count, whether it is past the threshold). Counted up to the threshold: past it a count would grow
    with the data (Bundle.total is then left out, and the `last` link with it), unless an exact one is asked for
    (_total=accurate, _summary=count, or _count=0: a page of no entries is asked for its total alone, as fhirpy's
    count() and others do). `kept_only`: the count kept from before, else (None, False) without counting;
    `known`: the count a page found whole, kept as if counted."""
    request, up_to = condition.request, condition.ctx.settings.fhir.total_threshold
    matched = yield from counted(condition, up_to, kept_only=kept_only, known=known)
    over = matched is not None and matched > up_to
    if over and (request.total == "accurate" or request.summary == "count" or request.count == 0):
        matched = yield from counted(condition, None)
        over = False
    return matched, over


def _page(condition: Condition, path: str, matched: int | None, over: bool,
          follows: Sequence[ColumnElement[Any]]) -> Steps[Sequence[Any]]:
    """The page's rows, one past `_count` (is there a next page?); its statement depends on what is known of the
    total (server.search.sql: few matches sorted, many walked). Of stored bodies (the snapshot's splices): ids and
    bodies, and the columns its includes `follow`."""
    ctx, provider, request, snapshot, vis = condition.ctx, condition.provider, condition.request, condition.snapshot, \
        condition.vis
    count, ranked, total = request.count, request.ranked is not None, None if over else matched
    splice = snapshot.splices(provider)
    name = yield from database()
    # how the page is read besides what it matches (server.engine.templates: a template's key beside its shape)
    paging = (name, vis.key, splice, count, request.after is not None,
              None if request.after is not None else request.skip, tuple(k.raw for k in request.sort),
              "many" if over else _shape(matched), condition.others_key, tuple(c.key for c in follows))
    # the page of the same search asked before (another position, another _elements or format): its SQL as sent
    page_key = (path, request.key, snapshot.stamp, *paging)
    page = ctx.pages.peek(page_key) if count else None
    resume = (yield from _resume(ctx, provider, request, vis, name)) if count and request.after else None
    # a kept statement holds another position: the request's is bound by name
    position = {} if request.after is None else {
        AFTER: coerce_id(provider.id_column, request.after), **({AFTER_VALUE: resume} if resume is not None else {})}
    if page is None and count:
        walk = matched is not None and (over or matched > WALK_ABOVE) and not request.sort and not ranked
        formed = yield from condition.formed(walk, page=True)
        key = None if formed.shape is None else ("page", formed.shape, walk, *paging)
        page = bound(ctx, key, formed.parts, {**named(request), **position}, lambda: (
            body_page_query(provider, request, extra_row=1, where=formed.where, total=total, resume=resume,
                            follows=follows) if splice else
            page_query(provider, request, extra_row=1, where=formed.where, total=total, resume=resume)),
            lambda: formed.built)
        ctx.pages.put(page_key, page)
    elif page is not None:
        page = rebind(page, position)
    found: Sequence[Any] = (yield Query(page, mappings=not splice, bounded=False)) if page is not None else []
    return found


def _resume(ctx: ServerContext, provider: ResourceProvider, request: SearchRequest, vis: Visibility,
            name: str) -> Steps[Any]:
    """Where a page walked along an index resumes (server.search.order.resume_query; None: not walked, or not
    resumed), its look-up kept as a template of the search's shape (server.engine.templates): another position
    binds its id by name. A search's page and a look-up's batch alike."""
    if not resumes(request):
        return None
    shape = shape_of(request, NO_PARTS)
    key = None if shape is None else ("resume", name, shape, vis.key)
    position = {**named(request), RESUMED: coerce_id(provider.id_column, request.after)}
    statement = bound(ctx, key, NO_PARTS, position, lambda: resume_query(provider, request, vis.clause))
    return resumed(request, (yield from scalar(statement)))


def _by_ids(provider: ResourceProvider, request: SearchRequest) -> bool:
    """Whether a clause names the provider's ids (a token on its id column alone, no modifier), no more of them than
    a page holds: the first page then holds every match."""
    return any(c.modifier is None and len(c.values) <= request.count and c.param.type == "token"
               and len(c.param.targets) == 1 and _the_id(provider, c.param.targets[0]) for c in request.all_clauses)


def _the_id(provider: ResourceProvider, target: Any) -> bool:
    return (isinstance(target, TokenTarget) and target.code is provider.id_column and target.through is None
            and target.system is None and target.codes is None)


def _condition(ctx: ServerContext, caller: Caller, provider: ResourceProvider, request: SearchRequest,
               snapshot: Snapshot, vis: Visibility) -> Steps[Condition]:
    others = yield from visibilities_crossed(ctx, caller, request, snapshot)
    return Condition(ctx, provider, request, snapshot, vis, others)


def search_condition(ctx: ServerContext, caller: Caller, provider: ResourceProvider,
                     request: SearchRequest) -> Steps[ColumnElement[bool]]:
    """What the search matches, compiled as `[type]?query` is (its look-ups, chains and _has among what the caller
    sees), without the rows the caller may see, which whoever uses it applies: Bulk Data's `_typeFilter`, on the
    versions an export reads (server.search.as_of, through server.engine.export_reader)."""
    snapshot = yield from fresh(ctx)
    vis = yield from visibility_of(ctx, provider, caller, snapshot)
    condition = yield from _condition(ctx, caller, provider, request, snapshot, vis)
    return (yield from condition.selects())


def matches_steps(ctx: ServerContext, caller: Caller, resource_type: str,
                  query: str | Sequence[tuple[str, str]]) -> Steps[ColumnElement[bool]]:
    """The rows of the type `[type]?query` matches as the caller sees them (its live rows in the caller's scope), as
    one condition on the provider's source, compiled as that search is: what a handler reads whole itself (an export
    streamed a chunk at a time; server.declare.lookup.Lookup.condition). A query of no criterion: every row the
    caller sees."""
    provider = resource_provider(ctx, resource_type, "a look-up's condition")
    request = parse(ctx, provider, selection_pairs(query, "a look-up's condition"), strict=True)
    snapshot = yield from fresh(ctx)
    vis = yield from visibility_of(ctx, provider, caller, snapshot)
    condition = yield from _condition(ctx, caller, provider, request, snapshot, vis)
    return (yield from condition.where())


def matched_steps(ctx: ServerContext, caller: Caller, resource_type: str, query: Sequence[tuple[str, str]], *,
                  columns: Sequence[ColumnElement[Any]], max_values: int, page: int) -> Steps[list[Any]]:
    """Every match of `[type]?query` as the caller sees it, in id order, as rows of its id and `columns` (of the
    provider's source), without rendering it: what a look-up's batch reads (server.engine.lookup.EngineLookup.
    identified_all), `max_values` OR-ed values a parameter (more than a client may send), `page` rows a statement.
    Compiled as the search is (`_condition`: its scope, its live rows) and paged as its pages are (keyset, by id):
    one statement for a batch of values whose matches fit a page."""
    provider = resource_provider(ctx, resource_type, "a look-up")
    request = parse(ctx, provider, query, strict=True, max_values=max_values)
    request = replace(request, paging=replace(request.paging, count=page, skip=0))
    snapshot = yield from fresh(ctx)
    vis = yield from visibility_of(ctx, provider, caller, snapshot)
    where = yield from (yield from _condition(ctx, caller, provider, request, snapshot, vis)).where(page=True)
    found: list[Any] = []
    name = yield from database()
    while True:
        resume = yield from _resume(ctx, provider, request, vis, name)
        statement = paged(provider, request, select(provider.id_column, *columns).select_from(
            page_rows(provider, request, provider.source)), where, extra_row=1, resume=resume)
        matched = yield from rows(statement, bounded=False)
        found += matched[:page]
        if len(matched) <= page:
            return found
        request = replace(request, after=str(found[-1][0]))  # keyset: the next rows by id


def _search(ctx: ServerContext, caller: Caller, provider: ResourceProvider, request: SearchRequest, base: str,
            path: str) -> Steps[dict[str, Any]]:
    count, ranked = request.count, request.ranked is not None
    snapshot = yield from fresh(ctx)  # taken before the page is read: its sync point holds for the answer
    vis = yield from visibility_of(ctx, provider, caller, snapshot)
    splice = snapshot.splices(provider)
    condition = yield from _condition(ctx, caller, provider, request, snapshot, vis)
    # a first page led by an index walk (a name prefix), or of a few ids, is read before its count: when it is not
    # full, its entries are the total and no count is run (the walk reads the same rows, whatever the total; ids
    # are read by the key)
    page_first = (request.counts and count > 0 and (request.led is not None or _by_ids(provider, request))
                  and request.after is None and not request.skip)
    matched, over = (yield from _total(condition, page_first)) if request.counts else (None, False)
    follows = page_follows(provider, request.includes) if splice else []
    found = yield from _page(condition, path, matched, over, follows)
    if page_first and matched is None:  # every match is on this page when it is not full
        matched, over = yield from _total(condition, False, len(found) if len(found) <= count else None)
    total = None if over else matched
    has_next = len(found) > count
    found = found[:count]
    page_rows: Sequence[Any] = found
    if splice:
        matches = yield from _rendered(ctx, provider, found)
        if request.includes:  # what the includes follow of the matches, read with the page
            id_key, keys = provider.id_column.key, [c.key for c in follows]
            page_rows = [{id_key: row[ID], **dict(zip(keys, row[FOLLOWS:]))} for row in found]
    else:
        id_key = provider.id_column.key
        matches = [(str(r[id_key]), provider.to_resource(r), r[MEASURE] if ranked else None) for r in found]
    included = None
    if found and request.includes:
        visible = yield from _included_visibility(ctx, caller, request, snapshot)
        included = yield from fetch_included(ctx.registry, provider, request.includes, page_rows, visible,
                                             snapshot.splices)
    rtype = provider.resource_type
    summary, elements = request.summary, request.elements
    entries = search_entries(base, rtype, ((rid, subset_of(resource, summary, elements), request.entry_search(measure))
                                           for rid, resource, measure in matches))
    if included is not None:
        entries += [search_entry(base, i.provider.resource_type, str(i.id), _included_resource(i), "include")
                    for i in included.resources]
        if included.truncated:
            entries.append({"resource": operation_outcome(
                "warning", "too-costly", f"_include/_revinclude stopped at {MAX_INCLUDED} included resources (the most "
                f"one page holds); narrow the search or page with a smaller _count"),
                "search": {"mode": "outcome"}})
        if included.too_deep:
            entries.append({"resource": operation_outcome(
                "warning", "too-costly", f"_include:iterate stopped after {MAX_ITERATE_DEPTH} levels"),
                "search": {"mode": "outcome"}})
    if request.ignored:
        entries.append({"resource": _ignored(provider, request.ignored), "search": {"mode": "outcome"}})
    unseen = sorted({rtype for rtype, other in condition.others.items() if other.shows_nothing}
                    | ({provider.resource_type} if vis.shows_nothing else set()))
    if unseen:
        entries.append({"resource": _unseen(provider, unseen), "search": {"mode": "outcome"}})
    last_id = matches[-1][0] if matches else None
    return searchset(base, path, request, entries, total, has_next and bool(count), last_id,
                     synced(snapshot, provider))


def _unseen(provider: ResourceProvider, types: Sequence[str]) -> dict[str, Any]:
    """The warning of a search whose caller sees nothing of a type it reads (its own, or one a chain, `_has` or
    look-up crosses): its empty matches say what the caller may see, not what the server holds (a district token
    chaining through the owners' Organizations, which only whole-account access sees)."""
    others = [t for t in types if t != provider.resource_type]
    parts = [f"no {provider.resource_type} resource"] if provider.resource_type in types else []
    if others:
        parts.append(f"no {', '.join(others)} resource, which this search's chained, _has or look-up parameters "
                     "read (they match nothing for it)")
    return operation_outcome(
        "warning", "suppressed",
        f"this token's access shows {' and '.join(parts)}; the results reflect that access, not what the server "
        "holds")


def _ignored(provider: ResourceProvider, names: Sequence[str]) -> dict[str, Any]:
    """The warning of a search that left unknown parameters out (a misspelt `nme=` would otherwise match all)."""
    plural = "s" if len(names) > 1 else ""
    return operation_outcome(
        "warning", "not-supported",
        f"unknown search parameter{plural} {', '.join(names)} ignored: the results are not filtered by "
        f"{'them' if plural else 'it'}; {provider.resource_type} supports {', '.join(sorted(provider.params_by_name))} "
        "and the result parameters (send Prefer: handling=strict to have it refused)")


def search_type_steps(ctx: ServerContext, caller: Caller, base: str, resource_type: str,
                      items: Sequence[tuple[str, str]], *, strict: bool = False) -> Steps[dict[str, Any]]:
    provider = ctx.registry.get(resource_type)
    if isinstance(provider, StaticProvider):
        return (yield from blocking(lambda conn: search_static(
            provider, conn, base, items, limits=ctx.settings.api, strict=strict,
            account=static_account(ctx, conn, provider, caller))))
    request = parse(ctx, provider, items, strict)
    return (yield from _search(ctx, caller, provider, request, base, resource_type))


def search_type(ctx: ServerContext, caller: Caller, base: str, resource_type: str,
                items: Sequence[tuple[str, str]], *, strict: bool = False) -> dict[str, Any]:
    return in_thread(ctx, search_type_steps(ctx, caller, base, resource_type, items, strict=strict))


def lookup(ctx: ServerContext | Callable[[], ServerContext], caller: Caller = TRUSTED) -> EngineLookup:
    """The look-up (server.declare.lookup) that searches as `caller` (a loader's: TRUSTED; an operation's) on
    `ctx`, or on the context `ctx()` makes at the first look-up."""
    return EngineLookup(ctx if callable(ctx) else lambda: ctx, search_type_steps, caller, matches_steps, matched_steps)


def run_operation_steps(ctx: ServerContext, caller: Caller, base: str, resource_type: str, rid: str | None,
                        operation: str, items: Sequence[tuple[str, str]], *,
                        strict: bool = False) -> Steps[dict[str, Any]]:
    """`[type]/[id]/$name`, or `[type]/$name` (rid None): a named search, or the operation's own handler."""
    provider = resource_provider(ctx, resource_type, f"${operation}")
    op = provider.operations_by_name.get(operation)
    if op is None:
        raise ResourceNotFound(f"{resource_type} has no operation {operation!r}; "
                               f"available: {', '.join('$' + n for n in provider.operations_by_name) or 'none'}")
    if op.handler is not None:  # the plugin's own code, on a read-only connection of its own: in a thread
        if rid is not None and "instance" in op.levels:
            yield from fetch(ctx, provider, rid, caller)  # it must exist and be visible: 404 (or 410) otherwise
        return (yield from threaded(lambda: call_handler(ctx, caller, base, provider, op, rid, items, strict, lookup(ctx, caller))))
    if rid is None:
        raise ResourceNotFound(f"${operation} is answered at [base]/{resource_type}/[id]/${operation} only")
    request = parse(ctx, provider, items, strict)
    yield from fetch(ctx, provider, rid, caller)  # the instance must exist and be visible: 404 (or 410) otherwise
    request = bind_operation(provider, request, operation, rid)
    return (yield from _search(ctx, caller, provider, request, base, f"{resource_type}/{rid}/${operation}"))


def run_operation(ctx: ServerContext, caller: Caller, base: str, resource_type: str, rid: str | None,
                  operation: str, items: Sequence[tuple[str, str]], *, strict: bool = False) -> dict[str, Any]:
    return in_thread(ctx, run_operation_steps(ctx, caller, base, resource_type, rid, operation, items, strict=strict))
