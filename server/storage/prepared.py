"""Statements compiled once for one dialect and run as the driver's own SQL: no building, compiling or execution
machinery per request. `params` gives the driver's parameters (a tuple for positional paramstyles, else a dict);
`run` executes through a SQLAlchemy connection, server.storage.hot on the driver's connection itself. A statement
built per request (a search's) goes through `driver_sql`: compiled once per shape, its values bound each time."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from sqlalchemy import Connection, CursorResult, Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.elements import BindParameter

from server.storage.cache import Bounded


Processor = Callable[[Any], Any] | None


class BoundValue(NamedTuple):
    """A value in place of a bind's (what binding a template reads of a bind: its `effective_value`)."""

    effective_value: Any


Valued = BindParameter[Any] | BoundValue


@dataclass(frozen=True)
class Results:
    """What a statement's rows hold, as SQLAlchemy would give them: each column's name and the processor of its
    type for this dialect (SQLite's text instants to datetimes, JSON text to values...), applied to the driver's
    plain rows by `decode`, whichever connection ran the statement."""

    keys: tuple[str, ...]
    processors: tuple[Processor, ...]

    @classmethod
    def of(cls, compiled: Any, dialect: Dialect) -> Results:
        """Found once per compiled statement (kept on it: a compiled shape serves many requests)."""
        found = compiled.__dict__.get("_row_results")
        if found is None:
            columns = getattr(compiled, "_result_columns", None) or ()
            found = compiled.__dict__["_row_results"] = cls(
                tuple(c.keyname for c in columns), tuple(_processor(c.type, dialect) for c in columns))
        return found  # type: ignore[no-any-return]

    def decode(self, rows: Sequence[Sequence[Any]], mappings: bool = False) -> list[Any]:
        """The rows as tuples (or dicts by column name), their values processed."""
        processors = self.processors
        if any(p is not None for p in processors):
            rows = [tuple(v if p is None or v is None else p(v) for p, v in zip(processors, row)) for row in rows]
        if mappings:
            return [dict(zip(self.keys, row)) for row in rows]
        return rows if isinstance(rows, list) else list(rows)


def _processor(type_: Any, dialect: Dialect) -> Processor:
    """The type's result processor when it does not depend on the column's type in the database (psycopg's numerics
    ask for it: a double precision column comes as a float already, which is what they would convert to)."""
    try:
        return type_._cached_result_processor(dialect, None)  # type: ignore[no-any-return]
    except TypeError:
        return None


@dataclass(frozen=True)
class Prepared:
    sql: str
    defaults: Mapping[str, Any]  # the statement's own values (limits, constants...)
    positions: tuple[str, ...] | None  # bind names in order, for positional paramstyles
    results: Results = Results((), ())

    @classmethod
    def compile(cls, statement: ClauseElement, dialect: Dialect) -> Prepared:
        """Values marked literal_execute and expanding IN lists rendered into the SQL once, here."""
        compiled = statement.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
        positions = tuple(compiled.positiontup) if compiled.positional and compiled.positiontup else None
        return cls(compiled.string, dict(compiled.params), positions, Results.of(compiled, dialect))

    def params(self, **values: Any) -> tuple[Any, ...] | dict[str, Any]:
        merged = {**self.defaults, **values} if values else self.defaults
        return tuple(merged[n] for n in self.positions) if self.positions is not None else dict(merged)

    def bind(self, **values: Any) -> Bound:
        return Bound(self.sql, self.params(**values), self.positions, self.results)

    def run(self, conn: Connection, **values: Any) -> CursorResult[Any]:
        return conn.exec_driver_sql(self.sql, self.params(**values))


@dataclass(frozen=True)
class Bound:
    """A statement as the driver takes it: SQL and parameters (a tuple in the order of `names` for positional
    paramstyles, else a dict)."""

    sql: str
    params: tuple[Any, ...] | dict[str, Any]
    names: tuple[str, ...] | None
    results: Results = Results((), ())

    def sends(self, other: Bound) -> bool:
        """Whether the driver is sent the same: the SQL and its parameters (a positional statement's bind names are
        labels only: two compilations of one statement may number its unnamed binds apart)."""
        return self.sql == other.sql and self.params == other.params and \
            (self.names == other.names or (self.names is not None and other.names is not None))

    def replace(self, name: str, value: Any) -> Bound:
        """The same statement with one parameter bound to another value (a page's position) wherever it is (a
        statement without it is itself)."""
        if self.names is None:
            assert isinstance(self.params, dict)
            return self if name not in self.params else Bound(self.sql, {**self.params, name: value}, None,
                                                              self.results)
        assert isinstance(self.params, tuple)
        return Bound(self.sql, tuple(value if n == name else v for n, v in zip(self.names, self.params)), self.names,
                     self.results)


def driver_sql(statement: ClauseElement, dialect: Dialect, cache: Bounded[Any]) -> Bound:
    """A statement built per request as the driver's SQL and parameters, what SQLAlchemy's execution would send,
    compiled once per shape: its compiled form found in `cache` by the statement's cache key (the values apart), the
    values bound by the types' processors, late-rendered values (limits, IN lists of constants) rendered."""
    return Shaped.of(statement, dialect, cache).bound()


@dataclass(frozen=True)
class Shaped:
    """A statement's compiled form (kept in `cache` by its shape) and its own values, in the order of its cache
    key's binds (`extracted`)."""

    compiled: Any
    extracted: tuple[BindParameter[Any], ...]
    dialect: Dialect
    collected: Mapping[str, Any] | None = None  # values SQLAlchemy collected apart from the binds (none of ours)

    @classmethod
    def of(cls, statement: ClauseElement, dialect: Dialect, cache: Bounded[Any]) -> Shaped:
        found = statement._compile_w_cache(dialect, compiled_cache=cache, column_keys=[])  # type: ignore[attr-defined]
        return cls(found[0], tuple(found[1] or ()), dialect, found[2] if len(found) == 4 else None)

    def bound(self, extracted: Sequence[BindParameter[Any]] | None = None) -> Bound:
        """The SQL and parameters with the statement's values, or with `extracted` in their place (a template's)."""
        compiled = self.compiled
        extra = {"_collected_params": self.collected} if self.collected is not None else {}
        params = compiled.construct_params(extracted_parameters=self.extracted if extracted is None else extracted,
                                           escape_names=False, **extra)
        processors: Mapping[str, Any] = compiled._bind_processors
        sql, positions = compiled.string, compiled.positiontup if compiled.positional else None
        if compiled.literal_execute_params or compiled.post_compile_params:
            expanded = compiled._process_parameters_for_postcompile(params)
            sql, params, positions = expanded.statement, expanded.parameters, expanded.positiontup
            processors = {**processors, **expanded.processors}
        results = Results.of(compiled, self.dialect)
        if positions is not None:
            return Bound(sql, tuple(processors[k](params[k]) if k in processors else params[k] for k in positions),
                         tuple(positions), results)
        escaped = compiled.escaped_bind_names
        return Bound(sql, {escaped.get(k, k): processors[k](v) if k in processors else v for k, v in params.items()},
                     None, results)

    def template(self, values: Sequence[Valued]) -> Template | None:
        """This statement as the template of its shape: where each of `values` (the binds of the parts that hold
        a request's values, server.engine.templates) sits among the statement's binds. None: values collected
        apart from the binds, which a template would not rebind."""
        if self.collected:
            return None
        at: dict[int, list[int]] = {}
        for i, bind in enumerate(self.extracted):
            at.setdefault(id(bind), []).append(i)
        return Template(self, tuple(tuple(at.get(id(v), ())) for v in values))


@dataclass(frozen=True)
class Template:
    """A statement compiled once for a shape: the first request's statement (`shaped`), and for each bind of
    its value-holding parts the positions it holds among the statement's binds (`slots`). Another request of the
    same shape binds its parts' values there, building no statement."""

    shaped: Shaped
    slots: tuple[tuple[int, ...], ...]

    def bind(self, values: Sequence[Valued]) -> Bound:
        """The statement with `values` (the request's parts' binds, or their values, in the order the template was
        made with) in place of the first request's."""
        return self.flat.bind(values) if self.flat is not None else self.compiled_bind(values)

    def compiled_bind(self, values: Sequence[Valued]) -> Bound:
        """`bind` through SQLAlchemy's compiled statement (its parameters constructed, its late values rendered)."""
        extracted = list(self.shaped.extracted)
        for positions, value in zip(self.slots, values, strict=True):
            for i in positions:
                extracted[i] = value if isinstance(value, BindParameter) else \
                    extracted[i]._with_value(value.effective_value, maintain_key=True, required=False)
        return self.shaped.bound(extracted)

    @cached_property
    def flat(self) -> Flat | None:
        """The first request's SQL and parameters, and where each slot's value goes among the parameters: the same
        statement for every request when no slot's value is rendered into the SQL (an expanding list, a
        literal_execute value); None otherwise."""
        compiled, first = self.shaped.compiled, self.shaped.bound()
        original, by_key = compiled.cache_key[1], compiled._cache_key_bind_match[0]
        processors, escaped = compiled._bind_processors, compiled.escaped_bind_names
        places: list[tuple[tuple[Any, ...], Processor]] = []
        for positions in self.slots:
            names: set[str] = set()
            for i in positions:
                if original[i].expanding or original[i].literal_execute:
                    return None
                names.update(compiled.bind_names[b] for b in by_key[original[i]])
            if len({processors.get(n) for n in names}) > 1:
                return None
            processor = processors.get(next(iter(names))) if names else None
            found = tuple(j for j, n in enumerate(first.names) if n in names) if first.names is not None else \
                tuple(escaped.get(n, n) for n in names if escaped.get(n, n) in first.params)
            if names and not found:  # a value the driver does not take as a parameter
                return None
            places.append((found, processor))
        return Flat(first, tuple(places))


@dataclass(frozen=True)
class Flat:
    """A template's statement as the driver takes it (`first`: the first request's), and for each slot where its
    value goes (positions of a positional statement's parameters, else their names) and its type's processor."""

    first: Bound
    places: tuple[tuple[tuple[Any, ...], Processor], ...]

    def bind(self, values: Sequence[Valued]) -> Bound:
        first = self.first
        params: Any = list(first.params) if first.names is not None else dict(first.params)
        for (places, processor), bind in zip(self.places, values, strict=True):
            if not places:
                continue
            value = bind.effective_value
            if processor is not None:
                value = processor(value)
            for place in places:
                params[place] = value
        return Bound(first.sql, tuple(params) if first.names is not None else params, first.names, first.results)
