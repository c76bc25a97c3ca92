"""`date` parameters: a FHIR date, dateTime or instant with a prefix (eq ne gt lt ge le sa eb) against an instant
column, or a period (a start and an `end` column); the value denotes a half-open range (server.params.dates).

A period is the closed range [start, end] (a NULL start or end: open on that side; both NULL: no value) matched by
the R4 rules for a target that is a range: eq, the value's range holds the period; ne, it does not; gt, the period
reaches past the value's range (lt: before it); ge, it reaches past it or the value's range holds it (le: before);
sa, it starts after the value's range; eb, it ends before it. An instant is the period of one point: the same
rules."""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, and_, or_

from server.params.dates import DateRange, parse_range
from server.params.types.base import CompileContext, Form, Match, compiled


@dataclass(frozen=True)
class DateTarget:
    column: ColumnElement[Any]  # a timezone-aware instant, stored in UTC; with `end`: the start of a period
    end: ColumnElement[Any] | None = None  # the end of a period (its last instant, included), of the same kind


class DateType:
    name: ClassVar[str] = "date"
    target: ClassVar[type] = DateTarget
    split: ClassVar[bool] = True

    def modifiers(self, targets: Sequence[DateTarget]) -> frozenset[str]:
        return frozenset({"missing"})

    def parse(self, name: str, targets: Sequence[DateTarget], modifier: str | None, raw: str) -> DateRange:
        return parse_range(name, raw, zoned=name == "_lastUpdated")  # a sync point: an instant, with its zone

    def compile(self, target: DateTarget, modifier: str | None, value: DateRange,
                at: CompileContext) -> Match | None:
        return compiled(self, target, modifier, value)

    def form(self, target: DateTarget, modifier: str | None, value: DateRange) -> Form:
        """The prefix; the range's bounds are bound."""
        return Form(value.prefix, (value.lower, value.upper))

    def build(self, target: DateTarget, modifier: str | None, key: Hashable,
              binds: Sequence[ColumnElement[Any]]) -> Match:
        lower, upper = binds
        if target.end is not None:
            return _period(target.column, target.end, key, lower, upper)
        column = target.column
        return {
            "eq": lambda: and_(column >= lower, column < upper),
            "ne": lambda: or_(column < lower, column >= upper),
            "gt": lambda: column >= upper,
            "sa": lambda: column >= upper,
            "ge": lambda: column >= lower,
            "lt": lambda: column < lower,
            "eb": lambda: column < lower,
            "le": lambda: column < upper,
        }[str(key)]()

    def present(self, target: DateTarget, at: CompileContext) -> Match:
        if target.end is not None:
            return or_(target.column.is_not(None), target.end.is_not(None))
        return target.column.is_not(None)


def _period(start: ColumnElement[Any], end: ColumnElement[Any], prefix: Hashable, lower: ColumnElement[Any],
            upper: ColumnElement[Any]) -> ColumnElement[bool]:
    """The periods [start, end] that meet the prefix against the range [lower, upper)."""
    open_start, open_end = start.is_(None), end.is_(None)
    some = or_(start.is_not(None), end.is_not(None))  # both NULL: no value, which no prefix matches
    if prefix == "eq":  # the range holds the period (a bound left open reaches past it)
        return and_(start >= lower, end < upper)
    if prefix == "sa":  # wholly after the range
        return start >= upper
    if prefix == "eb":  # wholly before it
        return end < lower
    return and_(some, {
        "ne": or_(open_start, open_end, start < lower, end >= upper),
        "gt": or_(open_end, end >= upper),  # reaches past the range
        "lt": or_(open_start, start < lower),  # reaches before it
        "ge": or_(open_end, end >= upper, start >= lower),  # reaches past it, or the range holds it
        "le": or_(open_start, start < lower, end < upper),  # reaches before it, or the range holds it
    }[str(prefix)])


TYPE = DateType()
