"""One record checked on its own before it is written: an integer id, a name, a known validation status, a
position within range, a numeric altitude, no empty alias; and what no real registry holds (issue 38): control
characters in a name, alias or code (a file read in the wrong encoding), a unit closed before it opened, an active
unit that opens in the future. `implausible` says it for a record as an importer names it (its line), `check` for
the writer."""
from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date

from plugins.orgunits.coordinates import Axis, bounds, within
from plugins.orgunits.records import UnitRecord, describe
from plugins.orgunits.tables import VALIDATION_STATUSES
from server import LoadError

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_WINDOWS_1252 = re.compile(r"[\x80-\x9f]")  # C1 controls: cp1252's quotes, dashes and € read as latin-1


def check(record: UnitRecord, today: date | None = None) -> None:
    if not isinstance(record.id, int) or isinstance(record.id, bool):
        raise LoadError(f"{describe(record)}: id must be an integer")
    if not record.name or not record.name.strip():
        raise LoadError(f"org unit {record.id}: name is empty")
    if record.validation_status not in VALIDATION_STATUSES:
        raise LoadError(f"{describe(record)}: validation status {record.validation_status!r} "
                        f"is not one of {', '.join(VALIDATION_STATUSES)}")
    position: tuple[tuple[Axis, float | None], ...] = (("latitude", record.latitude), ("longitude", record.longitude))
    for axis, value in position:
        if value is not None and not within(axis, value):
            raise LoadError(f"{describe(record)}: {axis} {value} is outside {bounds(axis)}")
    if record.altitude is not None and not within("altitude", record.altitude):
        raise LoadError(f"{describe(record)}: altitude {record.altitude} is not a number")
    if any(not alias or not alias.strip() for alias in record.aliases):
        raise LoadError(f"{describe(record)}: empty alias")
    problem = implausible(record.name, record.source_ref, record.aliases, record.validation_status,
                          record.opening_date, record.closing_date, record.latitude, record.longitude, today)
    if problem is not None:
        code = f"code {record.source_ref}, " if record.source_ref else ""
        raise LoadError(f"org unit {record.id} ({code}{record.name!r}): {problem}")


def implausible(name: str, code: str | None, aliases: Sequence[str], status: str, opening: date | None,
                closing: date | None, latitude: float | None = None, longitude: float | None = None,
                today: date | None = None) -> str | None:
    """What about a unit's values no registry holds, or None."""
    if latitude == 0 and longitude == 0:
        return ("latitude 0, longitude 0 (\"Null Island\", in the Gulf of Guinea): an unknown point written as zeros? "
                "leave both cells empty when the point is not known")
    for what, text in (("name", name), ("code", code or ""), *(("alias", alias) for alias in aliases)):
        bad = CONTROL.search(text)
        if bad:
            hint = ("the file is likely Windows-1252 read as latin-1 or ISO-8859-1: set its encoding to cp1252 "
                    "(a mapping's encoding:)" if _WINDOWS_1252.search(text) else
                    "a control character has no place in a name or code: check the file's encoding and the field")
            return f"{what} {text!r} holds the control character U+{ord(bad.group()):04X}; {hint}"
    if opening is not None and closing is not None and closing < opening:
        return f"closed on {closing} before it opened on {opening}: check the two dates (swapped?)"
    if opening is not None and opening > (today or date.today()) and status == "VALID":
        return (f"opens on {opening}, in the future, but would be published active (status VALID): a unit not open "
                "yet is NEW (suspended), or the date is wrong")
    return None
