"""What a load refuses although every record is well formed on its own (issue 38: "refuses what no real registry
holds"): a point whose latitude and longitude look swapped, judged in the load's transaction against what the pyramid
says: the unit's previous version (a reload with the two fields swapped), its parent's boundary, or the extent of the
points around it (plugins.orgunits.geo). A record's own implausible values (dates, status, control characters) are
refused where it is read (plugins.orgunits.validation)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, and_, select, tuple_

from plugins.orgunits.geo import misplaced, swapped
from plugins.orgunits.integrity import SAMPLE, Unit, pyramid_of, read_units
from plugins.orgunits.tables import org_unit, org_unit_history, source_version

SAME_PLACE_DEGREES = 0.01  # about a kilometre: a point this close to where the swapped one was is that one
_CHUNK = 2000


def implausible(conn: Connection, data_source_id: int, now: datetime) -> list[str]:
    """What the load would do that no registry holds, for the points it published (versions stamped `now`) into the
    data source: one line ("publish N points whose latitude and longitude look swapped..."), or none."""
    of_source = source_version.c.data_source_id == data_source_id
    if conn.execute(select(org_unit.c.id).join(source_version).where(
            of_source, org_unit.c.updated_at == now, org_unit.c.latitude.is_not(None)).limit(1)).first() is None:
        return []  # no point published: nothing to judge (and nothing read)
    units = read_units(conn, where=of_source)
    written = [unit for unit in units if unit.latitude is not None and unit.longitude is not None]
    stamped = _stamped(conn, [unit.id for unit in written], now)
    written = [unit for unit in written if unit.id in stamped]
    if not written:
        return []
    before = _previous_points(conn, stamped)
    pyramid = pyramid_of(units)
    found: list[tuple[Unit, str]] = []
    for unit in written:
        point = (float(unit.latitude), float(unit.longitude))  # type: ignore[arg-type]
        other = swapped(point)
        old = before.get(unit.id)
        if old is not None and other is not None and _near(other, old) and not _near(point, old):
            found.append((unit, "swapped back, it lies where its previous version was"))
            continue
        wrong = misplaced(pyramid, unit.id)
        if wrong is not None and wrong.swapped:
            found.append((unit, f"its point is {wrong.why}, and the swapped point is not"))
    if not found:
        return []
    first = "; ".join(f"{unit.named()} at latitude {unit.latitude}, longitude {unit.longitude} ({why})"
                      for unit, why in found[:SAMPLE])
    return [f"publish {len(found):,} point{'s' if len(found) != 1 else ''} whose latitude and longitude look swapped "
            f"(first: {first}): check which fields the mapping (or the file's columns) gives as latitude and "
            "longitude"]


def _stamped(conn: Connection, ids: Sequence[int], now: datetime) -> dict[int, int]:
    """Of the units `ids`, those given a version stamped `now`: their version."""
    found: dict[int, int] = {}
    for start in range(0, len(ids), _CHUNK):
        found.update(conn.execute(select(org_unit.c.id, org_unit.c.version_id).where(
            org_unit.c.id.in_(ids[start:start + _CHUNK]), org_unit.c.updated_at == now)).all())
    return found


def _previous_points(conn: Connection, versions: dict[int, int]) -> dict[int, tuple[float, float]]:
    """The point of the version before each of `versions` (unit -> its new version), when it was live and had one."""
    wanted = [(unit, version - 1) for unit, version in versions.items() if version > 1]
    found: dict[int, tuple[float, float]] = {}
    for start in range(0, len(wanted), _CHUNK):
        for unit, snap in conn.execute(select(org_unit_history.c.org_unit_id, org_unit_history.c.snapshot).where(
                and_(tuple_(org_unit_history.c.org_unit_id, org_unit_history.c.version_id)
                     .in_(wanted[start:start + _CHUNK]), org_unit_history.c.deleted.is_(False)))):
            lat, lon = (snap or {}).get("latitude"), (snap or {}).get("longitude")
            if lat is not None and lon is not None:
                found[int(unit)] = (float(lat), float(lon))
    return found


def _near(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return math.hypot(a[0] - b[0], a[1] - b[1]) <= SAME_PLACE_DEGREES
