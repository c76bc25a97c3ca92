"""The SQL constructs that compile differently per database (the one place, with server.storage.backend, that
names a dialect): each has a default rendering and the one of the database that needs another."""
from __future__ import annotations

from typing import Any

from sqlalchemy import Boolean, ColumnElement, FunctionElement, Select, String
from sqlalchemy.types import TypeEngine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.visitors import InternalTraversal

from server.params.types.base import code_point_order


def code_point_string() -> TypeEngine[str]:
    """A string column compared in code-point (byte) order on every database, so that a prefix is a range of its
    index (a path, a search-normalized name): PostgreSQL's collation "C", SQLite's default BINARY."""
    return String().with_variant(String(collation="C"), "postgresql")


@compiles(code_point_order, "postgresql")
def _code_points_pg(element: code_point_order, compiler: Any, **kw: Any) -> str:
    """COLLATE "C" on PostgreSQL: its comparison in code-point order, as SQLite's BINARY is."""
    return f'({compiler.process(element.clauses, **kw)}) COLLATE "C"'


class InRows(ColumnElement[bool]):
    """`column IN (rows)`; on PostgreSQL `column = ANY(ARRAY(rows))`: the rows read once, first (an InitPlan), then
    the column's index probed for each."""

    inherit_cache = True
    type = Boolean()
    _is_implicitly_boolean = True
    _traverse_internals = [("column", InternalTraversal.dp_clauseelement),
                           ("rows", InternalTraversal.dp_clauseelement)]

    def __init__(self, column: ColumnElement[Any], rows: Select[Any]) -> None:
        self.column = column
        self.rows = rows


@compiles(InRows)
def _in_rows(element: InRows, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.column.in_(element.rows), **kw))


@compiles(InRows, "postgresql")
def _any_of_rows(element: InRows, compiler: Any, **kw: Any) -> str:
    rows = compiler.process(element.rows.scalar_subquery(), **kw)  # "(SELECT ...)"
    return f"{compiler.process(element.column, **kw)} = ANY(ARRAY{rows})"



class sorted_matches(FunctionElement[Any]):
    """The id as an ORDER BY key that SQLite's planner cannot serve by walking the table in id order: it then
    reads the matches from the index of the condition and sorts them (SQLite plans without statistics of value
    ranges, and would walk the whole table for a page of a few matches). Other databases: the id itself."""

    inherit_cache = True
    name = "sorted_matches"


@compiles(sorted_matches)
def _sorted_matches(element: sorted_matches, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.clauses, **kw))


@compiles(sorted_matches, "sqlite")
def _sorted_matches_sqlite(element: sorted_matches, compiler: Any, **kw: Any) -> str:
    return "+" + str(compiler.process(element.clauses, **kw))
