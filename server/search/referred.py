"""Conditions on a table that the provider's table refers to by a foreign key (an org-unit type, a source
version...), found through that key's index instead of a join tested row by row.

Before the search, the keys of the referred rows that meet the condition are looked up (a small table: at most
MAX_KEYS of them) and the condition becomes `fk IN (constants)`, which each planner weighs with its statistics and
serves from an index on the foreign key (in key order with the id after it); more keys than that, and it stays
`fk IN (SELECT key FROM that table WHERE ...)`."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnClause,
    ColumnElement,
    Exists,
    ForeignKey,
    ScalarSelect,
    Select,
    SelectBase,
    Table,
    bindparam,
    false,
    select,
)

from server.storage.steps import Steps, scalars

MAX_KEYS = 50  # referred keys inlined as constants


def tables_of(*elements: Any) -> set[Any]:
    """The tables (and aliases) whose columns the elements use themselves, not inside their subqueries."""
    found: set[Any] = set()
    stack = list(elements)
    while stack:
        element = stack.pop()
        if isinstance(element, ColumnClause):
            if element.table is not None:
                found.add(element.table)
        elif not isinstance(element, SelectBase | ScalarSelect | Exists | BindParameter):  # a subquery: its own FROM
            stack.extend(element.get_children())
    return found


def foreign_key(table: Table, cond: ColumnElement[bool]) -> ForeignKey | None:
    """The one foreign key of `table` to the one other table whose columns `cond` uses; None otherwise."""
    used = tables_of(cond)
    if len(used) != 1 or table in used:
        return None
    (referred,) = used
    keys = [fk for fk in table.foreign_keys if fk.column.table is referred]
    return keys[0] if len(keys) == 1 else None


def referred(table: Table, cond: ColumnElement[bool], keys: Sequence[Any] | None = None) -> ColumnElement[bool]:
    """`cond` as a condition on `table`'s foreign key: IN the `keys` looked up, else IN a subquery."""
    fk = foreign_key(table, cond)
    if fk is None:
        return cond
    if keys is None:
        return fk.parent.in_(select(fk.column).where(cond))
    if not keys:
        return false()
    # constants in the SQL, as the scope's partitions: a prepared statement's plan knows what they select
    return fk.parent.in_(bindparam(None, list(keys), unique=True, expanding=True, literal_execute=True))


def keys_query(table: Table, cond: ColumnElement[bool]) -> Select[Any] | None:
    """The keys `cond` selects in the table `table` refers to (None: not such a condition): one more than MAX_KEYS
    at most."""
    fk = foreign_key(table, cond)
    return None if fk is None else select(fk.column).where(cond).distinct().limit(MAX_KEYS + 1)


def kept_keys(keys: Sequence[Any]) -> tuple[Any, ...] | None:
    """The keys keys_query found, in a stable order; None when too many to inline."""
    return tuple(sorted(keys, key=str)) if len(keys) <= MAX_KEYS else None


def referred_keys(table: Table, cond: ColumnElement[bool]) -> Steps[tuple[Any, ...] | None]:
    """The keys `cond` selects in the table `table` refers to, looked up now (in a thread past the loop's budget:
    the condition may read its whole table); None: not such a condition, or too many keys to inline."""
    query = keys_query(table, cond)
    return None if query is None else kept_keys((yield from scalars(query, bounded=False)))
