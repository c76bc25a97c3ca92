"""WGS 84 coordinates: the one range check that every importer and the writer apply (latitude -90..90,
longitude -180..180, altitude any finite number); each caller words its own error around it."""
from __future__ import annotations

import math
from typing import Literal

Axis = Literal["latitude", "longitude", "altitude"]
LIMITS: dict[Axis, float] = {"latitude": 90.0, "longitude": 180.0, "altitude": math.inf}


def within(axis: Axis, value: float) -> bool:
    """Whether `value` is a finite number in the range of `axis`."""
    limit = LIMITS[axis]
    return math.isfinite(value) and -limit <= value <= limit


def bounds(axis: Axis) -> str:
    """The range of `axis` as error messages give it: '-90..90'."""
    return f"-{LIMITS[axis]:g}..{LIMITS[axis]:g}"
