"""Instants as FHIR writes them (UTC, seconds, zone) and as HTTP writes them (RFC 9110 dates)."""
from __future__ import annotations

from datetime import datetime, timezone
from email.utils import format_datetime


def as_utc(value: datetime | str) -> datetime:
    """Aware UTC; a naive value (what SQLite gives back) is taken to be UTC already."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def instant(value: datetime | str) -> str:
    """A FHIR instant: UTC with seconds, milliseconds when there are any, and 'Z'."""
    value = as_utc(value)
    text = value.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{value.microsecond // 1000:03d}Z" if value.microsecond >= 1000 else f"{text}Z"


def http_date(value: datetime | str) -> str:
    return format_datetime(as_utc(value).replace(microsecond=0), usegmt=True)
