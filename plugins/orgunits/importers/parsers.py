"""Small parsers every importer uses: dates, timestamps, decimals, FHIR statuses, files, aliases."""
from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

from server import LoadError


FHIR_STATUSES = {"active": "VALID", "suspended": "NEW", "inactive": "REJECTED"}  # Location.status -> ours


def parse_decimal(text: str) -> float:
    """A number, written with a decimal point or a single decimal comma ('12,5'). Raises ValueError."""
    return float(text.replace(",", ".") if text.count(",") == 1 and "." not in text else text)


def parse_date(text: Any) -> date:
    """A date from 'YYYY-MM-DD', an ISO date-time ('1994-01-01T00:00:00.000'), or a FHIR partial date
    ('YYYY' or 'YYYY-MM', taken as the first day). Raises ValueError."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{text!r} is not a date")
    text = text.strip()
    if re.fullmatch(r"\d{4}", text):
        return date(int(text), 1, 1)
    if re.fullmatch(r"\d{4}-\d{2}", text):
        return date(int(text[:4]), int(text[5:]), 1)
    return parse_iso_date(text)


def parse_iso_date(text: str) -> date:
    """A date from 'YYYY-MM-DD' or an ISO date-time (its date). Raises ValueError."""
    return date.fromisoformat(text) if len(text) == 10 else datetime.fromisoformat(text).date()


def parse_timestamp(text: Any) -> datetime:
    """An aware UTC datetime from an ISO date-time; a naive one is taken to be UTC. Raises ValueError."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{text!r} is not a date and time")
    value = datetime.fromisoformat(text.strip())
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


@contextmanager
def reading(path: str | os.PathLike[str]) -> Iterator[None]:
    """Turns the errors of reading the file `path` (missing, unreadable, not UTF-8) into LoadErrors naming it."""
    try:
        yield
    except OSError as exc:
        raise LoadError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise LoadError(f"{path}: not UTF-8 text ({exc})") from None


def read_json(path: str | os.PathLike[str]) -> Any:
    try:
        with reading(path), Path(path).open("rb") as handle:
            return json.load(handle)
    except json.JSONDecodeError as exc:
        raise LoadError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None


def aliases(name: str, *candidates: Any) -> tuple[str, ...]:
    """The distinct non-empty strings among `candidates` that differ from `name`, in order."""
    found: dict[str, None] = {}
    for candidate in candidates:
        if isinstance(candidate, str) and candidate.strip() and candidate.strip() != name:
            found.setdefault(candidate.strip(), None)
    return tuple(found)
