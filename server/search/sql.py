"""A SearchRequest -> SQL: its clauses as one condition on the provider's rows (each value compiled by its
parameter's type, server.params.types: values OR-ed within a clause, clauses AND-ed), then the queries of searches
and reads: a page (of columns or of stored bodies), a count, rows by id, the resources referring to a page, a read
from the history (compiled once: server.storage.prepared)."""
from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    FromClause,
    Select,
    and_,
    bindparam,
    exists,
    false,
    func,
    literal,
    not_,
    or_,
    select,
    true,
    union,
)
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import AsBoolean, False_

from server.declare.provider import ResourceProvider
from server.params.ids import coerce_id
from server.search.request import Clause, SearchRequest
from server.search.seen import seen
from server.params.types.base import (
    Binds,
    BindsAll,
    CompileContext,
    CompilesAll,
    LooksUp,
    Match,
    MissingValue,
    Sight,
    binds_of,
    implements,
)
from server.search.order import AFTER_VALUE, SORT_BELOW, index_walk, measure_column, order_of, walked_after
from server.storage.dialects import sorted_matches
from server.storage.steps import Steps, scalar, scalars
from server.search.referred import keys_query, kept_keys, referred, tables_of
from server.params.types.reference import ReferenceTarget, referring

Found = Mapping[Hashable, Any]  # what LooksUp types looked up before the search, by their own keys


def _context(provider: ResourceProvider, clause: Clause, found: Found, sight: Sight) -> CompileContext:
    return CompileContext(provider.id_column, provider.source, clause.param.name, found, sight)


def _condition(provider: ResourceProvider, match: Match) -> ColumnElement[bool]:
    return provider.id_column.in_(match) if isinstance(match, Select) else referred(provider.table, match)


REFERRED = "referred"  # found[(REFERRED, clause key, clause raw, position)]: keys of a referred table's rows
JOINED = "joined"  # found[(JOINED, key, raw)]: the condition of a chained or _has parameter (server.search.chains)
WALK = "walk"  # found[WALK]: the search has many matches (WALK_ABOVE): its page walks the id order
MATCHES = "matches"  # found[(MATCHES, clause key, clause raw)]: its values compiled by look_up, reused
WALK_ABOVE = 10_000


FORM = "_form_"  # the names of the binds of a Binds type's values: FORM + "{clause}_{value}_{target}_{bind}"


def _names(prefix: str | None, count: int) -> list[str] | None:
    """The names of a form's binds (`prefix`: its clause, value and target; None: unnamed binds, for a query that is
    not a search's own: a scope's, a chain's, whose binds a search holding them must never take for its own)."""
    return None if prefix is None else [f"{FORM}{prefix}_{k}" for k in range(count)]


@dataclass(frozen=True)
class Forms:
    """A search's own conditions as their parameters' types decide them, before any SQL (server.params.types.base.
    Binds): `key`, each clause's forms (two searches of one key build the same conditions but for what they bind),
    and `values`, what they bind, by the names `_matches` gives their binds."""

    key: Hashable
    values: Mapping[str, Any]


def forms(request: SearchRequest) -> Forms | None:
    """None: a clause compiled for each request (a type without forms, a value without one), or a chained or _has
    parameter."""
    if request.joined:
        return None
    keys: list[Hashable] = []
    values: dict[str, Any] = {}
    firsts = _firsts(request)
    for clause in request.all_clauses:
        kind, at = clause.param.kind, firsts[(clause.key, clause.raw)]
        if clause.modifier == "missing":
            value = clause.values[0]
            assert isinstance(value, MissingValue)
            keys.append((clause.key, at, value.missing))
            continue
        if len(clause.values) > 1 and implements(type(kind), CompilesAll):  # OR-ed values compiled together
            if not implements(type(kind), BindsAll):
                return None
            together: list[Hashable] = []
            for t, target in enumerate(clause.param.targets):
                form = cast(BindsAll[Any, Any], kind).form_all(target, clause.modifier, clause.values)
                if form is None:
                    return None
                together.append(form.key)
                values.update(zip(_names(f"{at}_all_{t}", len(form.values)) or (), form.values))
            keys.append((clause.key, at, "all", tuple(together)))
            continue
        if not implements(type(kind), Binds):
            return None
        binds = cast(Binds[Any, Any], kind)
        decided: list[Hashable] = []
        for v, value in enumerate(clause.values):
            for t, target in enumerate(clause.param.targets):
                form = binds.form(target, clause.modifier, value)
                if form is None:
                    return None
                decided.append(form.key)
                values.update(zip(_names(f"{at}_{v}_{t}", len(form.values)) or (), form.values))
        keys.append((clause.key, at, tuple(decided)))
    return Forms(tuple(keys), values)


def _firsts(request: SearchRequest) -> dict[tuple[str, str], int]:
    """Where each distinct clause first comes among the request's: two alike (`name=a&name=a`) are compiled once."""
    firsts: dict[tuple[str, str], int] = {}
    for i, clause in enumerate(request.all_clauses):
        firsts.setdefault((clause.key, clause.raw), i)
    return firsts


def _compile(kind: Any, target: Any, modifier: str | None, value: Any, at: CompileContext,
             prefix: str | None) -> Match | None:
    """A value of a Binds type built from its form, its binds named by `prefix` (`_names`); else compiled."""
    if implements(type(kind), Binds):
        form = cast(Binds[Any, Any], kind).form(target, modifier, value)
        if form is not None:
            names = _names(prefix, len(form.values))
            return cast(Binds[Any, Any], kind).build(target, modifier, form.key, binds_of(form.values, names))
    return cast(Match | None, kind.compile(target, modifier, value, at))


def _compile_all(kind: Any, target: Any, modifier: str | None, values: Sequence[Any], at: CompileContext,
                 prefix: str | None) -> list[Match]:
    """OR-ed values of a BindsAll type built from their form, its binds named by `prefix`; else compiled."""
    if implements(type(kind), BindsAll):
        form = cast(BindsAll[Any, Any], kind).form_all(target, modifier, values)
        if form is not None:
            names = _names(prefix, len(form.values))
            return cast(BindsAll[Any, Any], kind).build_all(target, modifier, form.key, binds_of(form.values, names))
    return cast(list[Match], cast(CompilesAll[Any, Any], kind).compile_all(target, modifier, values, at))


def _matches(provider: ResourceProvider, clause: Clause, at: CompileContext, index: int | None) -> list[Match]:
    """What each value matches in each target, but what can match nothing (a token's system another target's) when
    something else can: an arm `0 = 1` left in an OR keeps SQLite from reading the others by their indexes.
    `index`: where the clause first comes among the search's own (its binds' names); None: not a search's own."""
    kind, targets = clause.param.kind, clause.param.targets
    named = (lambda suffix: None) if index is None else (lambda suffix: f"{index}_{suffix}")
    if len(clause.values) > 1 and implements(type(kind), CompilesAll):  # OR-ed values: one IN per target and system
        matches = [m for t, target in enumerate(targets)
                   for m in _compile_all(kind, target, clause.modifier, clause.values, at, named(f"all_{t}"))]
    else:
        matches = [m for v, value in enumerate(clause.values) for t, target in enumerate(targets)
                   if (m := _compile(kind, target, clause.modifier, value, at, named(f"{v}_{t}"))) is not None]
    return [m for m in matches if not _never(m)] or matches


def all_matches(provider: ResourceProvider, request: SearchRequest, found: Found, *, sight: Sight,
                named: bool = False) -> dict[Hashable, Any]:
    """What each distinct clause's values match (but `:missing`'s), by (MATCHES, key, raw): a clause twice is
    compiled once. `found`: what LooksUp types looked up; `named`: a search's own conditions, whose binds are named
    by its forms (`forms`: server.engine.conditions rebinds them); any other query's are not."""
    firsts, matched = _firsts(request), {}
    for clause in request.all_clauses:
        key = (MATCHES, clause.key, clause.raw)
        if clause.modifier != "missing" and key not in matched:
            matched[key] = _matches(provider, clause, _context(provider, clause, found, sight),
                                    firsts[(clause.key, clause.raw)] if named else None)
    return matched


def _never(match: Match) -> bool:
    if isinstance(match, Select):
        return any(_never(c) for c in match._where_criteria)
    return isinstance(match, False_) or (isinstance(match, AsBoolean) and match.operator is operators.is_true
                                         and isinstance(match.element, False_))


def _any(provider: ResourceProvider, clause: Clause, matches: list[Match], found: Found) -> ColumnElement[bool]:
    """OR of conditions and side-table selects. Mixed, they become one id IN (... UNION ...): each arm uses its
    own index, where an OR holding an IN (subquery) would scan the whole table; a condition on joined tables alone
    becomes id IN (its select), so counts and pages read the provider's table alone. A condition on a referred
    table (server.search.referred) becomes one on the foreign key, with the keys look_up found."""
    direct = [referred(provider.table, m, found.get((REFERRED, clause.key, clause.raw, i)))
              for i, m in enumerate(matches) if not isinstance(m, Select)]
    side = [m for m in matches if isinstance(m, Select)]
    if not side and (len(direct) != 1 or tables_of(direct[0]) <= {provider.table}):
        return or_(*direct) if direct else false()
    if found.get(WALK):  # many matches: the page walks the id order, looking each row up in the side table
        return or_(*direct, *(s.where(s.selected_columns[0] == provider.id_column).exists() for s in side))
    arms = [*([select(provider.id_column).select_from(provider.source).where(or_(*direct))] if direct else []), *side]
    return provider.id_column.in_(arms[0] if len(arms) == 1 else union(*arms))


def _clause(provider: ResourceProvider, clause: Clause, found: Found, sight: Sight) -> ColumnElement[bool]:
    kind, targets, at = clause.param.kind, clause.param.targets, _context(provider, clause, found, sight)
    if clause.modifier == "missing":
        value = clause.values[0]
        assert isinstance(value, MissingValue)
        present = or_(*(_condition(provider, kind.present(t, at)) for t in targets))
        return not_(present) if value.missing else present
    matched = _any(provider, clause, found[(MATCHES, clause.key, clause.raw)], found)
    if clause.modifier == "not":  # resources with no matching value, including those with no value at all
        return provider.id_column.not_in(select(provider.id_column).select_from(provider.source).where(matched))
    return matched


def where_clause(provider: ResourceProvider, request: SearchRequest, found: Found | None = None,
                 visible: ColumnElement[bool] | None = None, page: bool = False, *,
                 sight: Sight) -> ColumnElement[bool]:
    """`found`: look_up's result (and the conditions of the request's chained parameters, compiled before);
    `visible`: the caller's scope (server.access.tenancy.Visibility.clause); `page`: the condition of a page,
    without the clause whose index the page walks, when it walks one (server.search.order.index_walk); `sight`:
    what the caller sees, as the clauses are compiled (the one `lookups` was given; EVERY_ROW for no caller: a
    root's own query)."""
    return where_of(provider, visible, matching(provider, request, found, page, sight=sight))


def where_of(provider: ResourceProvider, visible: ColumnElement[bool] | None,
             own: Sequence[ColumnElement[bool]]) -> ColumnElement[bool]:
    """A query's `own` conditions (`matching`'s) among the live rows the caller sees."""
    return and_(true(), *seen(provider, visible), *own)


def matching(provider: ResourceProvider, request: SearchRequest, found: Found | None = None,
             page: bool = False, *, sight: Sight, named: bool = False) -> list[ColumnElement[bool]]:
    """The request's own conditions, to be AND-ed: its clauses and its chained and _has parameters (`found`,
    `page`, `sight`: as where_clause's), without the rows the caller may see (`seen`), which whoever uses them
    applies (Bulk Data's `_typeFilter`: on the versions it reads). `named`: as all_matches' (and `found`'s
    matches, when it holds them, were compiled so too)."""
    found = found or {}
    joined = [found[(JOINED, j.key, j.raw)] for j in request.joined]  # KeyError: not compiled
    led = request.led[0] if page and request.led is not None else None
    if any(c.modifier != "missing" and (MATCHES, c.key, c.raw) not in found for c in request.all_clauses):
        found = {**found, **all_matches(provider, request, found, sight=sight, named=named)}
    return [*(_clause(provider, c, found, sight) for c in request.all_clauses if c is not led), *joined]




def read_types(clauses: Iterable[Clause]) -> tuple[str, ...]:
    """The other types whose rows the clauses' look-ups and matches read (LooksUp.reads: a :below on a reference to
    another type's tree), in order: what the caller sees of each is handed to `lookups` in its `sight`."""
    found: dict[str, None] = {}
    for clause in clauses:
        if implements(type(clause.param.kind), LooksUp):
            kind = cast(LooksUp[Any, Any], clause.param.kind)
            found.update(dict.fromkeys(t for target in clause.param.targets
                                       if (t := kind.reads(target, clause.modifier)) is not None))
    return tuple(found)


def lookups(provider: ResourceProvider, request: SearchRequest, visible: ColumnElement[bool] | None = None, *,
            sight: Sight, named: bool = False) -> Steps[dict[Hashable, Any]]:
    """What the search looks up before its query, as steps (server.storage.steps): what the request's
    LooksUp types need (the path of a :below value...), among the live rows the caller's look-ups read (`visible`;
    of another type a type `reads`, `sight.looked_up_of(type)`, one for each of read_types): what they may not
    read is unknown; and the keys of conditions on referred tables
    (server.search.referred). `named`: as all_matches'."""
    found: dict[Hashable, Any] = {}
    for clause in request.all_clauses:
        if not implements(type(clause.param.kind), LooksUp):
            continue
        kind = cast(LooksUp[Any, Any], clause.param.kind)
        at = _context(provider, clause, found, sight)
        for target in clause.param.targets:
            other = kind.reads(target, clause.modifier)
            scope = seen(provider, visible) if other is None else sight.looked_up_of(other)
            for value in clause.values:
                for key, query in kind.lookups(target, clause.modifier, value, at):
                    found[key] = yield from scalar(query.where(*scope).limit(1))
    found.update(all_matches(provider, request, found, sight=sight, named=named))
    for clause in request.all_clauses:  # then the keys of conditions on referred tables (their rows' scope is
        if clause.modifier == "missing":  # the provider's, applied by the search itself)
            continue
        for i, match in enumerate(found[(MATCHES, clause.key, clause.raw)]):
            query = None if isinstance(match, Select) else keys_query(provider.table, match)
            # the keys of a condition on a referred table: it may read that whole table (a thread past the budget)
            if query is not None and (keys := kept_keys((yield from scalars(query, bounded=False)))) is not None:
                found[(REFERRED, clause.key, clause.raw, i)] = keys
    return found


AFTER = "_after"  # the bind of a keyset page's position: a compiled page serves every position


def page_rows(provider: ResourceProvider, request: SearchRequest, rows: FromClause) -> FromClause:
    """What a page reads: the provider's `rows` (its table or source), or the index rows it walks joined to them."""
    walk = index_walk(request)
    return rows if walk is None else walk.source(provider, rows)


def paged(provider: ResourceProvider, request: SearchRequest, query: Select[Any], where: ColumnElement[bool],
          extra_row: int, total: int | None = None, resume: Any = None) -> Select[Any]:
    """`total`: the search's exact total, when counted: few matches are read by the condition's index and sorted.
    `query` reads page_rows; `resume`: where a walked page resumes (server.search.order.resume_query; the engine
    binds it as AFTER_VALUE in a page compiled before)."""
    order, walk = order_of(provider, request), index_walk(request)
    if total is not None and total <= SORT_BELOW and not request.sort and request.ranked is None and walk is None:
        order = [sorted_matches(provider.id_column)]
    query = query.where(where, *(walk.conditions if walk is not None else ())).order_by(*order)
    if request.after is not None and request.keyset is not None:  # keyset: no offset to walk through
        after = bindparam(AFTER, coerce_id(provider.id_column, request.after), type_=provider.id_column.type)
        if walk is not None:
            query = query.where(walked_after(walk, after, bindparam(AFTER_VALUE, resume, type_=walk.value.type)))
        else:
            query = query.where(provider.id_column > after if request.keyset else provider.id_column < after)
    elif request.skip:
        query = query.offset(literal(request.skip, literal_execute=True))
    # constants, not parameters: a planner that does not know the limit may not find the page by an index
    return query.limit(literal(request.count + extra_row, literal_execute=True))


def page_query(provider: ResourceProvider, request: SearchRequest, *, where: ColumnElement[bool], extra_row: int = 0,
               total: int | None = None, resume: Any = None) -> Select[Any]:
    """`where`: the request's where_clause for a page (page=True); `total`: its count, when known; `resume`: see
    `paged`."""
    columns = [*(provider.search_columns or provider.columns), *measure_column(request)]
    query = select(*columns).select_from(page_rows(provider, request, provider.source))
    return paged(provider, request, query, where, extra_row, total, resume)


def table_for(provider: ResourceProvider, where: ColumnElement[bool], *elements: Any) -> FromClause:
    """The provider's table alone when that is all the condition and the elements use: fewer joins to plan."""
    return provider.table if tables_of(where, *elements) <= {provider.table} else provider.source


def within(provider: ResourceProvider, key: ColumnElement[Any], visible: ColumnElement[bool]) -> ColumnElement[bool]:
    """`key` (an id of the provider held elsewhere: a history row's) names a row the caller may see."""
    return exists().where(provider.id_column == key, visible)


def count_query(provider: ResourceProvider, request: SearchRequest, *, where: ColumnElement[bool],
                up_to: int | None = None) -> Select[Any]:
    """The number of matches; `up_to`: counted up to one past it (what a page's index range reads, at most),
    whatever the number of matches. A bounded count of a search whose page walks an index (a name prefix) walks
    it too, `where` then the condition of its page (where_clause(page=True)): it reads at most `up_to` + 1 index
    rows, where a semi-join would first gather every row of the index range (hundreds of thousands at 1M)."""
    walk = index_walk(request) if up_to is not None else None
    if up_to is None:
        return select(func.count()).select_from(table_for(provider, where)).where(where)
    rows = table_for(provider, where) if walk is None else walk.source(provider, table_for(provider, where))
    some = select(literal(1).label("one")).select_from(rows).where(where, *(walk.conditions if walk else ()))
    return select(func.count()).select_from(some.limit(literal(up_to + 1, literal_execute=True)).subquery("matches"))


def read_query(provider: ResourceProvider, stored_ids: list[Any], *, search: bool = False,
               visible: ColumnElement[bool] | None = None, live: bool = False) -> Select[Any]:
    """Rows to render: all columns, or those of search pages (`search`); `visible`: the caller's scope; `live`:
    the live ones only (else deleted ones too: a read answers 410 for them)."""
    columns = provider.search_columns or provider.columns if search else provider.columns
    return select(*columns).select_from(provider.source).where(provider.id_column.in_(stored_ids),
                                                               *seen(provider, visible, live=live))


def referring_query(provider: ResourceProvider, target: ReferenceTarget, stored_ids: list[Any], limit: int,
                    visible: ColumnElement[bool] | None = None, keys: Any = None) -> Select[Any]:
    """Live resources of `provider` whose reference `target` points at one of `stored_ids` (_revinclude); `keys`:
    for a reference held in a referred table, the keys of its rows, looked up before (server.search.include)."""
    cond = referring(target, provider.id_column, stored_ids)
    return (select(*(provider.search_columns or provider.columns)).select_from(provider.source)
            .where(cond if keys is None else referred(provider.table, cond, keys), *seen(provider, visible))  # type: ignore
            .order_by(provider.id_column).limit(limit))
