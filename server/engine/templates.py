"""Statement templates: a search's count and page (and where a page walked along an index resumes) compiled once
per shape of its values, a later request of that shape binding its values into the kept statement (no select, no
cache key, no compilation per request).

A search's values reach its statement through its own conditions only: the condition of each clause, compiled by
its parameter's type from its values and look-ups, and of each chained or _has parameter (server.search.sql.
matching: its `Parts`). Everything else a count or a page is built from (what the caller sees, the page size and
position, the sort, the includes' columns) is in the template's key. SQLAlchemy's cache key of each part gives its
shape (its values apart) and its binds, in an order that is the same for every part of that shape: the template
keeps where each bind of the first request's parts sits among its statement's binds (server.storage.prepared.
Template), and binds a later request's there.

Proven, not assumed: a new template's first VERIFY uses build their statement too and compare the two, SQL and
parameters; a template that differs once (a value that reached the statement another way) is refused for good, its
shape built per request as before, and the server logs it."""
from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.elements import BindParameter

from server.engine.context import ServerContext
from server.search.request import SearchRequest
from server.storage.prepared import Bound, Shaped, Template, Valued, BoundValue

log = logging.getLogger(__name__)
VERIFY = 2  # a new template's first uses, each compared with the statement built for its own values


@dataclass(frozen=True)
class Parts:
    """The parts of a search's condition that hold its values: `shape`, their cache keys (their values apart;
    None: a part SQLAlchemy does not cache, never templated), and their binds in order."""

    shape: Hashable | None
    binds: tuple[Valued, ...]

    @classmethod
    def of(cls, conditions: Sequence[ColumnElement[bool]]) -> Parts:
        """The shape holds which binds are one: two clauses alike (`name=a&name=a`) share their compiled matches,
        so the statement holds their values once, where two others' it holds twice."""
        keys: list[Any] = []
        binds: list[BindParameter[Any]] = []
        for condition in conditions:
            key = condition._generate_cache_key()
            if key is None:
                return cls(None, ())
            keys.append(key.key)
            binds.extend(key.bindparams)
        first: dict[int, int] = {}
        shared = tuple(first.setdefault(id(b), i) for i, b in enumerate(binds))
        return cls((tuple(keys), shared), tuple(binds))

    def rebound(self, values: Mapping[str, Any]) -> Parts:
        """The same parts holding `values` in their binds of those names (a Binds type's values, named by server.
        search.sql.forms), the others as they are: another request's of the same forms, no SQL built."""
        return Parts(self.shape, tuple(BoundValue(values[key]) if isinstance(b, BindParameter) and
                                       (key := b._orig_key) in values else b for b in self.binds))

    def holds(self, other: Parts) -> bool:
        """Whether the two are one shape binding the same values (a bind's `==` builds SQL: compared apart)."""
        return self.shape == other.shape and \
            [b.effective_value for b in self.binds] == [b.effective_value for b in other.binds]


NO_PARTS = Parts.of(())  # a statement holding none of a search's conditions (where a walked page resumes)


def shape_of(request: SearchRequest, parts: Parts) -> Hashable | None:
    """What of a search's values its count's and page's statements depend on: its parameters, its parts' shapes,
    and whether its page walks an index (SearchRequest.led; that walk's range is bound by name, server.params.
    types.base.IndexOrder). None: not templated (a part SQLAlchemy does not cache; a measure orders the matches:
    its value is in the page's columns, not in a part)."""
    if parts.shape is None or request.ranked is not None:
        return None
    led = request.led
    return (request.resource_type, tuple(c.key for c in request.all_clauses), tuple(j.key for j in request.joined),
            parts.shape, None if led is None else (led[0].key, led[1].upper is None))


@dataclass(frozen=True)
class Kept:
    template: Template
    checked: int  # the requests whose own statement it was compared with (VERIFY: trusted)


REFUSED = "refused"  # a shape whose template once bound a statement other than its request's


def named(request: SearchRequest) -> dict[str, Any]:
    """The values a search's statements bind by name, apart from its parts: the range of the index its page walks
    (server.params.types.base.IndexOrder)."""
    led = request.led
    return {} if led is None else led[1].named


def bound(ctx: ServerContext, key: Hashable | None, parts: Parts, by_name: Mapping[str, Any],
          build: Callable[[], ClauseElement], own: Callable[[], Parts] | None = None) -> Bound:
    """The statement `build` makes, as the driver's SQL and parameters: bound into the template kept for `key` (the
    statement's shape: what it is built from besides its parts' values and the values it binds by name, `by_name`;
    None: not templated), else built. `own`: the parts of the conditions `build` holds, when `parts` are another
    request's rebound (Parts.rebound) rather than those."""
    kept = ctx.templates.peek(key) if key is not None else REFUSED
    if isinstance(kept, Kept) and kept.checked >= VERIFY:
        return rebind(kept.template.bind(parts.binds), by_name)
    shaped = Shaped.of(build(), ctx.db.dialect, ctx.statements)
    built = shaped.bound()
    if kept is REFUSED:
        return built
    if kept is None:
        template = shaped.template((parts if own is None else own()).binds)
        ctx.templates.put(key, Kept(template, 0) if template is not None else REFUSED)
    elif rebind(kept.template.bind(parts.binds), by_name).sends(built):
        ctx.templates.put(key, Kept(kept.template, kept.checked + 1))
    else:
        ctx.templates.put(key, REFUSED)
        log.warning("statement template refused: its shape binds a value outside its parts",
                    extra={"shape": str(key)[:500]})
    return built


def rebind(statement: Bound, by_name: Mapping[str, Any]) -> Bound:
    """The statement with the values it binds by name set to `by_name`'s (a kept page's position)."""
    for name, value in by_name.items():
        statement = statement.replace(name, value)
    return statement
