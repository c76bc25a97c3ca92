"""FHIR ids as a provider's id column stores them."""
from __future__ import annotations

import re
from typing import Any, Protocol

from sqlalchemy import ColumnElement

FHIR_ID = re.compile(r"[A-Za-z0-9\-.]{1,64}")


class Identified(Protocol):
    @property
    def id_column(self) -> ColumnElement[Any]: ...


def coerce_id(column: ColumnElement[Any], raw: str) -> Any | None:
    """A value as the column stores it, or None when it cannot be one (so nothing matches)."""
    try:
        python_type = column.type.python_type
    except NotImplementedError:
        return raw
    if python_type is int:
        return int(raw) if raw.isascii() and raw.lstrip("-").isdigit() and len(raw) < 19 else None
    return raw


def stored_id(provider: Identified, rid: str) -> Any | None:
    """The provider's stored id for a FHIR id, or None when `rid` cannot be one of its ids."""
    return coerce_id(provider.id_column, rid) if FHIR_ID.fullmatch(rid) else None
