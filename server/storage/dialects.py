"""The SQL constructs that compile differently per database (the one place, with server.storage.backend, that
names a dialect): each has a default rendering and the one of the database that needs another."""
from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Boolean, ColumnElement, FunctionElement, Select, String, TypeDecorator
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.types import BigInteger, TypeEngine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.visitors import InternalTraversal

from server.params.types.base import bound_list, code_point_order, list_kind
from server.params.types.base import text_index_expression as text_index_expression  # re-exported: server's


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


class _JsonList(TypeDecorator[list[Any]]):
    """A list bound as its JSON text (what SQLite's json_each reads)."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value: list[Any] | None, dialect: Any) -> str | None:
        return None if value is None else json.dumps(value, ensure_ascii=False)

    def process_literal_param(self, value: list[Any] | None, dialect: Any) -> str:
        return "null" if value is None else json.dumps(value, ensure_ascii=False)  # String's literal quotes it


def _single(element: bound_list) -> Any:
    """The list's bind as one parameter (a clone, typed by the caller: its key, hence its value, is the one the
    statement carries, whichever cached form compiled it)."""
    single = element.values._clone()
    single.expanding = False
    return single


@compiles(bound_list, "postgresql")
def _bound_list_pg(element: bound_list, compiler: Any, **kw: Any) -> str:
    """`column = ANY(:array)`: an array of the column's kind (integers or text, without the column's collation:
    equality is the same in any)."""
    single = _single(element)
    single.type = ARRAY(BigInteger() if list_kind(element.column) is int else String())
    return f"{compiler.process(element.column, **kw)} = ANY({compiler.process(single, **kw)})"


@compiles(bound_list, "sqlite")
def _bound_list_sqlite(element: bound_list, compiler: Any, **kw: Any) -> str:
    """`column IN (SELECT value FROM json_each(:list))`: the list as JSON text, its integers and strings compared
    with the column's affinity."""
    single = _single(element)
    single.type = _JsonList()
    listed = compiler.process(single, **kw)
    return f"{compiler.process(element.column, **kw)} IN (SELECT value FROM json_each({listed}))"
