"""Where a point should lie, without a GIS: inside its parent's boundary (GeoJSON Polygon or MultiPolygon, ray
casting), or within the extent of the points around it in the pyramid; and whether a point that does not looks
swapped (latitude for longitude: the swapped point lies where it should). The load (plugins.orgunits.plausible) and
`check-data` (plugins.orgunits.integrity) decide with these functions only."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from plugins.orgunits.coordinates import within

Point = tuple[float, float]  # (latitude, longitude)
MARGIN_DEGREES = 1.0  # an extent is widened by this much (about 110 km; and by half its size) before a point is "far"
MIN_REFERENCE = 4  # points a reference extent needs to say anything


@dataclass(frozen=True, slots=True)
class Extent:
    """A latitude/longitude box, widened by its margin."""

    south: float
    north: float
    west: float
    east: float

    @classmethod
    def around(cls, lats: Sequence[float], lons: Sequence[float], widen: float = 0.5) -> Extent:
        """The box of sorted `lats` and `lons`, widened by `widen` of its size and MARGIN_DEGREES."""
        dlat = (lats[-1] - lats[0]) * widen + MARGIN_DEGREES
        dlon = (lons[-1] - lons[0]) * widen + MARGIN_DEGREES
        return cls(lats[0] - dlat, lats[-1] + dlat, lons[0] - dlon, lons[-1] + dlon)

    def holds(self, point: Point) -> bool:
        return self.south <= point[0] <= self.north and self.west <= point[1] <= self.east


MANY = 20  # from this many points, an extent leaves out the outermost 2% on each side (outliers do not widen it)


def extent_of(points: Sequence[Point], leaving: Point | None = None) -> Extent | None:
    """The extent of `points` (one occurrence of `leaving` left out: the point judged), None when too few. Few points:
    their box; many: the box of the 2nd to 98th percentiles; widened by half its size and MARGIN_DEGREES."""
    lats = sorted(p[0] for p in points)
    lons = sorted(p[1] for p in points)
    if leaving is not None and leaving in points:
        lats.remove(leaving[0])
        lons.remove(leaving[1])
    if len(lats) < MIN_REFERENCE:
        return None
    if len(lats) < MANY:
        return Extent.around(lats, lons)
    cut = len(lats) // 50
    return Extent.around(lats[cut:len(lats) - cut], lons[cut:len(lons) - cut])


def swapped(point: Point) -> Point | None:
    """The point with latitude and longitude swapped, when that is a point at all."""
    lat, lon = point
    return (lon, lat) if within("latitude", lon) else None


def _polygons(geometry: Any) -> list[Any] | None:
    """The polygons of a GeoJSON (Multi)Polygon, None when it is none."""
    if not isinstance(geometry, Mapping):
        return None
    kind, coordinates = geometry.get("type"), geometry.get("coordinates")
    polygons = [coordinates] if kind == "Polygon" else coordinates if kind == "MultiPolygon" else None
    return polygons if isinstance(polygons, list) and polygons else None


def inside(geometry: Mapping[str, Any] | None, point: Point) -> bool | None:
    """Whether `point` lies inside the GeoJSON (Multi)Polygon `geometry` (its holes excluded); None when there is no
    usable boundary."""
    polygons = _polygons(geometry)
    if polygons is None:
        return None
    try:
        return any(_in_polygon(polygon, point) for polygon in polygons)
    except (TypeError, ValueError, IndexError):
        return None


def _in_polygon(rings: Sequence[Sequence[Sequence[float]]], point: Point) -> bool:
    if not rings or not _in_ring(rings[0], point):
        return False
    return not any(_in_ring(hole, point) for hole in rings[1:])


def _in_ring(ring: Sequence[Sequence[float]], point: Point) -> bool:
    lat, lon = point
    found = False
    last = ring[-1]
    for vertex in ring:
        x1, y1, x2, y2 = float(last[0]), float(last[1]), float(vertex[0]), float(vertex[1])
        if (y1 > lat) != (y2 > lat) and lon < (x2 - x1) * (lat - y1) / (y2 - y1) + x1:
            found = not found
        last = vertex
    return found


class Placed(NamedTuple):
    """One unit of a pyramid as the checks need it."""

    id: int
    parent: int | None
    point: Point | None
    boundary: Mapping[str, Any] | None = None


class Pyramid:
    """The units of one data source (or account) by id, with their children, for the geometric checks."""

    def __init__(self, units: Iterable[Placed]) -> None:
        self.units = {unit.id: unit for unit in units}
        self.children: dict[int | None, list[int]] = {}
        for unit in self.units.values():
            self.children.setdefault(unit.parent, []).append(unit.id)
        self._points: dict[int, list[Point]] = {}
        self._extents: dict[int, Extent | None] = {}
        self._bounds: dict[int | None, Mapping[str, Any] | None] = {}

    def points_below(self, unit_id: int) -> list[Point]:
        """Every point at or below `unit_id` (computed once per unit)."""
        found = self._points.get(unit_id)
        if found is None:
            found = []
            stack = [unit_id]
            while stack:
                current = stack.pop()
                unit = self.units.get(current)
                if unit is not None and unit.point is not None:
                    found.append(unit.point)
                stack.extend(self.children.get(current, ()))
            self._points[unit_id] = found
        return found

    def ancestors(self, unit_id: int) -> Iterable[Placed]:
        seen = {unit_id}
        parent = self.units[unit_id].parent
        while parent is not None and parent in self.units and parent not in seen:
            seen.add(parent)
            yield self.units[parent]
            parent = self.units[parent].parent

    def reference(self, unit_id: int) -> Extent | None:
        """The extent of the points around `unit_id`: below its parent, else below the nearest ancestor with enough
        of them (its own point left out); None when no ancestor has enough."""
        point = self.units[unit_id].point
        for ancestor in self.ancestors(unit_id):
            points = self.points_below(ancestor.id)
            if len(points) >= MANY:  # its own point is one of many: the percentiles leave it out
                key = ancestor.id
                if key not in self._extents:
                    self._extents[key] = extent_of(points)
                return self._extents[key]
            found = extent_of(points, point)
            if found is not None:
                return found
        return None

    def boundary(self, unit_id: int) -> Mapping[str, Any] | None:
        """The boundary of its nearest ancestor that has one (found once per parent)."""
        parent = self.units[unit_id].parent
        if parent not in self._bounds:
            self._bounds[parent] = next((a.boundary for a in self.ancestors(unit_id)
                                         if _polygons(a.boundary) is not None), None)
        return self._bounds[parent]


@dataclass(frozen=True, slots=True)
class Misplaced:
    """A point that is not where its pyramid says: outside its parent's boundary or far from the points around it,
    and whether the swapped point lies there (then latitude and longitude look swapped)."""

    id: int
    why: str  # "outside the boundary of its parent", "far from the points around it"
    swapped: bool


def misplaced(pyramid: Pyramid, unit_id: int) -> Misplaced | None:
    """Whether the point of `unit_id` is misplaced (None: it lies where it should, or nothing says where)."""
    point = pyramid.units[unit_id].point
    if point is None:
        return None
    other = swapped(point)
    boundary = pyramid.boundary(unit_id)
    if boundary is not None:
        if inside(boundary, point):
            return None
        return Misplaced(unit_id, "outside the boundary of its parent",
                         other is not None and bool(inside(boundary, other)))
    extent = pyramid.reference(unit_id)
    if extent is None or extent.holds(point):
        return None
    return Misplaced(unit_id, "far from the points around it", other is not None and extent.holds(other))
