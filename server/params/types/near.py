"""The R4 `near` special parameter: `latitude|longitude|distance|units` over a position in decimal degrees.
Matches go by distance unless _sort is given, and each match's entry tells its distance (the location-distance
extension of Bundle.entry.search)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, and_, case, func, literal

from server.errors import InvalidValue
from server.params.types.base import CompileContext, Match

EARTH_RADIUS_KM = 6371.0088
KM_PER_UNIT = {"km": 1.0, "m": 0.001, "mi": 1.609344, "[mi_i]": 1.609344}
DEFAULT_NEAR_KM = 50.0
DISTANCE = "http://hl7.org/fhir/StructureDefinition/location-distance"


@dataclass(frozen=True)
class NearTarget:
    latitude: ColumnElement[Any]
    longitude: ColumnElement[Any]


@dataclass(frozen=True)
class NearValue:
    raw: str
    latitude: float
    longitude: float
    km: float


def _number(name: str, text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidValue(f"{name}: {what} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise InvalidValue(f"{name}: {what} {text!r} is not a finite number")
    return value


def parse_near(name: str, raw: str) -> NearValue:
    """`latitude|longitude|distance|units`, latitude first; km when units are omitted."""
    parts = raw.split("|")
    if not 2 <= len(parts) <= 4:
        raise InvalidValue(f"{name}: expected latitude|longitude|distance|units, got {raw!r}")
    latitude = _number(name, parts[0], "latitude")
    longitude = _number(name, parts[1], "longitude")
    if not -90 <= latitude <= 90:
        raise InvalidValue(f"{name}: latitude {latitude} is outside -90..90 (latitude comes first)")
    if not -180 <= longitude <= 180:
        raise InvalidValue(f"{name}: longitude {longitude} is outside -180..180")
    distance = _number(name, parts[2], "distance") if len(parts) > 2 and parts[2] else DEFAULT_NEAR_KM
    units = parts[3] if len(parts) > 3 and parts[3] else "km"
    if units not in KM_PER_UNIT:
        raise InvalidValue(f"{name}: units {units!r} are not supported; use km, m or mi")
    if distance <= 0:
        raise InvalidValue(f"{name}: distance must be positive, got {distance}")
    return NearValue(raw, latitude, longitude, distance * KM_PER_UNIT[units])


def distance_km(target: NearTarget, value: NearValue) -> ColumnElement[Any]:
    """Great-circle (haversine) distance in km from the value's point to the target's position."""
    lat1, lon1 = func.radians(literal(value.latitude)), func.radians(literal(value.longitude))
    lat2, lon2 = func.radians(target.latitude), func.radians(target.longitude)
    a = func.power(func.sin((lat2 - lat1) / 2), 2) + \
        func.cos(lat1) * func.cos(lat2) * func.power(func.sin((lon2 - lon1) / 2), 2)
    return 2 * EARTH_RADIUS_KM * func.asin(func.sqrt(case((a > 1.0, 1.0), else_=a)))


class NearType:
    name: ClassVar[str] = "special"
    target: ClassVar[type] = NearTarget
    split: ClassVar[bool] = False

    def modifiers(self, targets: Sequence[NearTarget]) -> frozenset[str]:
        return frozenset()

    def parse(self, name: str, targets: Sequence[NearTarget], modifier: str | None, raw: str) -> NearValue:
        return parse_near(name, raw)

    def compile(self, target: NearTarget, modifier: str | None, value: NearValue,
                at: CompileContext) -> Match | None:
        """A bounding box (which an index on latitude can serve) refined by the great-circle distance."""
        dlat = value.km / 111.0
        dlon = value.km / max(1e-6, 111.320 * math.cos(math.radians(value.latitude)))
        box = and_(target.latitude.is_not(None), target.longitude.is_not(None),
                   target.latitude.between(value.latitude - dlat, value.latitude + dlat))
        if dlon < 180:
            box = and_(box, target.longitude.between(value.longitude - dlon, value.longitude + dlon))
        return and_(box, distance_km(target, value) <= value.km)

    def present(self, target: NearTarget, at: CompileContext) -> Match:
        return and_(target.latitude.is_not(None), target.longitude.is_not(None))

    def measure(self, target: NearTarget, value: NearValue) -> ColumnElement[Any]:
        return distance_km(target, value)

    def entry_search(self, measure: Any) -> dict[str, Any]:
        return {"extension": [{"url": DISTANCE, "valueDistance": {
            "value": round(float(measure), 3), "unit": "km", "system": "http://unitsofmeasure.org", "code": "km"}}]}


TYPE = NearType()
