"""`string` parameters: starts-with on a normalized column (accents and case folded), :exact, :contains.

Starts-with is a range of the normalized column, `normalized >= prefix AND normalized < successor(prefix)`, which an
ordinary index serves on every backend (a case-insensitive LIKE cannot use one on SQLite). The range holds exactly
the values starting with the prefix when the column compares in code-point order: SQLite's default (BINARY), and
on PostgreSQL a column declared with COLLATE "C" (as the materialized paths of server.params.paths)."""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, Table, or_

from server.errors import InvalidValue
from server.params.text import composed, normalize
from server.params.types.base import (
    CompileContext,
    Form,
    IndexOrder,
    Match,
    Through,
    compiled,
    compiled_all,
    index_range,
    like_escape,
    successor,
    via,
)

@dataclass(frozen=True)
class StringTarget:
    normalized: ColumnElement[Any]  # holds server.params.text.normalize(text), in code-point order (see above)
    exact: ColumnElement[Any]
    through: Through | None = None


@dataclass(frozen=True)
class StringValue:
    raw: str
    normalized: str


class StringType:
    name: ClassVar[str] = "string"
    target: ClassVar[type] = StringTarget
    split: ClassVar[bool] = True

    def modifiers(self, targets: Sequence[StringTarget]) -> frozenset[str]:
        return frozenset({"exact", "contains", "missing"})

    def parse(self, name: str, targets: Sequence[StringTarget], modifier: str | None, raw: str) -> StringValue:
        normalized = normalize(raw)
        if not normalized and modifier != "exact":  # accents or spaces alone: a prefix of nothing matches all
            raise InvalidValue(f"{name}: {raw[:100]!r} holds no letter or digit to search by")
        return StringValue(raw, normalized)

    def compile(self, target: StringTarget, modifier: str | None, value: StringValue,
                at: CompileContext) -> Match | None:
        return compiled(self, target, modifier, value)

    def form(self, target: StringTarget, modifier: str | None, value: StringValue) -> Form:
        """:exact, the text as stored (NFC); :contains, its LIKE pattern; a prefix, the range of the normalized
        column from it to its successor (none: unbounded)."""
        if modifier == "exact":
            return Form("exact", (composed(value.raw),))
        if modifier == "contains":
            return Form("contains", (f"%{like_escape(value.normalized)}%",))
        above = successor(value.normalized)
        return Form(("prefix", above is None), (value.normalized,) if above is None else (value.normalized, above))

    def build(self, target: StringTarget, modifier: str | None, key: Hashable,
              binds: Sequence[ColumnElement[Any]]) -> Match:
        if key == "exact":
            cond = target.exact == binds[0]
        elif key == "contains":
            cond = target.normalized.like(binds[0], escape="\\")
        else:
            assert isinstance(key, tuple)
            cond = index_range(target.normalized, binds[0], None if key[1] else binds[1])
        return via(target.through, cond)

    def compile_all(self, target: StringTarget, modifier: str | None, values: Sequence[StringValue],
                    at: CompileContext) -> list[Match]:
        """What the OR of `values` matches in `target`: one condition OR-ing each value's (on a side table, one select
        of the ids whose rows meet any, not one select per value: 100 `:contains` values read the side table once,
        and their statement is a hundredth of the objects to build and compile)."""
        return compiled_all(self, target, modifier, values)

    def form_all(self, target: StringTarget, modifier: str | None, values: Sequence[StringValue]) -> Form:
        """Each value's form, with the number of values it binds."""
        forms = [self.form(target, modifier, value) for value in values]
        return Form(tuple((form.key, len(form.values)) for form in forms), tuple(v for form in forms for v in form.values))

    def build_all(self, target: StringTarget, modifier: str | None, key: Hashable,
                  binds: Sequence[ColumnElement[Any]]) -> list[Match]:
        assert isinstance(key, tuple)
        bare, conds, at = StringTarget(target.normalized, target.exact), [], 0
        for each, taken in key:
            cond = self.build(bare, modifier, each, binds[at:at + taken])
            assert isinstance(cond, ColumnElement)
            conds.append(cond)
            at += taken
        return [via(target.through, or_(*conds))] if conds else []

    def index_order(self, target: StringTarget, modifier: str | None, value: StringValue) -> IndexOrder | None:
        """A prefix on a side table with an index led by its normalized column and key, and one other key column: its
        matches by normalized text, then id (a resource at its first matching row)."""
        through = target.through
        if modifier is not None or through is None or not isinstance(through.table, Table) or \
                getattr(target.normalized, "table", None) is not through.table:
            return None
        ties = [c for c in through.table.primary_key.columns if c is not through.key]
        led = [list(index.columns)[:2] for index in through.table.indexes]
        if len(ties) != 1 or not any(len(cols) == 2 and cols[0] is target.normalized and cols[1] is through.key
                                     for cols in led):
            return None
        return IndexOrder(through.table, through.key, target.normalized, ties[0], value.normalized,
                          successor(value.normalized), through.where)

    def present(self, target: StringTarget, at: CompileContext) -> Match:
        return via(target.through, target.exact.is_not(None))


TYPE = StringType()
