"""The protocol every search-parameter type implements, and what the types share.

A type (one module of this package) declares the target class its parameters bind to columns, the modifiers it
supports, how it decodes one raw value (before any SQL) and how it compiles a typed value against one target
into SQL. Three optional protocols add what some types need: a lookup run before the search (`LooksUp`), a
measure of each match that orders the results and is shown in the entry (`Ranks`), and an index whose order the
matches of one value can be read in (`Orders`)."""
from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
import sys
from functools import cache, cached_property
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from sqlalchemy import (BIGINT, CHAR, INTEGER, NVARCHAR, SMALLINT, TEXT, VARCHAR, BigInteger, Boolean, ColumnElement,
                        FromClause, Integer, Select, SmallInteger, String, Text, TypeDecorator, Unicode, UnicodeText,
                        and_, bindparam, func, select)
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.types import NULLTYPE, TypeEngine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.visitors import InternalTraversal
from sqlalchemy.sql.expression import ColumnClause, Join, ScalarSelect, SelectBase
from sqlalchemy.sql.functions import FunctionElement

from server.errors import ConfigError

Match = ColumnElement[bool] | Select[Any]  # a condition on the provider's rows, or a select of the matching ids



class Value(Protocol):
    """What every typed value keeps: its raw text (the self link and the count cache show it)."""

    @property
    def raw(self) -> str: ...


T = TypeVar("T")  # the target class
V = TypeVar("V", bound=Value)  # the typed value


@dataclass(frozen=True)
class Through:
    """A side table holding several values per resource (one row each): `key` points at the provider's id;
    `where` keeps some of its rows only."""

    table: FromClause
    key: ColumnElement[Any]
    where: ColumnElement[bool] | None = None
    # a side table of a history (server.declare.provider.Via.versions): the version its row belongs to
    version: ColumnElement[Any] | None = None

    def __post_init__(self) -> None:
        """`table` may be a join (the side table with another, to keep some rows): what `key`, `where` and `version`
        read must be its columns, else `ids()` would read another table beside it, every pair of rows (a silent
        wrong answer): refused at start-up, named."""
        for role, expression in (("key", self.key), ("where", self.where), ("version", self.version)):
            foreign = [column for column in self.columns_of(expression) if not self.table.c.contains_column(column)]
            if foreign:
                raise ConfigError(f"Through({self._named(self.table)}): its {role} reads "
                                  f"{', '.join(map(str, foreign))}, not a column of its table; give the table that "
                                  "holds it (or a join of both) as the side table")

    def ids(self, cond: ColumnElement[bool]) -> Select[Any]:
        """The ids of the resources having a side row that meets `cond`, read from `table` (a join as well)."""
        inner = select(self.key).select_from(self.table).where(cond)
        return inner if self.where is None else inner.where(self.where)

    @classmethod
    def columns_of(cls, expression: Any) -> Iterator[ColumnClause[Any]]:
        """The table columns an expression reads (a subquery in it reads its own FROM: not looked into)."""
        if expression is None or isinstance(expression, (SelectBase, ScalarSelect)):
            return
        if isinstance(expression, ColumnClause) and expression.table is not None:
            yield expression
            return
        for child in expression.get_children():
            yield from cls.columns_of(child)

    @classmethod
    def _named(cls, table: FromClause) -> str:
        if isinstance(table, Join):
            return f"{cls._named(table.left)} JOIN {cls._named(table.right)}"
        return str(getattr(table, "name", None) or table)


def via(through: Through | None, cond: ColumnElement[bool]) -> Match:
    """The condition itself, or (on a side table) the select of the ids whose side rows meet it."""
    return cond if through is None else through.ids(cond)


@dataclass(frozen=True)
class Sight:
    """What the caller sees, as compilation needs it: made from the caller's visibility of each type
    (server.access.tenancy.Visibility) by server.search.seen.sight_of only, handed to every clause in
    `CompileContext.sight`; a type reads it, never builds it."""

    # of each other type a `LooksUp` type `reads`, the conditions (AND-ed) keeping the live rows the caller sees:
    # what a value matches through (a row it cannot see grants nothing)
    others: Mapping[str, tuple[ColumnElement[bool], ...]] = field(default_factory=dict)
    # of the same types, the live rows its look-ups read: those its account and subtree roots hold, before a SMART
    # scope's query narrows them (a :below may name a unit the query leaves out)
    looked_up: Mapping[str, tuple[ColumnElement[bool], ...]] = field(default_factory=dict)
    # the paths of the subtree roots of a caller limited to subtrees (Visibility.paths; None: not so limited)
    roots: tuple[str, ...] | None = None
    # the rows of the searched type the caller sees when a SMART scope's query narrows its view (None: not narrowed)
    narrowed: ColumnElement[bool] | None = None

    def of(self, resource_type: str) -> tuple[ColumnElement[bool], ...]:
        """The live rows the caller sees of another type; KeyError when the engine did not hand it (it hands each
        type `reads` names)."""
        return self.others[resource_type]

    def looked_up_of(self, resource_type: str) -> tuple[ColumnElement[bool], ...]:
        """The live rows of another type the caller's look-ups read (the path of the unit a :below names);
        KeyError when the engine did not hand it, as `of`."""
        return self.looked_up[resource_type]


EVERY_ROW = Sight()  # a caller that sees every row (no other type read)


@dataclass(frozen=True)
class CompileContext:
    """Where a clause is compiled: the provider's id column and rows, the parameter, what `LooksUp` types found
    before the search, and what the caller sees (`sight`)."""

    id_column: ColumnElement[Any]
    source: FromClause
    param: str
    found: Mapping[Hashable, Any] = field(default_factory=dict)
    sight: Sight = EVERY_ROW


@dataclass(frozen=True)
class MissingValue:
    """`:missing=true|false`, decoded by the engine for every type that lists the modifier."""

    raw: str
    missing: bool


class ParamType(Protocol[T, V]):
    name: ClassVar[str]  # the FHIR search parameter type it serves (SearchParam.type): "string", "special"...
    target: ClassVar[type]  # the target class its parameters are declared with
    split: ClassVar[bool]  # whether a comma separates values (OR-ed); `near` takes one value

    def modifiers(self, targets: Sequence[T]) -> frozenset[str]:
        """The modifiers a parameter with these targets supports ("missing" is decoded by the engine)."""
        ...

    def parse(self, name: str, targets: Sequence[T], modifier: str | None, raw: str) -> V:
        """One raw value (commas already split, unescaped) -> the typed value, keeping `raw`; InvalidValue when
        it is not one."""
        ...

    def compile(self, target: T, modifier: str | None, value: V, at: CompileContext) -> Match | None:
        """The resources whose `target` matches `value`; None: this target cannot match this kind of value."""
        ...

    def present(self, target: T, at: CompileContext) -> Match:
        """The resources having a value in `target` (`:missing`)."""
        ...


@runtime_checkable
class LooksUp(Protocol[T, V]):
    """A type that needs values looked up before the search is compiled (reference :below: the path of the
    named resource). The engine runs each query (limited to live rows the caller may see, taking the first
    column of the first row, None when none) and hands the results to `compile` as `at.found[key]`."""

    def lookups(self, target: T, modifier: str | None, value: V,
                at: CompileContext) -> Sequence[tuple[Hashable, Select[Any]]]: ...

    def reads(self, target: T, modifier: str | None) -> str | None:
        """The other resource type whose rows the look-ups (and then the match) read, None: the provider's own.
        The engine limits those look-ups to that type's live rows the caller's look-ups read (Sight.looked_up_of),
        and hands `compile` the rows it sees of that type, to match through, as at.sight.of(type)."""
        ...


@runtime_checkable
class Ranks(Protocol[T, V]):
    """A type whose matches have a measure (near: the distance): the results go by it unless _sort is given,
    and each match's entry.search shows it."""

    def measure(self, target: T, value: V) -> ColumnElement[Any]: ...

    def entry_search(self, measure: Any) -> dict[str, Any]:
        """What a match's Bundle entry.search holds besides its mode (e.g. an extension)."""
        ...


LED_LOWER, LED_UPPER = "_led_lower", "_led_upper"  # the binds of an IndexOrder's range, by name


@dataclass(frozen=True)
class IndexOrder:
    """The matches of one value as rows of a side table read in the order of its index on (`value`, `key`): the
    rows whose `value` is in [`lower`, `upper`) (a range of that index; no `upper`: unbounded) and meet `where`, a
    resource at its first one by (`value`, `tie`), `tie` being the side table's other key column (which of a
    resource's rows of equal values comes first). Plain values: deciding that a search is led by an index builds no
    SQL; `match` and `earlier` are built when a statement is (a kept page's request builds neither)."""

    table: FromClause
    key: ColumnElement[Any]  # the provider's id
    value: ColumnElement[Any]
    tie: ColumnElement[Any]
    lower: Any
    upper: Any = None
    where: ColumnElement[bool] | None = None

    @property
    def named(self) -> dict[str, Any]:
        """The range's bounds by the names of their binds (a statement kept for another range binds these)."""
        return {LED_LOWER: self.lower, **({LED_UPPER: self.upper} if self.upper is not None else {})}

    def _bound(self, name: str) -> ColumnElement[Any]:
        return bindparam(name, self.named[name], type_=self.value.type)

    @cached_property
    def match(self) -> ColumnElement[bool]:
        """The rows of the range."""
        bounds = index_range(self.value, self._bound(LED_LOWER),
                             None if self.upper is None else self._bound(LED_UPPER))
        return bounds if self.where is None else and_(bounds, self.where)

    @cached_property
    def earlier(self) -> ColumnElement[bool]:
        """What a row sorting before a matching one must meet to match too: the range's lower bound (such a row is
        below the upper one already). The look-up of a resource's earlier rows then goes by its id (PostgreSQL
        estimates a range compared in code-point order at one row, and read the range for each one)."""
        bound = index_range(self.value, self._bound(LED_LOWER))
        return bound if self.where is None else and_(bound, self.where)

    @cached_property
    def aliases(self) -> tuple[FromClause, FromClause]:
        """The side table as a page walks it, and as its earlier rows are looked up (aliases: a subquery of another
        clause on the same table is not correlated with them); the same ones for every part of one search's page."""
        return self.table.alias("_walked"), self.table.alias("_earlier")


@runtime_checkable
class Orders(Protocol[T, V]):
    """A type whose matches of one value can be read in an index's order (string: a prefix, by the normalized
    text, then the id): a search led by such a clause pages in that order (server.search.order)."""

    def index_order(self, target: T, modifier: str | None, value: V) -> IndexOrder | None:
        """None: this target, modifier or value is not read in an index's order."""
        ...


@runtime_checkable
class CompilesAll(Protocol[T, V]):
    """A type that compiles the OR of many values in one target at once (token: one `IN` per system, where one
    comparison per value made a look-up of thousands of codes spend seconds building SQL)."""

    def compile_all(self, target: T, modifier: str | None, values: Sequence[V],
                    at: CompileContext) -> list[Match]: ...


@dataclass(frozen=True)
class Form:
    """What a value compiles to against one target, apart from the values its SQL binds: `key`, every decision
    compile makes on the value (hashable, equal for two values whose SQL differs only in what it binds), and
    `values`, what that SQL binds, in the order `Binds.build` takes them."""

    key: Hashable
    values: tuple[Any, ...] = ()


@runtime_checkable
class Binds(Protocol[T, V]):
    """A type whose compile is a decision on the value (`form`: plain Python, no SQL) and SQL built from that
    decision with the values as binds (`build`). The engine builds each form's SQL once, with named binds, and binds
    a later request's values into the statement kept for it, building no SQL (server.engine.conditions): `build`
    must depend on `key` and `binds` only, never on the values the binds hold. `compile` is then `compiled`'s."""

    def form(self, target: T, modifier: str | None, value: V) -> Form | None:
        """None: this value is compiled by `compile` for each request (a value whose SQL depends on something
        looked up first: a reference's :below)."""
        ...

    def build(self, target: T, modifier: str | None, key: Hashable,
              binds: Sequence[ColumnElement[Any]]) -> Match | None:
        """The SQL of a form, `binds` holding its values (in `Form.values`' order); None: this target cannot match
        this kind of value (as `compile`)."""
        ...


def binds_of(values: Sequence[Any], names: Sequence[str] | None = None) -> tuple[BindParameter[Any], ...]:
    """`values` as binds of no type of their own: each takes its column's type where it is compared, as a plain
    value would; a list, an expanding one (`one_of_build`'s). `names`: their names (unique binds, renamed where a
    statement holds two of one name)."""
    return tuple(bindparam(None if names is None else names[i], v, type_=NULLTYPE, unique=True,
                           expanding=isinstance(v, list)) for i, v in enumerate(values))


@runtime_checkable
class BindsAll(Protocol[T, V]):
    """A CompilesAll type whose OR of values has a form too (`form_all`: one decision on them all; `build_all`: its
    SQL, the values as binds). `compile_all` is then `compiled_all`'s."""

    def form_all(self, target: T, modifier: str | None, values: Sequence[V]) -> Form | None: ...

    def build_all(self, target: T, modifier: str | None, key: Hashable,
                  binds: Sequence[ColumnElement[Any]]) -> list[Match]: ...


def compiled_all(kind: BindsAll[Any, Any], target: Any, modifier: str | None, values: Sequence[Any]) -> list[Match]:
    """A BindsAll type's compile_all of values whose `form_all` is not None."""
    form = kind.form_all(target, modifier, values)
    assert form is not None
    return kind.build_all(target, modifier, form.key, binds_of(form.values))


def compiled(kind: Binds[Any, Any], target: Any, modifier: str | None, value: Any) -> Match | None:
    """A Binds type's compile of a value whose `form` is not None: its form built with the value's own binds."""
    form = kind.form(target, modifier, value)
    assert form is not None
    return kind.build(target, modifier, form.key, binds_of(form.values))


@cache  # per (class, protocol): the parameter types and the four optional protocols, a closed set
def implements(kind: type, protocol: type) -> bool:
    """Whether a parameter type class implements an optional protocol (LooksUp, Ranks, Orders, CompilesAll, Binds): decided once per class
    (a runtime protocol check costs tens of microseconds)."""
    return issubclass(kind, protocol)


def like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")



SURROGATES = (0xD800, 0xDFFF)  # not characters: no text holds them


def successor(prefix: str) -> str | None:
    """The least string greater than every string starting with `prefix` (None: there is none, the prefix is all
    U+10FFFF): its last character that can grow, grown by one, the rest of it dropped."""
    chars = list(prefix)
    while chars and ord(chars[-1]) == sys.maxunicode:
        chars.pop()
    if not chars:
        return None
    following = ord(chars[-1]) + 1
    chars[-1] = chr(SURROGATES[1] + 1 if SURROGATES[0] <= following <= SURROGATES[1] else following)
    return "".join(chars)


def index_range(column: ColumnElement[Any], lower: Any, upper: Any = None) -> ColumnElement[bool]:
    """`column` in [`lower`, `upper`) (no `upper`: unbounded), as a range of its index."""
    return column >= lower if upper is None else and_(column >= lower, column < upper)


class code_point_order(FunctionElement[str]):
    """Its argument compared in code-point order: as it is on SQLite (BINARY); each other database's collation
    is server.storage.dialects' (an index on the same expression serves a range of it: a prefix and its successor)."""

    type = String()
    inherit_cache = True


@compiles(code_point_order)
def _code_points(element: code_point_order, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.clauses, **kw))


# the values an `IN` lists one bind each; more are bound as one list (`one_of`)
INLINE_VALUES = 32


class bound_list(ColumnElement[bool]):
    """`column IN (values)` with the values bound as one list, whatever their number: one statement (one compiled
    form, one parameter) for a thousand codes as for two. Each database's rendering is server.storage.dialects'
    (PostgreSQL: `= ANY(array)`, SQLite: the rows of `json_each`); the default is an expanding `IN`."""

    inherit_cache = True
    type = Boolean()
    _is_implicitly_boolean = True
    _traverse_internals = [("column", InternalTraversal.dp_clauseelement),
                           ("values", InternalTraversal.dp_clauseelement)]

    def __init__(self, column: ColumnElement[Any], values: Sequence[int | str] | BindParameter[Any]) -> None:
        """`values`: the list, or its bind (an expanding one, of the column's type or of none)."""
        self.column = column
        self.values = _typed(values, column) if isinstance(values, BindParameter) else \
            bindparam(None, list(values), type_=column.type, unique=True, expanding=True)


@compiles(bound_list)
def _bound_list(element: bound_list, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.column.in_(element.values), **kw))


def _typed(bind: BindParameter[Any], column: ColumnElement[Any]) -> BindParameter[Any]:
    """A bind of no type of its own typed as `column` (as a comparison with it would)."""
    return bind._with_binary_element_type(column.type) if bind.type._isnull else bind


def one_of(column: ColumnElement[Any], values: Sequence[Any]) -> ColumnElement[bool]:
    """`column` holds one of `values` (codes or ids as the column holds them: `coerce_id`'s): an `IN` of a bind
    each up to INLINE_VALUES, above that a `bound_list` (a look-up's batch of a thousand codes binds one value)."""
    form = one_of_form(column, values)
    return one_of_build(column, form.key, binds_of(form.values)[0])


def one_of_form(column: ColumnElement[Any], values: Sequence[Any]) -> Form:
    """`one_of`'s decision: one value ("one"), a list in an `IN` ("in") or bound as one value ("list")."""
    if len(values) == 1:
        return Form("one", (values[0],))
    return Form("in" if len(values) <= INLINE_VALUES or not _listable(column, values) else "list", (list(values),))


def one_of_build(column: ColumnElement[Any], key: Hashable, bind: ColumnElement[Any]) -> ColumnElement[bool]:
    if key == "one":
        return column == bind
    assert isinstance(bind, BindParameter)
    return column.in_(_typed(bind, column)) if key == "in" else bound_list(column, bind)


# the column types whose values a list binds as they are: exactly these (a subclass may compare otherwise: CITEXT)
_PLAIN: dict[type, type[int] | type[str]] = {
    **dict.fromkeys((Integer, BigInteger, SmallInteger, INTEGER, BIGINT, SMALLINT), int),
    **dict.fromkeys((String, Text, Unicode, UnicodeText, VARCHAR, TEXT, NVARCHAR, CHAR), str)}
_CONVERTING = ("process_bind_param", "bind_processor", "bind_expression", "column_expression")


def _plain(kind: TypeEngine[Any]) -> type[int] | type[str] | None:
    """int or str for a type that binds a value as it is, on every database it names; else None."""
    while isinstance(kind, TypeDecorator):  # one that converts nothing (SQLModel's AutoString): its impl
        if any(getattr(type(kind), name) is not getattr(TypeDecorator, name) for name in _CONVERTING):
            return None
        kind = kind.impl_instance
    found = _PLAIN.get(type(kind))
    variants = [_plain(v) for v in getattr(kind, "_variant_mapping", {}).values()]
    return found if all(v == found for v in variants) else None


def list_kind(column: ColumnElement[Any]) -> type[int] | type[str] | None:
    """What a `bound_list` of `column` holds: int for a plain integer column, str for a plain string one (no type
    of its own converting or comparing what is bound: a Uuid, an Enum, CITEXT, a type decorator with its own bind
    processing; SQLModel's AutoString converts nothing), None for any other: each database's list is compared as
    the column's own values."""
    return _plain(column.type)


def _listable(column: ColumnElement[Any], values: Sequence[Any]) -> bool:
    """A list of `column`'s kind of values, none holding a NUL (SQLite's JSON functions end a string there)."""
    wanted = list_kind(column)
    return wanted is not None and all(type(v) is wanted and (wanted is int or "\x00" not in v) for v in values)


def text_index_expression(column: ColumnElement[Any]) -> ColumnElement[str]:
    """What a token target's `text` column is compared as (`:text`): the expression of the index to declare for it
    (`Index(name, text_index_expression(table.c.column))`)."""
    return code_point_order(func.lower(column))
