"""Geometry decoding for the importers, standard library only.

- GeoPackage geometry blobs (a small "GP" header, then standard ISO WKB; EWKB flags are tolerated) -> GeoJSON;
- GeoJSON objects from JSON inputs -> checked and normalized GeoJSON.

Everything is WGS 84 (EPSG:4326), x = longitude, y = latitude. Normalized GeoJSON is plain dicts, lists and
floats (no tuples), so that what is written compares equal to what the JSON column gives back. Polygon rings are
kept 2-D (a Z or M ordinate is dropped) and must be closed with at least 4 positions.
Errors are ValueError with a short message; the importers wrap them in a LoadError that names the record.
"""
from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from plugins.orgunits.coordinates import bounds, within

WGS84 = 4326
BOUNDARY_TYPES = ("Polygon", "MultiPolygon")

_WKB_TYPES = {1: "Point", 2: "LineString", 3: "Polygon", 4: "MultiPoint", 5: "MultiLineString",
              6: "MultiPolygon", 7: "GeometryCollection"}
_ENVELOPE_BYTES = {0: 0, 1: 32, 2: 48, 3: 48, 4: 64}
_EWKB_Z, _EWKB_M, _EWKB_SRID = 0x80000000, 0x40000000, 0x20000000


@dataclass(frozen=True, slots=True)
class Decoded:
    """A decoded GeoPackage geometry: its SRS id and GeoJSON geometry (None when the geometry is empty)."""

    srs_id: int
    geometry: dict[str, Any] | None


# --- GeoPackage / WKB -------------------------------------------------------------------------------------------

def decode_gpkg(blob: bytes) -> Decoded:
    """GeoJSON of a GeoPackage geometry blob (GeoPackage 1.x binary format, section 2.1.3)."""
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise ValueError(f"geometry is a {type(blob).__name__}, not a GeoPackage binary blob")
    data = bytes(blob)
    if len(data) < 8 or data[:2] != b"GP":
        raise ValueError("geometry blob does not start with the GeoPackage 'GP' header")
    flags = data[3]
    if flags & 0b0010_0000:
        raise ValueError("extended GeoPackage geometry types are not supported")
    envelope = (flags >> 1) & 0b111
    if envelope not in _ENVELOPE_BYTES:
        raise ValueError(f"invalid envelope indicator {envelope} in the GeoPackage header")
    order = "<" if flags & 1 else ">"
    (srs_id,) = struct.unpack_from(order + "i", data, 4)
    start = 8 + _ENVELOPE_BYTES[envelope]
    if len(data) < start:
        raise ValueError("geometry blob is truncated (header)")
    if flags & 0b0001_0000 and len(data) == start:
        return Decoded(srs_id, None)
    reader = _WkbReader(data, start)
    geometry = reader.geometry()
    if reader.offset != len(data):
        raise ValueError(f"{len(data) - reader.offset} unexpected byte(s) after the WKB geometry")
    return Decoded(srs_id, geometry)


class _WkbReader:
    def __init__(self, data: bytes, offset: int) -> None:
        self.data = data
        self.offset = offset

    def _unpack(self, fmt: str) -> tuple[Any, ...]:
        try:
            values = struct.unpack_from(fmt, self.data, self.offset)
        except struct.error:
            raise ValueError("WKB geometry is truncated") from None
        self.offset += struct.calcsize(fmt)
        return values

    def _count(self, order: str, item_bytes: int) -> int:
        (count,) = self._unpack(order + "I")
        if count * item_bytes > len(self.data) - self.offset:
            raise ValueError(f"WKB geometry is truncated (announces {count} items)")
        return count

    def _header(self) -> tuple[str, str, int]:
        (byte_order,) = self._unpack("B")
        if byte_order not in (0, 1):
            raise ValueError(f"invalid WKB byte order {byte_order}")
        order = "<" if byte_order else ">"
        (code,) = self._unpack(order + "I")
        dims = 2
        if code & (_EWKB_Z | _EWKB_M | _EWKB_SRID):  # PostGIS EWKB
            dims += bool(code & _EWKB_Z) + bool(code & _EWKB_M)
            if code & _EWKB_SRID:
                self._unpack(order + "i")
            code &= 0x0FFFFFFF
        else:
            dims += {0: 0, 1: 1, 2: 1, 3: 2}.get(code // 1000, -99)
            code %= 1000
        kind = _WKB_TYPES.get(code)
        if kind is None or dims < 2:
            raise ValueError(f"unknown WKB geometry type {code}")
        return order, kind, dims

    def _positions(self, order: str, dims: int) -> list[list[float]]:
        count = self._count(order, 8 * dims)
        values = self._unpack(f"{order}{count * dims}d")
        return [[values[i], values[i + 1]] for i in range(0, len(values), dims)]

    def geometry(self, expected: str | None = None) -> dict[str, Any] | None:
        order, kind, dims = self._header()
        if expected is not None and kind != expected:
            raise ValueError(f"a Multi geometry holds a {kind} where a {expected} was expected")
        if kind == "Point":
            values = list(self._unpack(f"{order}{dims}d"))
            if all(math.isnan(value) for value in values):
                return None  # the WKB convention for an empty point
            return {"type": "Point", "coordinates": values[:3] if dims == 3 else values[:2]}
        if kind == "LineString":
            return {"type": kind, "coordinates": self._positions(order, dims)}
        if kind == "Polygon":
            rings = self._count(order, 4)
            return {"type": kind, "coordinates": [self._positions(order, dims) for _ in range(rings)]}
        if kind == "GeometryCollection":
            raise ValueError("geometry collections are not supported")
        parts = self._count(order, 9)
        single = kind[len("Multi"):]
        members = [self.geometry(single) for _ in range(parts)]
        return {"type": kind, "coordinates": [member["coordinates"] for member in members if member is not None]}


# --- GeoJSON ----------------------------------------------------------------------------------------------------

def check_geometry(value: Any, allowed: Sequence[str] = ("Point", *BOUNDARY_TYPES)) -> dict[str, Any]:
    """A checked, normalized copy of a GeoJSON geometry of one of the `allowed` types (extra members such as
    bbox or crs are dropped). A Feature is accepted and its geometry taken."""
    if isinstance(value, dict) and value.get("type") == "Feature":
        value = value.get("geometry")
    if not isinstance(value, dict):
        raise ValueError(f"geometry is not a GeoJSON object: {_short(value)}")
    kind = value.get("type")
    if kind not in allowed:
        raise ValueError(f"geometry type {kind!r} is not one of {', '.join(allowed)}")
    coordinates = value.get("coordinates")
    if kind == "Point":
        return {"type": kind, "coordinates": position(coordinates, keep_altitude=True)}
    if kind == "Polygon":
        return {"type": kind, "coordinates": polygon(coordinates)}
    if kind == "MultiPolygon":
        if not isinstance(coordinates, list) or not coordinates:
            raise ValueError(f"MultiPolygon coordinates must be a non-empty list of polygons: {_short(coordinates)}")
        return {"type": kind, "coordinates": [polygon(item) for item in coordinates]}
    raise ValueError(f"geometry type {kind!r} is not supported")


def check_boundary(geometry: dict[str, Any]) -> dict[str, Any]:
    """`geometry` (a decoded WKB Polygon or MultiPolygon) with its coordinates checked."""
    return check_geometry(geometry, BOUNDARY_TYPES)


def position(value: Any, *, keep_altitude: bool = False) -> list[float]:
    """[longitude, latitude] (and altitude when asked and given), checked to be finite and in range."""
    if not isinstance(value, (list, tuple)) or not 2 <= len(value) <= 4 or not all(_is_number(v) for v in value):
        raise ValueError(f"position {_short(value)} is not [longitude, latitude]")
    longitude, latitude = float(value[0]), float(value[1])
    if not within("longitude", longitude):
        raise ValueError(f"longitude {value[0]} is outside {bounds('longitude')}")
    if not within("latitude", latitude):
        raise ValueError(f"latitude {value[1]} is outside {bounds('latitude')}")
    if keep_altitude and len(value) >= 3:
        altitude = float(value[2])
        if not within("altitude", altitude):
            raise ValueError(f"altitude {value[2]} is not a number")
        return [longitude, latitude, altitude]
    return [longitude, latitude]


def polygon(value: Any) -> list[list[list[float]]]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"polygon {_short(value)} is not a non-empty list of rings")
    rings = []
    for ring in value:
        if not isinstance(ring, list) or len(ring) < 4:
            raise ValueError(f"polygon ring {_short(ring)} has fewer than 4 positions")
        positions = [position(item) for item in ring]
        if positions[0] != positions[-1]:
            raise ValueError(f"polygon ring is not closed: it starts at {positions[0]} and ends at {positions[-1]}")
        rings.append(positions)
    return rings


def nesting(value: Any) -> int:
    """How deeply lists nest in a coordinates array: 1 for a position, 3 for a polygon, 4 for a multipolygon."""
    depth = 0
    while isinstance(value, list) and value:
        depth += 1
        value = value[0]
    return depth


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
