"""The search-parameter types, one module each behind one protocol (server.params.types.base.ParamType).
Adding a type: a module with its target class and its ParamType, and one line in PARAM_TYPES."""
from __future__ import annotations

from typing import Any

from server.params.types import date, near, reference, string, token
from server.params.types.base import ParamType

PARAM_TYPES: tuple[ParamType[Any, Any], ...] = (
    string.TYPE,
    token.TYPE,
    reference.TYPE,
    date.TYPE,
    near.TYPE,
)
BY_TARGET: dict[type, ParamType[Any, Any]] = {t.target: t for t in PARAM_TYPES}


def type_of(target: object) -> ParamType[Any, Any] | None:
    """The type whose parameters are declared with this target (None: not a search target)."""
    return BY_TARGET.get(type(target))
