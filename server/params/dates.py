"""FHIR date/dateTime/instant search values -> the half-open UTC range [lower, upper) they denote."""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from server.errors import InvalidValue

EARLIEST = datetime.min.replace(tzinfo=timezone.utc)
LATEST = datetime.max.replace(tzinfo=timezone.utc)
PREFIXES = ("eq", "ne", "gt", "lt", "ge", "le", "sa", "eb")
_DATE = re.compile(
    r"(?P<y>\d{4})(?:-(?P<m>\d{2})(?:-(?P<d>\d{2})"
    r"(?:T(?P<H>\d{2}):(?P<M>\d{2})(?::(?P<S>\d{2})(?P<f>\.\d{1,9})?)?(?P<z>Z|[+-]\d{2}:\d{2})?)?)?)?"
)


@dataclass(frozen=True)
class DateRange:
    raw: str
    prefix: str
    lower: datetime
    upper: datetime


def _add_months(value: datetime, months: int) -> datetime:
    month = value.month - 1 + months
    return value.replace(year=value.year + month // 12, month=month % 12 + 1)


def parse_range(name: str, raw: str, *, prefixes: bool = True, zoned: bool = False) -> DateRange:
    """`zoned`: a value with a time must give its zone (an instant the client means, not one taken as UTC)."""
    prefix = "eq"
    text = raw.strip()
    if prefixes and len(text) > 2 and text[:2].isalpha():
        prefix, text = text[:2], text[2:]
        if prefix not in PREFIXES:
            raise InvalidValue(f"{name}: prefix {prefix!r} is not supported; use one of {', '.join(PREFIXES)}")
    match = _DATE.fullmatch(text)
    if not match:
        raise InvalidValue(f"{name}: {raw!r} is not a FHIR date or instant (e.g. 2025, 2025-03, 2025-03-04, "
                           "2025-03-04T10:20:30Z)")
    g = match.groupdict()
    if zoned and g["H"] is not None and g["z"] is None:
        raise InvalidValue(f"{name}: {raw!r} has a time but no zone; give one (Z or +hh:mm), e.g. "
                           f"{text}Z")
    try:
        return DateRange(raw, prefix, *_bounds(g))
    except (ValueError, OverflowError):  # a month 13, a zone of +99:00, the end of year 9999...
        raise InvalidValue(f"{name}: {raw!r} is not a valid date (month, day, time or zone out of range)") from None


def _bounds(g: dict[str, str | None]) -> tuple[datetime, datetime]:
    zone = timezone.utc  # a time without a zone is taken as UTC
    if g["z"] and g["z"] != "Z":
        sign = 1 if g["z"][0] == "+" else -1
        hours, minutes = int(g["z"][1:3]), int(g["z"][4:6])
        if hours > 14 or minutes > 59:
            raise ValueError("zone offset out of range")
        zone = timezone(sign * timedelta(hours=hours, minutes=minutes))
    lower = datetime(int(g["y"] or 0), int(g["m"] or 1), int(g["d"] or 1), int(g["H"] or 0), int(g["M"] or 0),
                     int(g["S"] or 0), _microseconds(g["f"]), tzinfo=zone)
    try:
        upper = _utc(_upper(lower, g))
    except (ValueError, OverflowError):  # past the end of year 9999
        upper = LATEST
    return _utc(lower), upper


def _microseconds(fraction: str | None) -> int:
    """The microseconds a fraction of a second (".000249") holds, exactly (digits, never a float: .000249 is 249):
    digits past the sixth are dropped, as the instant they name starts within that microsecond."""
    return int((fraction or ".")[1:].ljust(6, "0")[:6])


def _utc(value: datetime) -> datetime:
    """In UTC; an instant beyond the calendar's ends (9999-12-31T23:59-14:00) is that end."""
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:
        return LATEST if value.year > 5000 else EARLIEST


def _upper(lower: datetime, g: dict[str, str | None]) -> datetime:
    if g["m"] is None:
        return lower.replace(year=lower.year + 1)
    if g["d"] is None:
        return _add_months(lower, 1)
    if g["H"] is None:
        return lower + timedelta(days=1)
    if g["S"] is None:
        return lower + timedelta(minutes=1)
    if g["f"] is None:
        return lower + timedelta(seconds=1)
    return lower + timedelta(microseconds=10 ** (6 - min(6, len(g["f"]) - 1)))


def parse_instant(name: str, raw: str, *, zoned: bool = False) -> datetime:
    """An instant parameter such as _since or _at: the start of the given precision."""
    return parse_range(name, raw, prefixes=False, zoned=zoned).lower


def parse_since(items: Sequence[tuple[str, str]]) -> tuple[str, datetime] | None:
    """`_since` (history, Bulk Data): the value as given and its instant, or None when absent. One instant with its
    zone: an empty or repeated one is refused (a client that lost its sync point must not be served everything,
    or another one, in silence)."""
    given = [raw for key, raw in items if key == "_since"]
    if not given:
        return None
    if len(given) > 1:
        raise InvalidValue("_since is given more than once; send one instant (the sync point of the last answer)")
    if not given[0].strip():
        raise InvalidValue("_since is empty; send an instant (the sync point of the last answer, "
                           "Bundle.meta.lastUpdated or transactionTime), or leave _since out for everything")
    return given[0], parse_instant("_since", given[0].strip(), zoned=True)
