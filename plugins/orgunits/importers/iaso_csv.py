"""Import of Iaso's "export org units" CSV (French headers), all or nothing."""
from __future__ import annotations

import csv
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

from sqlalchemy import Connection, Engine

from plugins.orgunits.coordinates import Axis, bounds, within
from plugins.orgunits.importers.common import stored_by
from plugins.orgunits.importers.declaration import ImportFormat
from plugins.orgunits.importers.parsers import parse_decimal, parse_iso_date, parse_timestamp, reading
from plugins.orgunits.importers.transaction import Progress, import_units
from plugins.orgunits.changes import Allowed
from plugins.orgunits.records import TypeRecord, UnitRecord, WriteReport, refuse_cycles, typical_depth
from plugins.orgunits.tables import DEFAULT_ACCOUNT, VALIDATION_STATUSES, org_unit
from server import LoadError

ID, NAME, TYPE = "ID", "Nom", "Type"
LATITUDE, LONGITUDE = "Latitude", "Longitude"
OPENING, CLOSING = "Date d'ouverture", "Date de fermeture"
CREATED, UPDATED = "Date de création", "Date de modification"
STATUS, REF = "Validé", "Référence externe"
REQUIRED = (ID, NAME, TYPE)
KEPT = frozenset({"uuid", "aliases", "altitude", "geometry"})  # what only the GeoPackage (or nothing) carries
CATEGORIES = {"COUN": "COUNTRY", "REG": "REGION", "DIST": "DISTRICT"}
_PARENT_NAME = re.compile(r"parent (\d+)")
_PARENT_REF = re.compile(r"Ref Ext parent (\d+)")


@dataclass(frozen=True, slots=True)
class _Row:
    line: int
    id: int
    name: str
    type_name: str
    code: str
    ref: str | None
    status: str
    latitude: float | None
    longitude: float | None
    opening: date | None
    closing: date | None
    created: datetime | None
    updated: datetime | None
    parent_names: tuple[str, ...]
    parent_refs: tuple[str, ...]

    @property
    def depth(self) -> int:
        listed = [index for index, (name, ref) in enumerate(zip(self.parent_names, self.parent_refs), 1)
                  if name or ref]
        return max(listed, default=0) + 1

    def label(self) -> str:
        return f"line {self.line} (ID {self.id}, {self.name!r})"


def load_iaso_csv(engine: Engine, path: str | os.PathLike[str], data_source: str | None = None, version: int = 1, *,
                  delete_missing: bool = False, now: datetime | None = None, progress: Progress | None = None,
                  account: str = DEFAULT_ACCOUNT, dry_run: bool = False, allow: Allowed = Allowed()) -> WriteReport:
    """Load the file into `data_source`/`version` in one transaction; raises LoadError and writes nothing
    if any row is wrong. What the CSV does not carry (boundaries, uuid, altitude: the GeoPackage's) is kept."""
    source = FORMAT.data_source(data_source)
    rows = read_rows(Path(path))
    types = _types(rows)

    def records(conn: Connection, source_id: int) -> list[UnitRecord]:
        parents = _resolve_parents(conn, rows, source_id, source)
        by_id = {row.id: row for row in rows}
        refuse_cycles(parents, lambda i: by_id[i].label(), lambda i: f"line {by_id[i].line}")
        return [_record(row, parents[row.id]) for row in rows]

    return import_units(engine, data_source=source, version=version,
                        types=sorted(types.values(), key=lambda item: (item.depth or 0, item.short_name)),
                        records=records, delete_missing=delete_missing, now=now, progress=progress, account=account,
                        fmt=FORMAT.name, kept=KEPT, dry_run=dry_run, allow=allow)


def read_rows(path: Path) -> list[_Row]:
    try:
        with reading(path), path.open(encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if header is None:
                raise LoadError(f"{path}: the file is empty")
            columns = _Columns(header)
            rows: list[_Row] = []
            first_line: dict[int, int] = {}
            for cells in reader:
                if not any(cell.strip() for cell in cells):
                    continue
                row = columns.parse(cells, reader.line_num)
                if row.id in first_line:
                    raise LoadError(f"line {row.line}: ID {row.id} is already used on line {first_line[row.id]}")
                first_line[row.id] = row.line
                rows.append(row)
    except csv.Error as exc:
        raise LoadError(f"{path}: not a readable CSV file ({exc})") from None
    return rows


class _Columns:
    """Column positions by header name; the first of duplicate names wins (Iaso repeats some count columns)."""

    def __init__(self, header: Sequence[str]) -> None:
        self.index: dict[str, int] = {}
        for position, name in enumerate(header):
            self.index.setdefault(name.strip(), position)
        missing = [name for name in REQUIRED if name not in self.index]
        if missing:
            raise LoadError(f"line 1: missing column(s) {', '.join(map(repr, missing))}; "
                            f"is this an Iaso org unit export?")
        self.width = len(header)
        self.parent_names = self._numbered(_PARENT_NAME)
        self.parent_refs = self._numbered(_PARENT_REF)

    def _numbered(self, pattern: re.Pattern[str]) -> list[int]:
        numbered = {int(match.group(1)): position for name, position in self.index.items()
                    if (match := pattern.fullmatch(name))}
        return [numbered[number] for number in sorted(numbered)]

    def parse(self, cells: Sequence[str], line: int) -> _Row:
        def cell(name: str) -> str:
            position = self.index.get(name)
            return cells[position].strip() if position is not None and position < len(cells) else ""

        def at(positions: list[int]) -> tuple[str, ...]:
            return tuple(cells[p].strip() if p < len(cells) else "" for p in positions)

        if len(cells) < self.width:
            raise LoadError(f"line {line} has {len(cells)} fields but the header has {self.width}: the row is cut "
                            "short (a quoted field left open, or a line break inside a field?); fix the line or "
                            "export the file again")
        raw_id = cell(ID)
        try:
            unit_id = int(raw_id)
        except ValueError:
            raise LoadError(f"line {line}: ID {raw_id!r} is not an integer") from None
        name = cell(NAME)
        if not name:
            raise LoadError(f"line {line}: ID {unit_id} has no name (column {NAME!r})")
        type_name, separator, code = cell(TYPE).rpartition(" - ")
        if not separator or not type_name.strip() or not code.strip():
            raise LoadError(f"line {line}: type {cell(TYPE)!r} is not of the form 'Type name - CODE'")
        status = cell(STATUS).upper()
        if status not in VALIDATION_STATUSES:
            raise LoadError(f"line {line}: validation status {cell(STATUS)!r} (column {STATUS!r}) "
                            f"is not one of {', '.join(VALIDATION_STATUSES)}")
        latitude = _coordinate(cell(LATITUDE), LATITUDE, "latitude", line)
        longitude = _coordinate(cell(LONGITUDE), LONGITUDE, "longitude", line)
        if (latitude is None) != (longitude is None):
            raise LoadError(f"line {line}: latitude and longitude must be given together")
        names, refs = at(self.parent_names), at(self.parent_refs)
        width = max(len(names), len(refs))
        return _Row(
            line=line,
            id=unit_id,
            name=name,
            type_name=type_name.strip(),
            code=code.strip(),
            ref=cell(REF) or None,
            status=status,
            latitude=latitude,
            longitude=longitude,
            opening=_date(cell(OPENING), OPENING, line),
            closing=_date(cell(CLOSING), CLOSING, line),
            created=_timestamp(cell(CREATED), CREATED, line),
            updated=_timestamp(cell(UPDATED), UPDATED, line),
            parent_names=names + ("",) * (width - len(names)),
            parent_refs=refs + ("",) * (width - len(refs)),
        )


def _coordinate(text: str, column: str, axis: Axis, line: int) -> float | None:
    if not text:
        return None
    try:
        value = parse_decimal(text)
    except ValueError:
        raise LoadError(f"line {line}: {column} {text!r} is not a number") from None
    if not within(axis, value):
        raise LoadError(f"line {line}: {column} {text!r} is outside {bounds(axis)}")
    return value


def _date(text: str, column: str, line: int) -> date | None:
    if not text:
        return None
    try:
        return parse_iso_date(text)
    except ValueError:
        raise LoadError(f"line {line}: {column} {text!r} is not a date (expected YYYY-MM-DD)") from None


def _timestamp(text: str, column: str, line: int) -> datetime | None:
    if not text:
        return None
    try:
        return parse_timestamp(text)
    except ValueError:
        raise LoadError(f"line {line}: {column} {text!r} is not a date and time (expected YYYY-MM-DD HH:MM)") \
            from None


def _types(rows: Iterable[_Row]) -> dict[str, TypeRecord]:
    """One type per code: name = the label before ' - ', short name = the code, depth = where most of its units
    stand (records.typical_depth)."""
    found: dict[str, tuple[_Row, list[int]]] = {}
    for row in rows:
        previous = found.get(row.code)
        if previous is None:
            found[row.code] = (row, [row.depth])
            continue
        first, depths = previous
        if first.type_name != row.type_name:
            raise LoadError(f"line {row.line}: type {row.type_name!r} has the code {row.code!r} already used by "
                            f"type {first.type_name!r} on line {first.line}; codes must be unique per type")
        depths.append(row.depth)
    return {code: iaso_type(first.type_name, code, typical_depth(depths)) for code, (first, depths) in found.items()}


def iaso_type(name: str, code: str, depth: int | None) -> TypeRecord:
    """An Iaso org unit type ('Health facility/Formation sanitaire - HF'): short name = the code, category =
    COUNTRY/REGION/DISTRICT for COUN/REG/DIST, else the code upper-cased. Shared by the CSV and GeoPackage."""
    return TypeRecord(name, code, CATEGORIES.get(code.upper(), code.upper()), depth)


def _resolve_parents(conn: Connection, rows: list[_Row], source_id: int, source: str) -> dict[int, int | None]:
    """Parent id per row: by 'Ref Ext parent 1' (in the file, then the stored units of the data source),
    or, without a reference, by the unique name in 'parent 1'."""
    by_ref: dict[str, list[_Row]] = defaultdict(list)
    by_name: dict[str, list[_Row]] = defaultdict(list)
    for row in rows:
        if row.ref:
            by_ref[row.ref].append(row)
        by_name[row.name].append(row)
    wanted_refs = {row.parent_refs[0] for row in rows if row.parent_refs and row.parent_refs[0]} - set(by_ref)
    wanted_names = {row.parent_names[0] for row in rows
                    if row.parent_names and row.parent_names[0] and not (row.parent_refs and row.parent_refs[0])}
    stored_refs = stored_by(conn, org_unit.c.source_ref, wanted_refs, source_id)
    stored_names = stored_by(conn, org_unit.c.name, wanted_names - set(by_name), source_id)
    parents: dict[int, int | None] = {}
    for row in rows:
        ref = row.parent_refs[0] if row.parent_refs else ""
        name = row.parent_names[0] if row.parent_names else ""
        if ref:
            parents[row.id] = _pick(row, f"parent reference {ref!r}", by_ref.get(ref, []), stored_refs.get(ref, []),
                                    source)
        elif name:
            parents[row.id] = _pick(row, f"parent name {name!r}", by_name.get(name, []),
                                    stored_names.get(name, []), source)
        else:
            parents[row.id] = None
    return parents


def _pick(row: _Row, what: str, in_file: list[_Row], stored: list[int], source: str) -> int:
    if len(in_file) == 1:
        return in_file[0].id
    if len(in_file) > 1:
        lines = ", ".join(str(match.line) for match in in_file)
        raise LoadError(f"{row.label()}: {what} is ambiguous, it matches lines {lines}")
    if len(stored) == 1:
        return stored[0]
    if len(stored) > 1:
        raise LoadError(f"{row.label()}: {what} is ambiguous, it matches stored org units "
                        f"{', '.join(map(str, stored))} of data source {source!r}")
    raise LoadError(f"{row.label()}: {what} matches no org unit in the file nor in data source {source!r}")


def _record(row: _Row, parent_id: int | None) -> UnitRecord:
    return UnitRecord(
        id=row.id,
        name=row.name,
        type_short_name=row.code,
        validation_status=row.status,
        source_ref=row.ref,
        parent_id=parent_id,
        latitude=row.latitude,
        longitude=row.longitude,
        opening_date=row.opening,
        closing_date=row.closing,
        created_at=row.created,
        updated_at=row.updated,
        kept=KEPT,
    )


FORMAT = ImportFormat("iaso-csv", "Iaso's org-unit export CSV (ancestors by external ref and name; the type ends in "
                      "its category code); boundaries loaded from the GeoPackage are kept", load_iaso_csv, "Iaso")
