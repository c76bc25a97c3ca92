"""Statements compiled once for one dialect and run as the driver's own SQL: no building, compiling or execution
machinery per request. `params` gives the driver's parameters (a tuple for positional paramstyles, else a dict);
`run` executes through a SQLAlchemy connection, server.storage.hot on the driver's connection itself. A statement
built per request (a search's) goes through `driver_sql`: compiled once per shape, its values bound each time."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, CursorResult, Dialect
from sqlalchemy.sql import ClauseElement

from server.storage.cache import Bounded


@dataclass(frozen=True)
class Prepared:
    sql: str
    defaults: Mapping[str, Any]  # the statement's own values (limits, constants...)
    positions: tuple[str, ...] | None  # bind names in order, for positional paramstyles

    @classmethod
    def compile(cls, statement: ClauseElement, dialect: Dialect) -> Prepared:
        """Values marked literal_execute and expanding IN lists rendered into the SQL once, here."""
        compiled = statement.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
        positions = tuple(compiled.positiontup) if compiled.positional and compiled.positiontup else None
        return cls(compiled.string, dict(compiled.params), positions)

    def params(self, **values: Any) -> tuple[Any, ...] | dict[str, Any]:
        merged = {**self.defaults, **values} if values else self.defaults
        return tuple(merged[n] for n in self.positions) if self.positions is not None else dict(merged)

    def run(self, conn: Connection, **values: Any) -> CursorResult[Any]:
        return conn.exec_driver_sql(self.sql, self.params(**values))


@dataclass(frozen=True)
class Bound:
    """A statement as the driver takes it: SQL and parameters (a tuple in the order of `names` for positional
    paramstyles, else a dict)."""

    sql: str
    params: tuple[Any, ...] | dict[str, Any]
    names: tuple[str, ...] | None

    def replace(self, name: str, value: Any) -> Bound:
        """The same statement with one parameter bound to another value (a page's position)."""
        if self.names is None:
            return Bound(self.sql, {**self.params, name: value}, None)  # type: ignore[dict-item]
        index = self.names.index(name)
        return Bound(self.sql, (*self.params[:index], value, *self.params[index + 1:]), self.names)


def driver_sql(statement: ClauseElement, dialect: Dialect, cache: Bounded[Any]) -> Bound:
    """A statement built per request as the driver's SQL and parameters, what SQLAlchemy's execution would send,
    compiled once per shape: its compiled form found in `cache` by the statement's cache key (the values apart), the
    values bound by the types' processors, late-rendered values (limits, IN lists of constants) rendered."""
    found = statement._compile_w_cache(dialect, compiled_cache=cache, column_keys=[])  # type: ignore[attr-defined]
    compiled, extracted, collected = (found[0], found[1], found[2] if len(found) == 4 else None)
    extra = {"_collected_params": collected} if collected is not None else {}
    params = compiled.construct_params(extracted_parameters=extracted, escape_names=False, **extra)
    processors: Mapping[str, Any] = compiled._bind_processors
    sql, positions = compiled.string, compiled.positiontup if compiled.positional else None
    if compiled.literal_execute_params or compiled.post_compile_params:
        expanded = compiled._process_parameters_for_postcompile(params)
        sql, params, positions = expanded.statement, expanded.parameters, expanded.positiontup
        processors = {**processors, **expanded.processors}
    if positions is not None:
        return Bound(sql, tuple(processors[k](params[k]) if k in processors else params[k] for k in positions),
                     tuple(positions))
    escaped = compiled.escaped_bind_names
    return Bound(sql, {escaped.get(k, k): processors[k](v) if k in processors else v for k, v in params.items()}, None)
