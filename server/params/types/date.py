"""`date` parameters: a FHIR date, dateTime or instant with a prefix (eq ne gt lt ge le sa eb) against an instant
column; the value denotes a half-open range (server.params.dates)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, and_, or_

from server.params.dates import DateRange, parse_range
from server.params.types.base import CompileContext, Match


@dataclass(frozen=True)
class DateTarget:
    column: ColumnElement[Any]  # a timezone-aware instant, stored in UTC


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
        column, lower, upper = target.column, value.lower, value.upper
        return {
            "eq": and_(column >= lower, column < upper),
            "ne": or_(column < lower, column >= upper),
            "gt": column >= upper,
            "sa": column >= upper,
            "ge": column >= lower,
            "lt": column < lower,
            "eb": column < lower,
            "le": column < upper,
        }[value.prefix]

    def present(self, target: DateTarget, at: CompileContext) -> Match:
        return target.column.is_not(None)


TYPE = DateType()
