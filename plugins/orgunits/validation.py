"""One record checked on its own before it is written: an integer id, a name, a known validation status, a
position within range, a numeric altitude, no empty alias."""
from __future__ import annotations

from plugins.orgunits.coordinates import Axis, bounds, within
from plugins.orgunits.records import UnitRecord, describe
from plugins.orgunits.tables import VALIDATION_STATUSES
from server import LoadError


def check(record: UnitRecord) -> None:
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
