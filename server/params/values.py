"""One raw search value -> the typed value its parameter's type decodes (before any SQL)."""
from __future__ import annotations

from typing import Any

from server.errors import InvalidValue
from server.params.param import SearchParam
from server.params.types.base import MissingValue

SearchValue = Any  # MissingValue, or the value class of the parameter's type (StringValue, DateRange, NearValue...)


def parse_value(param: SearchParam, modifier: str | None, raw: str) -> SearchValue:
    if modifier == "missing":
        if raw not in ("true", "false"):
            raise InvalidValue(f"{param.name}:missing takes true or false, not {raw!r}")
        return MissingValue(raw, raw == "true")
    return param.kind.parse(param.name, param.targets, modifier, raw)
