"""A chained or _has parameter (server.search.chains) -> one condition on the searched rows, inside the search's one
statement: the last type's clause compiled as the same parameter is unchained, then each hop, innermost first, a
subquery answered through the reference's index, applying the caller's scope and leaving deleted rows out on its
own type (what the caller may not see of a type never decides a match).

The shapes, chosen for what each planner makes of them. Forward (a chain), a reference held in the provider's own
rows is `id IN (ids of the rows whose reference IN (ids of the matching rows))`: the planners size it from the
subqueries' own statistics, and read the referring rows by the reference's index (a bare `reference IN (...)` beside
a scope's path range, SQLite walked the range).
Reverse (_has), the searched rows are `id IN (references the matching rows hold)`; on PostgreSQL
`id = ANY(ARRAY(...))`, the references read once first and the id index probed for each (as a join it was planned
as a scan of the whole table hashed against them). A reference held in a table the rows are joined with by a
foreign key (a small one: the org unit's source version -> its data source) goes through that key, as the
unchained parameter does: forward its keys looked up first (server.search.referred), reverse an EXISTS per row of
that table (it stops at the first match)."""
from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from sqlalchemy import (
    Alias,
    ColumnElement,
    FromClause,
    Select,
    and_,
    exists,
    literal,
    or_,
    select,
    union,
)

from server.declare.provider import ResourceProvider
from server.storage.dialects import InRows
from server.search.chains import Chained, Hop
from server.search.referred import foreign_key, referred, referred_keys, tables_of
from server.search.seen import Seeing, seen, sight_of
from server.search.request import SearchRequest
from server.search.sql import lookups, read_types, where_clause
from server.storage.steps import Steps
from server.params.types.reference import ReferenceTarget, targets_to

def _rows(provider: ResourceProvider, cond: ColumnElement[bool], column: ColumnElement[Any]) -> Select[Any]:
    """`column` of the provider's rows meeting `cond`, from its table alone when that is all they use. Never
    correlated: the same table may be searched around it (partof.partof...), the inner one names its own rows."""
    source = provider.table if tables_of(cond, column) <= {provider.table} else provider.source
    return select(column).select_from(source).where(cond).correlate(None)


def _own_column(provider: ResourceProvider, target: ReferenceTarget) -> bool:
    return getattr(target.column, "table", None) is provider.table


def _forward(source: ResourceProvider, hop: Hop, target: ResourceProvider,
             cond: ColumnElement[bool]) -> Steps[ColumnElement[bool]]:
    """The rows of `source` whose reference points at a row of `target` meeting `cond`."""
    ids = _rows(target, cond, target.id_column)
    arms: list[ColumnElement[bool]] = []
    for t in targets_to(hop.param.targets, hop.target):
        held = t.column.in_(ids)
        if t.through is not None:
            arms.append(InRows(source.id_column, t.through.ids(held).correlate(None)))
        elif _own_column(source, t):  # the rows by their ids, found by the reference's index (SQLite would
            arms.append(source.id_column.in_(_rows(source, held, source.id_column)))  # rather walk a scope's range)
        elif foreign_key(source.table, held) is not None:  # type: ignore[arg-type]
            arms.append(referred(source.table, held,  # type: ignore[arg-type]
                                 (yield from referred_keys(source.table, held))))  # type: ignore[arg-type]
        else:
            arms.append(InRows(source.id_column, select(source.id_column).select_from(source.source).where(held)
                               .correlate(None)))
    return or_(*arms)


@cache  # per table: the providers' tables, declared once per process (no request value reaches it)
def _aliased(table: FromClause) -> Alias:
    """One alias per table (built once: its columns cost more to set up than the rest of a chain)."""
    return table.alias(f"{table.name}_referring")  # type: ignore[attr-defined]


def _referring(source: ResourceProvider, target: ReferenceTarget, cond: ColumnElement[bool]) -> Select[Any]:
    """The ids the rows of `source` meeting `cond` refer to by `target`."""
    if target.through is not None:
        through = target.through
        held = select(target.column).select_from(through.table).where(
            InRows(through.key, _rows(source, cond, source.id_column)), target.column.is_not(None)).correlate(None)
        return held if through.where is None else held.where(through.where)
    own = _own_column(source, target)
    fk = None if own else foreign_key(source.table, target.column.is_not(None))  # type: ignore[arg-type]
    if fk is None:
        return _rows(source, and_(cond, target.column.is_not(None)), target.column)
    joined = _aliased(fk.column.table)  # its rows having at least one matching row of `source`
    any_row = (select(literal(1)).select_from(source.table if tables_of(cond) <= {source.table} else source.source)
               .where(fk.parent == joined.c[fk.column.key], cond).correlate(joined))
    column = joined.c[target.column.key]  # type: ignore[attr-defined]
    return select(column).select_from(joined).where(exists(any_row), column.is_not(None)).correlate(None)


def _reverse(searched: ResourceProvider, hop: Hop, source: ResourceProvider,
             cond: ColumnElement[bool]) -> ColumnElement[bool]:
    """The rows of `searched` that a row of `source` meeting `cond` refers to."""
    refs = [_referring(source, t, cond) for t in targets_to(hop.param.targets, hop.target)]
    return InRows(searched.id_column, refs[0] if len(refs) == 1 else union(*refs))  # type: ignore[arg-type]


def _own(provider: ResourceProvider, visible: ColumnElement[bool] | None) -> list[ColumnElement[bool]]:
    """What every hop applies on its type: live rows (when versioned), the caller's scope."""
    return seen(provider, visible)


def compile_chained(providers: Mapping[str, Any], chained: Chained,
                    seeing: Mapping[str, Seeing]) -> Steps[ColumnElement[bool]]:
    """The condition on the searched rows (their own scope is the search's); `seeing`: the caller's visibility of
    each type the chain crosses. The last type's clause is compiled as the same parameter is unchained: its
    look-ups read the rows a search's look-ups read, it keeps to the rows the caller sees, with what the caller sees
    of that type itself (to it a parent it cannot see is as missing there too)."""
    types = [providers[t] for t in chained.types]
    last = types[-1]
    far = seeing[last.resource_type]
    sub = SearchRequest(last.resource_type, clauses=(chained.clause,))
    at = sight_of(providers, far, seeing, read_types(sub.clauses))
    cond = where_clause(last, sub, (yield from lookups(last, sub, far.looked_up, sight=at)), far.clause, sight=at)
    for i in reversed(range(len(chained.hops))):
        hop, near, beyond = chained.hops[i], types[i], types[i + 1]
        cond = _reverse(near, hop, beyond, cond) if hop.reverse else (yield from _forward(near, hop, beyond, cond))
        if i:
            cond = and_(cond, *_own(near, seeing[near.resource_type].clause))
    return cond


def chain_types(chained: Chained) -> tuple[str, ...]:
    """The other types one chained or _has parameter reads: each type a hop reaches, then those the look-ups of
    its last clause read (what the caller sees of each is compiled into its condition)."""
    return tuple(dict.fromkeys((*chained.types[1:], *read_types((chained.clause,)))))


def crossed(providers: Mapping[str, Any], request: SearchRequest) -> list[ResourceProvider]:
    """The other types the request's chained and _has parameters search, and those its look-ups read (a :below on
    a reference to another type's tree): their data decides its matches too."""
    names = dict.fromkeys([*(t for j in request.joined if isinstance(j, Chained) for t in chain_types(j)),
                           *read_types(request.all_clauses)])
    return [providers[n] for n in names if n != request.resource_type]
