"""Instants as FHIR writes them (UTC, seconds, zone) and as HTTP writes them (RFC 9110 dates)."""
from __future__ import annotations

from datetime import datetime, timezone


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


def exact_instant(value: datetime | str) -> str:
    """A FHIR instant to the microsecond (a sync point, a cursor: what was stored, not rounded)."""
    value = as_utc(value)
    return f"{value.strftime('%Y-%m-%dT%H:%M:%S')}.{value.microsecond:06d}Z"


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def http_date(value: datetime | str) -> str:
    """RFC 9110's IMF-fixdate, as email.utils.format_datetime(usegmt=True) writes it, without its detours."""
    v = as_utc(value)
    return (f"{_DAYS[v.weekday()]}, {v.day:02d} {_MONTHS[v.month - 1]} {v.year:04d} "
            f"{v.hour:02d}:{v.minute:02d}:{v.second:02d} GMT")
