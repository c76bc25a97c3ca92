"""What a search matches, compiled once for every query that selects: a search, a plugin's look-up (a search run in
process), Bulk Data's `_typeFilter` and a SMART scope's query all compile through `Condition`, with what the caller
sees of the searched type (its look-ups read those rows) and of every other type the query crosses (its look-ups,
chains and `_has` read those). So a query means the same wherever it is written (issue 36).

Steps (server.storage.steps): the look-ups and a chain's are statements; a chain's condition is kept while the
data it was compiled against stands."""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, true

from server.access.tenancy import Visibility
from server.declare.provider import ResourceProvider
from server.engine.context import ServerContext
from server.storage.steps import Steps, database
from server.params.types.base import Sight
from server.search.chains import Chained
from server.search.hops import chain_types, compile_chained
from server.search.request import SearchRequest
from server.search.seen import sight_of
from server.search.referred import keys_query
from server.search.sql import JOINED, MATCHES, WALK, Forms, count_query, forms, lookups, matching, where_of
from server.engine import templates
from server.engine.templates import REFUSED, Parts, bound, named, shape_of
from server.storage.freshness import Snapshot
from server.storage.prepared import Bound

log = logging.getLogger(__name__)


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
        self._found_by: dict[bool, dict[Any, Any]] = {}
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

    def _found(self, named: bool = False) -> Steps[dict[Any, Any]]:
        """What the query looks up, and its clauses' matches: `named` for a search's own (its forms' binds by
        name, server.search.sql.forms), else unnamed (a scope's query, a look-up's condition: what a search
        holding them must never rebind as its own)."""
        found = self._found_by.get(named)
        if found is None:
            looked_up = yield from lookups(self.provider, self.request, self.vis.looked_up, sight=self.sight,
                                           named=named)
            crossed = {**self.others, self.provider.resource_type: self.vis}  # a chain may come back to its own type
            joined = yield from joined_conditions(self.ctx, self.request, self.snapshot, crossed)
            found = self._found_by[named] = {**looked_up, **joined}
        return found

    def formed(self, walk: bool = False, page: bool = False) -> Steps[Formed]:
        """The query's matches among the live rows the caller sees (a search's page and count), built once for
        each form: a page's is its count's unless the page walks an index (`page`) or the id order (`walk`)."""
        form = (walk, page and self.request.led is not None)
        built = self._forms.get(form)
        if built is None:
            built = self._forms[form] = yield from self._formed(*form)
        return built

    @cached_property
    def _decided(self) -> Forms | None:
        return forms(self.request)

    def _formed(self, walk: bool, led: bool) -> Steps[Formed]:
        """A query whose clauses all have forms (server.params.types.base.Binds) and looks nothing up takes the
        parts kept for its forms, its own values bound in them: it builds no SQL unless a statement is built (a
        statement template not trusted yet). Proven, not assumed, as templates are: the first query of those forms
        builds its conditions and keeps their parts, the next VERIFY build theirs too and compare; a difference
        refuses the forms for good (a look-up marks them LOOKS_UP: built for each request)."""
        decided, provider, request = self._decided, self.provider, self.request
        key = None if decided is None else ("condition", provider.resource_type, walk, led, decided.key,
                                            self.vis.key, self.others_key)
        kept = self.ctx.templates.peek(key) if key is not None else None
        if isinstance(kept, KeptParts) and kept.checked >= templates.VERIFY and decided is not None:
            def own() -> list[ColumnElement[bool]]:  # nothing to look up (proven): built from the values alone
                return matching(provider, request, {WALK: True} if walk else None, led, sight=self.sight, named=True)
            return Formed(provider, request, self.vis.clause, own, kept.parts.rebound(decided.values))
        found = yield from self._found(named=True)
        conditions = matching(provider, request, {**found, WALK: True} if walk else found, led, sight=self.sight,
                              named=True)
        formed = Formed(provider, request, self.vis.clause, lambda: conditions)
        if key is not None and decided is not None and (kept is None or isinstance(kept, KeptParts)):
            self.ctx.templates.put(key, self._checked(kept, found, formed.parts, decided))
        return formed

    def _checked(self, kept: KeptParts | None, found: Mapping[Any, Any], parts: Parts,
                 decided: Forms) -> KeptParts | str:
        """What is kept for the forms after a query built its own conditions (`parts`): LOOKS_UP when it looked
        something up, or could (a condition on a referred table: its keys); refused when the kept parts, its values
        bound in them, differ from its own."""
        if any(not (isinstance(k, tuple) and k[0] == MATCHES) for k in found) or any(
                not isinstance(m, Select) and keys_query(self.provider.table, m) is not None
                for k, matches in found.items() for m in matches):
            return LOOKS_UP
        if kept is None:
            return KeptParts(parts, 0)
        if kept.parts.rebound(decided.values).holds(parts):
            return KeptParts(kept.parts, kept.checked + 1)
        log.warning("condition forms refused: their parts bind a value outside the forms",
                    extra={"forms": str(decided.key)[:500]})
        return REFUSED

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
                     lambda: count_query(self.provider, self.request, where=formed.where, up_to=up_to),
                     lambda: formed.built)


LOOKS_UP = "looks up"  # forms whose query looks something up before its conditions: built for each request


@dataclass(frozen=True)
class KeptParts:
    parts: Parts  # of the first query of its forms (its values: Parts.rebound binds another's)
    checked: int  # the queries whose own parts it was compared with (VERIFY: trusted)


class Formed:
    """A query's condition in one form (Condition.formed): its own conditions (`own`, server.search.sql.matching),
    built on first need, and the whole of it among the rows the caller sees (`where`); `parts`, what its statements
    are kept and bound by (server.engine.templates): those of `own`, or given (kept for its forms, its values bound:
    a statement kept as a template then needs no condition built)."""

    def __init__(self, provider: ResourceProvider, request: SearchRequest, visible: ColumnElement[bool] | None,
                 own: Callable[[], list[ColumnElement[bool]]], parts: Parts | None = None) -> None:
        self.provider, self.request, self.visible, self._own, self._parts = provider, request, visible, own, parts

    @cached_property
    def own(self) -> list[ColumnElement[bool]]:
        return self._own()

    @cached_property
    def where(self) -> ColumnElement[bool]:
        return where_of(self.provider, self.visible, self.own)

    @cached_property
    def built(self) -> Parts:
        """The parts of `own` (building it)."""
        return Parts.of(self.own)

    @property
    def parts(self) -> Parts:
        return self.built if self._parts is None else self._parts

    @cached_property
    def shape(self) -> Any:
        return shape_of(self.request, self.parts)
