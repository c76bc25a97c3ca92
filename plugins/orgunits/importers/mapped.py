"""Import of any registry export (CSV, JSON, JSON lines) through a mapping file (`importers.mapping`), all or nothing:
the units of the file and the levels above them (each from its own file, or from columns of the units' file), and
an optional root, in ONE transaction.

- source reference = the level's prefix + the id field (units: no prefix by default; a level: its type slugged,
  'county-12'), so that codes repeated from level to level stay apart; integer ids are allocated by source
  reference (`allocate_ids`), so loading the file again maps every unit to the same id;
- parent: the `parent` field, the id of a unit of the level above (of the file itself when there are no levels,
  else among the stored units of the data source); for a level read from the units' columns, the nearest level
  above with a value in the same row; else the root; cycles and dangling parents are refused;
- type: its name from the `type` field (or constant), its code the name slugged ('Health Centre' ->
  'health-centre'), its depth where most of its units stand; category the section's `category`, else 1 COUNTRY,
  2 REGION, 3 DISTRICT and the units HF;
- status: NEW/VALID/REJECTED or active/suspended/inactive, after the field's `map`; default VALID;
- coordinates: numbers or strings ('034.92687', '-1,25'); dates: ISO, or `date_format` (strptime);
- aliases and identifiers: published as Location.alias and alias identifiers; uuid as urn:uuid;
- a level's `identifier_system`: its units' source references are published under it (else the data source's);
- fields a section does not map keep their stored values (another format may carry them).
"""
from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path

from sqlalchemy import Connection, Engine

from plugins.orgunits.importers.common import Hierarchy, level_category, resolve_hierarchy
from plugins.orgunits.importers.declaration import ImportFormat
from plugins.orgunits.importers.mapped_fields import (
    code_of,
    coordinate_of,
    date_of,
    required_text,
    status_of,
    texts_of,
    value_of,
)
from plugins.orgunits.importers.mapping import Section, UnitMapping, check_fields, read_mapping
from plugins.orgunits.importers.parsers import aliases
from plugins.orgunits.importers.tabular import Record, read_records
from plugins.orgunits.importers.transaction import Progress, import_units
from plugins.orgunits.changes import Allowed
from plugins.orgunits.records import KEEPABLE, TypeRecord, UnitRecord, WriteReport, slugify, typical_depth
from plugins.orgunits.tables import DEFAULT_ACCOUNT
from plugins.orgunits.validation import implausible
from server import LoadError

_UUID = re.compile(r"(?:urn:uuid:)?([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})")


@dataclass(frozen=True, slots=True)
class _Unit:
    section: str  # "root", "levels[N]", "units"
    label: str
    ref: str
    parent: str | None  # a source reference
    name: str
    type_name: str
    category: str | None  # None: by depth
    status: str = "VALID"
    uuid: str | None = None
    aliases: tuple[str, ...] = ()
    latitude: float | None = None
    longitude: float | None = None
    altitude: float | None = None
    opening: date | None = None
    closing: date | None = None
    kept: frozenset[str] = field(default=frozenset())


def load_mapped(engine: Engine, path: str | os.PathLike[str], mapping: str | os.PathLike[str],
                data_source: str | None = None, version: int = 1, *, delete_missing: bool = False,
                now: datetime | None = None, progress: Progress | None = None, account: str = DEFAULT_ACCOUNT,
                dry_run: bool = False, allow: Allowed = Allowed()) -> WriteReport:
    """Load `path` as `mapping` says into `data_source` (default: the mapping's) / `version`."""
    spec = read_mapping(mapping)
    units = read_units(spec, Path(path))
    plan = _Plan(units, FORMAT.data_source(data_source, mapping=mapping), spec)
    return import_units(engine, data_source=plan.source, version=version, types=plan.types, records=plan.records,
                        delete_missing=delete_missing, identifier_system=spec.identifier_system, now=now,
                        progress=progress, account=account, fmt=FORMAT.name, kept=spec.units.kept,
                        dry_run=dry_run, allow=allow)


def read_units(spec: UnitMapping, path: Path) -> list[_Unit]:
    """Every unit the mapping names (root, levels top first, then the file's units), checked, without the
    database."""
    rows = read_records(path, spec.units.source, spec.units.key)
    if not rows:
        raise LoadError(f"{path}: no records: nothing loaded (an empty export?)")
    for section in (*(level for level in spec.levels if level.file is None), spec.units):
        check_fields(section, rows, path, spec.units)
    found: dict[str, _Unit] = {}
    if spec.root is not None:
        root = spec.root
        _add(found, _Unit("root", "root", root.id, None, root.name, root.type, root.category,
                          kept=KEEPABLE - {"validation_status"}))
    top = spec.root.id if spec.root is not None else None
    derived = [level for level in spec.levels if level.file is None]
    for index, level in enumerate(spec.levels):
        if level.file is not None:
            above = spec.levels[index - 1] if index > 0 else None
            records = read_records(level.file, level.source, level.key)
            check_fields(level, records, level.file)
            for record in records:
                _add(found, _unit(spec, level, record, _parent_by_field(level, above, record, top)))
    above_file = next((level for level in reversed(spec.levels) if level.file is not None), None)
    lowest = spec.levels[-1] if spec.levels else None
    for record in rows:
        parent = _parent_by_field(derived[0], above_file, record, top) if derived else None
        for level in derived:  # each row names its own chain: the nearest level with a value is the parent
            unit = _unit(spec, level, record, parent, derived=True)
            if unit is not None:
                _add(found, unit, derived=True)
                parent = unit.ref
        if spec.units.spec("parent") is not None or not derived:
            parent = _parent_by_field(spec.units, lowest, record, top)
        _add(found, _unit(spec, spec.units, record, parent))
    return list(found.values())


def _add(found: dict[str, _Unit], unit: _Unit | None, derived: bool = False) -> None:
    """Keep `unit` (None: nothing); a level read from the units' columns names each unit in many rows, alike."""
    if unit is None:
        return
    previous = found.get(unit.ref)
    if previous is None:
        found[unit.ref] = unit
    elif previous.section != unit.section:  # two levels give their units the same source references
        raise LoadError(f"{unit.label}: {unit.section} and {previous.section} (on {previous.label}) both give the "
                        f"source reference {unit.ref!r}: their codes overlap and their prefixes are the same; give "
                        f"one of them a prefix of its own (prefix: in the mapping)")
    elif not derived:
        raise LoadError(f"{unit.label}: id {unit.ref!r} is already used by {previous.label}")
    elif (previous.name, previous.parent) != (unit.name, unit.parent):
        cause = (f"; a {unit.section} unit has one parent, so {unit.section} is likely listed above a level it "
                 "belongs to: list the levels top first (the largest first)" if previous.name == unit.name else "")
        raise LoadError(f"{unit.label}: {unit.ref!r} is {unit.name!r} under {unit.parent!r} here but {previous.name!r} "
                        f"under {previous.parent!r} on {previous.label}{cause}")


def _parent_by_field(section: Section, above: Section | None, record: Record, top: str | None) -> str | None:
    spec = section.spec("parent")
    if spec is None:
        return top
    code = code_of(spec, record)
    if code is None:
        return top
    return (above.prefix if above is not None else section.prefix) + code


def _unit(spec: UnitMapping, section: Section, record: Record, parent: str | None,
          derived: bool = False) -> _Unit | None:
    """The unit of `section` in `record` (None: a level read from the units' columns that this row leaves empty)."""
    code = code_of(section.fields["id"], record)
    if code is None:
        if derived:
            return None  # no unit at this level in this row: the next one hangs from the level above
        raise LoadError(f"{record.label}: no {section.fields['id'].describe()} ({section.key}.id)")
    label = f"{record.label} ({section.key} {code})"
    name = required_text(section.fields["name"], record, label)
    type_name = required_text(section.fields["type"], record, label)
    latitude = coordinate_of(section.spec("latitude"), record, label, "latitude")
    longitude = coordinate_of(section.spec("longitude"), record, label, "longitude")
    if (latitude is None) != (longitude is None):
        raise LoadError(f"{label}: latitude and longitude must be given together")
    uuid = value_of(section.spec("uuid"), record, label)
    if uuid is not None:
        match = _UUID.fullmatch(str(uuid).strip())
        if match is None:
            raise LoadError(f"{label}: uuid {uuid!r} ({section.fields['uuid'].describe()}) is not a UUID")
        uuid = match.group(1).lower()
    names = [item for spec_ in (*section.aliases, *section.identifiers) for item in texts_of(spec_, record, label)]
    unit = _Unit(section.key, label, section.prefix + code, parent, name, type_name, section.category,
                 status_of(section.spec("status"), record, label), uuid, aliases(name, *names), latitude, longitude,
                 coordinate_of(section.spec("altitude"), record, label, "altitude"),
                 date_of(section.spec("opening_date"), record, label, spec.date_format),
                 date_of(section.spec("closing_date"), record, label, spec.date_format), section.kept)
    problem = implausible(unit.name, code, unit.aliases, unit.status, unit.opening, unit.closing, unit.latitude,
                          unit.longitude)
    if problem is not None:
        raise LoadError(f"{label}: {problem}")
    return unit


class _Plan:
    """What needs the database: integer ids, parents among stored units, depths, types. Computed once, by
    `types` (called first by import_units), then used by `records`."""

    def __init__(self, units: list[_Unit], source: str, spec: UnitMapping) -> None:
        self.units, self.source, self.spec = units, source, spec
        self.hierarchy = Hierarchy({}, {}, {})
        self.short_names: dict[str, str] = {}

    def types(self, conn: Connection, source_id: int) -> list[TypeRecord]:
        by_ref = {unit.ref: unit for unit in self.units}
        self.hierarchy = resolve_hierarchy(
            conn, source_id, {unit.ref: unit.parent for unit in self.units},
            label=lambda ref: by_ref[ref].label, reference=lambda parent: f"parent {parent!r}",
            not_found=f"no unit of the file nor any stored unit of data source {self.source!r}",
            source_name=self.source)
        deepest = max(self.hierarchy.depths.values(), default=1)
        found: dict[str, tuple[_Unit, list[int]]] = {}
        for unit in self.units:
            short = slugify(unit.type_name)
            previous = found.setdefault(short, (unit, []))
            if previous[0].type_name != unit.type_name:
                raise LoadError(f"{unit.label}: types {previous[0].type_name!r} and {unit.type_name!r} both have the "
                                f"code {short!r}; name them apart")
            previous[1].append(self.hierarchy.depths[unit.ref])
            self.short_names[unit.ref] = short
        types = []
        for short, (first, depths) in found.items():
            depth = typical_depth(depths)  # where most of its units stand: one out of place changes nothing
            types.append(TypeRecord(first.type_name, short, first.category or _category(self.spec, first, depth,
                                                                                         deepest), depth))
        return types

    def records(self, conn: Connection, source_id: int) -> list[UnitRecord]:
        return [UnitRecord(
            id=self.hierarchy.ids[unit.ref], name=unit.name, type_short_name=self.short_names[unit.ref],
            validation_status=unit.status, uuid=unit.uuid, source_ref=unit.ref,
            identifier_system=self.spec.identifier_system_of(unit.section), aliases=unit.aliases,
            parent_id=self.hierarchy.parent_ids[unit.ref], latitude=unit.latitude, longitude=unit.longitude,
            altitude=unit.altitude, opening_date=unit.opening, closing_date=unit.closing, kept=unit.kept,
        ) for unit in self.units]


def _category(spec: UnitMapping, unit: _Unit, depth: int, deepest: int) -> str:
    """The units of a mapping with levels or a root are facilities (HF); levels go by depth (1 COUNTRY, 2 REGION,
    3 DISTRICT, else the type name), and so do the units of a file without levels (the deepest HF)."""
    if unit.section != "units":
        return level_category(depth, deepest + 1, unit.type_name)
    return "HF" if spec.levels or spec.root is not None else level_category(depth, deepest, unit.type_name)


def _mapping_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mapping", required=True, metavar="FILE",
                        help="the mapping file (YAML) naming the fields: see README, 'Any registry export'")


FORMAT = ImportFormat("mapped", "any registry export (CSV, JSON, JSON lines) read through a mapping file (--mapping): "
                      "id, name, parent, type, status, coordinates, dates, levels; ids allocated, the id field is the "
                      "source reference", load_mapped, lambda own: read_mapping(own["mapping"]).data_source,
                      _mapping_option, ("mapping",))
