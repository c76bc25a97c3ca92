"""What a load writes, as plain records (one per org unit type and per org unit), what it reports, and the
checks of a file's hierarchy that need no database."""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, TypeVar

from server import LoadError, normalize

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class TypeRecord:
    name: str
    short_name: str
    category: str
    depth: int | None = None


@dataclass(frozen=True, slots=True)
class UnitRecord:
    id: int
    name: str
    type_short_name: str
    validation_status: str = "NEW"
    uuid: str | None = None
    source_ref: str | None = None
    identifier_system: str | None = None  # the system of source_ref; None: the data source's
    aliases: tuple[str, ...] = ()
    parent_id: int | None = None
    latitude: float | None = None
    longitude: float | None = None
    altitude: float | None = None
    opening_date: date | None = None
    closing_date: date | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None  # the source's own modification time: kept for reference, not published
    geometry: Mapping[str, Any] | None = None  # GeoJSON (Multi)Polygon boundary
    # fields the file does not carry (KEEPABLE names): a stored unit keeps its values, a new one takes the record's
    kept: frozenset[str] = frozenset()


# the fields a format may leave to the stored unit (the others every format carries: name, type, parent...)
KEEPABLE = frozenset({"validation_status", "uuid", "aliases", "latitude", "longitude", "altitude", "opening_date",
                      "closing_date", "geometry"})
FIELD_NAMES = {"validation_status": "validation status", "opening_date": "opening date",
               "closing_date": "closing date", "geometry": "boundary"}
SAMPLE = 5  # ids named in a report (the first few deleted or missing)


@dataclass(frozen=True, slots=True)
class WriteReport:
    """What a load changed: units inserted, updated, unchanged, deleted (`--delete-missing`) and, without it, the
    units of the data source the file left out (`missing`); the first few ids of each, and notes for the operator."""
    inserted: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    missing: int = 0
    deleted_ids: tuple[int, ...] = ()
    missing_ids: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()
    # every stored unit this write gave another parent (set by write_units; a detail, not compared)
    moved_ids: tuple[int, ...] = field(default=(), compare=False)
    deleted_units: tuple[str, ...] = ()  # the first deleted units as the operator knows them: "code 'name' (id N)"
    missing_units: tuple[str, ...] = ()
    # what the write did to its data source (its Organization): inserted, updated (a new source version served,
    # restored...) or unchanged; set by import_units, a detail of the units' report (not compared)
    source_change: str = field(default="unchanged", compare=False)
    # units withdrawn (their version no longer served: a deleted version each) and restored (their version served
    # again: a live version each), and units stored into a version that is not served (no version published)
    withdrawn: int = 0
    restored: int = 0
    held: int = 0
    # the first units of each kind as the operator knows them ("code 'name' (id N)"), by kind (inserted, updated,
    # withdrawn, restored, held); a detail, not compared
    named: tuple[tuple[str, tuple[str, ...]], ...] = field(default=(), compare=False)
    # a dry run: what the load would refuse (held back mass effects, implausible data), each one line
    refused: tuple[str, ...] = field(default=(), compare=False)

    @property
    def total(self) -> int:
        return self.inserted + self.updated + self.unchanged

    def __add__(self, other: WriteReport) -> WriteReport:
        return WriteReport(self.inserted + other.inserted, self.updated + other.updated,
                           self.unchanged + other.unchanged, self.deleted + other.deleted,
                           self.missing + other.missing, (self.deleted_ids + other.deleted_ids)[:SAMPLE],
                           (self.missing_ids + other.missing_ids)[:SAMPLE], self.notes + other.notes,
                           withdrawn=self.withdrawn + other.withdrawn, restored=self.restored + other.restored,
                           held=self.held + other.held)


def field_list(names: frozenset[str]) -> str:
    """'validation status, opening date and closing date' (in KEEPABLE's published order)."""
    order = ("validation_status", "uuid", "aliases", "latitude", "longitude", "altitude", "opening_date",
             "closing_date", "geometry")
    words = [FIELD_NAMES.get(name, name) for name in order if name in names]
    return " and ".join(filter(None, [", ".join(words[:-1]), words[-1]])) if words else "nothing"


def typical_depth(depths: Iterable[int]) -> int:
    """The depth of a type: where most of its units stand (ties: the shallowest), so that one unit out of place (a
    blank parent cell) never reclassifies the type of all the others (issue 38)."""
    counted = Counter(depths)
    return min(counted, key=lambda depth: (-counted[depth], depth))


def slugify(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", normalize(name)).strip("-") or "source"


def describe(record: UnitRecord) -> str:
    return f"org unit {record.id} ({record.name!r})"


def refuse_cycles(parents: Mapping[K, K | None], label: Callable[[K], str],
                  step: Callable[[K], str] | None = None) -> None:
    """Raise a LoadError naming the records of the first parent cycle among `parents` (key -> parent key, or
    None when the parent is outside the file); `step` names each record of the chain (default: `label`)."""
    done: set[K] = set()
    step = step or label
    for key in parents:
        path: list[K] = []
        on_path: set[K] = set()
        current: K | None = key
        while current is not None and current not in done:
            if current in on_path:
                cycle = path[path.index(current):]
                if len(cycle) == 1:
                    raise LoadError(f"{label(current)} is its own parent")
                chain = " -> ".join(step(item) for item in (*cycle, current))
                raise LoadError(f"{label(current)} is its own ancestor: {chain} (each arrow points to the parent)")
            path.append(current)
            on_path.add(current)
            current = parents.get(current)
        done.update(on_path)
