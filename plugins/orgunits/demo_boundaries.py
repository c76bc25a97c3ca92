"""Boundaries for the demo's upper levels (country, regions, districts): each the outline of the points below it
(its facilities and the areas with a position), a 16-sided hull widened a little, so a map of a region or a
district has areas to draw. Computed from a first pass over the same (deterministic) records: nothing is kept but
16 extreme points per district."""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from plugins.orgunits.records import UnitRecord

DIRECTIONS = tuple((math.cos(2 * math.pi * k / 16), math.sin(2 * math.pi * k / 16)) for k in range(16))
PADDING = 0.04  # degrees around the outermost points


class _Outline:
    """The extreme point (longitude, latitude) in each of 16 directions: a convex outline, in order."""

    def __init__(self) -> None:
        self.best: list[tuple[float, tuple[float, float]] | None] = [None] * len(DIRECTIONS)

    def add(self, point: tuple[float, float]) -> None:
        for k, (dx, dy) in enumerate(DIRECTIONS):
            reach = point[0] * dx + point[1] * dy
            found = self.best[k]
            if found is None or reach > found[0]:
                self.best[k] = (reach, point)

    def points(self) -> list[tuple[float, float]]:
        return [found[1] for found in self.best if found is not None]

    def polygon(self) -> Mapping[str, Any] | None:
        ring = list(dict.fromkeys(self.points()))
        if not ring:
            return None
        cx, cy = sum(p[0] for p in ring) / len(ring), sum(p[1] for p in ring) / len(ring)
        if len(ring) < 3:  # one or two points: a small square around them
            ring = [(cx + PADDING * a, cy + PADDING * b) for a, b in ((-1, -1), (1, -1), (1, 1), (-1, 1))]
        widened = []
        for x, y in ring:  # each vertex pushed outwards
            norm = math.hypot(x - cx, y - cy) or 1.0
            widened.append([round(x + PADDING * (x - cx) / norm, 5), round(y + PADDING * (y - cy) / norm, 5)])
        return {"type": "Polygon", "coordinates": [[*widened, widened[0]]]}


def outlines(records: Iterable[UnitRecord], upper: frozenset[str]) -> dict[int, Mapping[str, Any]]:
    """The boundary of every unit of the `upper` types (country, region, district), from the positioned units
    below it; the lowest of them (the districts) gather the points, the others their children's outlines."""
    parent: dict[int, int | None] = {}
    kinds: dict[int, str] = {}
    district_of: dict[int, int] = {}  # every unit below an upper one -> its nearest upper ancestor
    found: dict[int, _Outline] = {}
    for record in records:
        kinds[record.id] = record.type_short_name
        if record.type_short_name in upper:
            parent[record.id] = record.parent_id
            continue
        district = record.parent_id if record.parent_id in parent else district_of.get(record.parent_id or -1)
        if district is None:
            continue
        district_of[record.id] = district
        if record.latitude is not None and record.longitude is not None:
            found.setdefault(district, _Outline()).add((record.longitude, record.latitude))
    for unit in sorted(parent, key=lambda uid: -_depth(uid, parent)):  # deepest first: outlines flow upwards
        up = parent[unit]
        if up is not None and unit in found:
            for point in found[unit].points():
                found.setdefault(up, _Outline()).add(point)
    return {uid: shape for uid, outline in found.items() if (shape := outline.polygon()) is not None}


def _depth(uid: int, parent: Mapping[int, int | None]) -> int:
    depth = 0
    while (uid := parent.get(uid)) is not None:  # type: ignore[assignment]
        depth += 1
    return depth


def with_boundaries(records: Iterable[UnitRecord], shapes: Mapping[int, Mapping[str, Any]]) -> Iterator[UnitRecord]:
    for record in records:
        shape = shapes.get(record.id)
        yield record if shape is None or record.geometry is not None else replace(record, geometry=shape)
