"""What a search matches, compiled once for every query that selects: a search, a plugin's look-up (a search run in
process), Bulk Data's `_typeFilter` and a SMART scope's query all compile through `Condition`, with what the caller
sees of the searched type (its look-ups read those rows) and of every other type the query crosses (its look-ups,
chains and `_has` read those). So a query means the same wherever it is written (issue 36).

Steps (server.storage.steps): the look-ups and a chain's are statements; a chain's condition is kept while the
data it was compiled against stands."""
from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

from sqlalchemy import ColumnElement, and_, true

from server.access.tenancy import Visibility
from server.declare.provider import ResourceProvider
from server.engine.context import ServerContext
from server.storage.steps import Steps, database
from server.params.types.base import Sight
from server.search.chains import Chained
from server.search.hops import chain_types, compile_chained
from server.search.request import SearchRequest
from server.search.seen import sight_of
from server.search.sql import JOINED, WALK, count_query, lookups, matching, where_of
from server.engine.templates import Parts, bound, named, shape_of
from server.storage.freshness import Snapshot
from server.storage.prepared import Bound


def joined_conditions(ctx: ServerContext, request: SearchRequest, snapshot: Snapshot,
                      others: Mapping[str, Visibility]) -> Steps[dict[Any, Any]]:
    """The conditions of the request's chained and _has parameters, for where_clause's `found`, each hop applying
    what the caller sees of its type (`others`). Kept when every type crossed keeps versions (the data generations
    then say when they no longer hold); else built each time."""
    found: dict[Any, Any] = {}
    if not request.joined:
        return found
    providers = ctx.registry.providers
    name = yield from database()
    for joined in request.joined:
        assert isinstance(joined, Chained)
        crossing = [providers[t] for t in chain_types(joined)]
        key = None if any(p.versioning is None for p in crossing) else (
            name, snapshot.stamp, request.resource_type, joined.key, joined.raw,
            tuple(others[p.resource_type].key for p in crossing))
        kept = None if key is None else ctx.conditions.peek(key)
        if kept is None:
            kept = yield from compile_chained(providers, joined, others)
            if key is not None:
                ctx.conditions.put(key, kept)
        found[(JOINED, joined.key, joined.raw)] = kept
    return found


class Condition:
    """A query's one condition on the provider's rows, built on first need (a kept count and a kept page need none):
    its look-ups and its chains' conditions first. `vis`: what the caller sees of the provider (its look-ups read
    `vis.looked_up`; to a caller limited to subtrees, or narrowed by a query scope, a parent it cannot see is as
    missing); `others`: what the caller sees of each other type the query crosses (server.search.hops.crossed)."""

    def __init__(self, ctx: ServerContext, provider: ResourceProvider, request: SearchRequest, snapshot: Snapshot,
                 vis: Visibility, others: Mapping[str, Visibility]) -> None:
        self.ctx, self.provider, self.request, self.snapshot, self.vis, self.others = \
            ctx, provider, request, snapshot, vis, others
        self.found: dict[Any, Any] | None = None
        self._forms: dict[tuple[bool, bool], Formed] = {}

    @property
    def others_key(self) -> tuple[tuple[str, Any], ...]:
        """What the condition depends on of the other types' scopes (a kept page's key holds it)."""
        return tuple((rtype, vis.key) for rtype, vis in self.others.items())

    @cached_property
    def sight(self) -> Sight:
        """What the caller sees, as the query's clauses are compiled: of each other type crossed the live rows it
        sees and those its look-ups read, its subtree roots, and to a caller narrowed by a scope's query what it
        sees of this type (server.search.seen.sight_of)."""
        return sight_of(self.ctx.registry.providers, self.vis, self.others, self.others)

    def _found(self) -> Steps[dict[Any, Any]]:
        if self.found is None:
            providers = self.ctx.registry.providers
            looked_up = yield from lookups(self.provider, self.request, self.vis.looked_up, sight=self.sight)
            crossed = {**self.others, self.provider.resource_type: self.vis}  # a chain may come back to its own type
            joined = yield from joined_conditions(self.ctx, self.request, self.snapshot, crossed)
            self.found = {**looked_up, **joined}
        return self.found

    def formed(self, walk: bool = False, page: bool = False) -> Steps[Formed]:
        """The query's matches among the live rows the caller sees (a search's page and count), built once for
        each form: a page's is its count's unless the page walks an index (`page`) or the id order (`walk`)."""
        found = yield from self._found()
        form = (walk, page and self.request.led is not None)
        built = self._forms.get(form)
        if built is None:
            own = matching(self.provider, self.request, {**found, WALK: True} if walk else found, form[1],
                           sight=self.sight)
            built = self._forms[form] = Formed(self.provider, self.request, self.vis.clause, own)
        return built

    def where(self, walk: bool = False, page: bool = False) -> Steps[ColumnElement[bool]]:
        return (yield from self.formed(walk, page)).where

    def selects(self) -> Steps[ColumnElement[bool]]:
        """The query's own condition, without the rows the caller may see, which whoever uses it applies: on the
        versions an export reads (`_typeFilter`), on every row of a scope's type, deleted ones included (a scope's
        query: a deletion stays seen where its resource was)."""
        return and_(true(), *matching(self.provider, self.request, (yield from self._found()), sight=self.sight))

    def count(self, up_to: int | None) -> Steps[Bound]:
        """A bounded count of a search led by an index walks it, as its page does (server.search.sql.count_query);
        bound into its shape's template (server.engine.templates)."""
        walked = up_to is not None and self.request.led is not None
        formed = yield from self.formed(page=walked)
        shape = formed.shape
        key = None if shape is None else ("count", (yield from database()), shape, self.vis.key, self.others_key,
                                          up_to)
        return bound(self.ctx, key, formed.parts, named(self.request),
                     lambda: count_query(self.provider, self.request, where=formed.where, up_to=up_to))


class Formed:
    """A query's condition in one form (Condition.formed): its own conditions (`own`, server.search.sql.matching)
    and, built on first need, the whole of it among the rows the caller sees (`where`: a statement kept as a
    template needs none), their parts and shape (what its statements are kept by: server.engine.templates)."""

    def __init__(self, provider: ResourceProvider, request: SearchRequest, visible: ColumnElement[bool] | None,
                 own: list[ColumnElement[bool]]) -> None:
        self.provider, self.request, self.visible, self.own = provider, request, visible, own

    @cached_property
    def where(self) -> ColumnElement[bool]:
        return where_of(self.provider, self.visible, self.own)

    @cached_property
    def parts(self) -> Parts:
        return Parts.of(self.own)

    @cached_property
    def shape(self) -> Any:
        return shape_of(self.request, self.parts)
