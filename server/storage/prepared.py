"""Statements compiled once for one dialect and run as the driver's own SQL: no building, compiling or execution
machinery per request. `params` gives the driver's parameters (a tuple for positional paramstyles, else a dict);
`run` executes through a SQLAlchemy connection, server.storage.hot on the driver's connection itself."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, CursorResult, Dialect
from sqlalchemy.sql import ClauseElement


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
