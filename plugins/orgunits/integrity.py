"""The data-quality report (`orgunit-fhir check-data`, and every `load --dry-run`): the checks of DHIS2's
data-integrity page that apply to a pyramid, over what is published (the live units of each data source's served
version), each with a count, a severity and the first units by code and name. An error-level check that finds
anything makes `check-data` exit 1. One pass over the units, in Python: a 100,000-unit registry in seconds."""
from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Connection, and_, select, true

from plugins.orgunits.geo import Placed, Pyramid, misplaced
from plugins.orgunits.tables import data_source, org_unit, org_unit_type, source_version
from plugins.orgunits.views import SERVED, SOURCE_SYSTEM

SAMPLE = 5
ERROR, WARNING = "error", "warning"
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_BATCH = 5000


class Unit(NamedTuple):
    """What the checks read of one published unit (a tuple: 100,000 of them are made in a blink)."""

    id: int
    parent: int | None
    name: str
    code: str | None
    aliases: tuple[str, ...]
    account: str
    source: str  # the data source's name
    source_id: int
    system: str | None
    type_code: str
    type_name: str
    type_depth: int | None
    category: str
    depth: int  # where it stands (1: a root)
    latitude: float | None
    longitude: float | None
    opening: date | None
    closing: date | None
    status: str
    boundary: Any = None

    def named(self) -> str:
        return f"{self.code or '(no code)'} {self.name!r} (id {self.id})"


@dataclass(frozen=True)
class Check:
    """One check of the report: what it looks for, how bad a finding is."""

    code: str
    severity: str
    title: str


@dataclass(frozen=True)
class Finding:
    check: Check
    units: tuple[str, ...] = ()  # every unit found, named
    details: tuple[str, ...] = ()  # the first few, with what is wrong

    @property
    def count(self) -> int:
        return len(self.units)

    def as_json(self) -> dict[str, Any]:
        return {"check": self.check.code, "severity": self.check.severity, "title": self.check.title,
                "count": self.count, "first": list(self.details or self.units[:SAMPLE])}


CHECKS = (
    Check("facility-without-point", WARNING, "units at facility level (category HF) without a point"),
    Check("swapped-coordinates", ERROR, "points whose latitude and longitude look swapped (the swapped point lies "
                                        "where the pyramid says)"),
    Check("outside-parent-boundary", WARNING, "points outside the boundary of their parent"),
    Check("far-from-siblings", WARNING, "points far outside the extent of the points around them (outliers among "
                                        "their siblings and parent chain)"),
    Check("duplicate-name-under-parent", WARNING, "units with the same name under one parent"),
    Check("identifier-in-several-sources", WARNING, "identifiers (system|code) that units of several data sources "
                                                    "of one account have"),
    Check("closed-with-open-children", WARNING, "closed units with children still open"),
    Check("closed-before-opened", ERROR, "units closed before they opened"),
    Check("opening-in-future", ERROR, "active units whose opening date is in the future"),
    Check("type-at-several-depths", WARNING, "types whose units stand at several depths"),
    Check("several-roots", WARNING, "data sources with several roots"),
    Check("control-characters", ERROR, "names, aliases or codes holding control characters (a file read in the "
                                       "wrong encoding)"),
    Check("not-nfc", WARNING, "names not in Unicode NFC (found by a search only as they were typed)"),
)
BY_CODE = {check.code: check for check in CHECKS}


def read_units(conn: Connection, account: str | None = None, data_source_name: str | None = None,
               where: ColumnElement[bool] | None = None) -> list[Unit]:
    """The published units (live, of the served version of a data source not removed), of `account` and
    `data_source_name` when given, matching `where`."""
    conditions = [org_unit.c.deleted.is_(False), org_unit.c.withdrawn.is_(False), data_source.c.removed_at.is_(None),
                  SERVED, true() if where is None else where]
    if account is not None:
        conditions.append(data_source.c.account == account)
    if data_source_name is not None:
        conditions.append(data_source.c.name == data_source_name)
    child = org_unit.alias("child")
    boundary_wanted = and_(org_unit.c.geometry.is_not(None),
                           select(child.c.id).where(child.c.parent_id == org_unit.c.id).limit(1).exists())
    query = (select(org_unit.c.id, org_unit.c.parent_id, org_unit.c.name, org_unit.c.source_ref, org_unit.c.aliases,
                    data_source.c.account, data_source.c.name.label("source"), data_source.c.id.label("source_id"),
                    SOURCE_SYSTEM.label("system"), org_unit_type.c.short_name, org_unit_type.c.name.label("type_name"),
                    org_unit_type.c.depth, org_unit_type.c.category, org_unit.c.path, org_unit.c.latitude,
                    org_unit.c.longitude, org_unit.c.opening_date, org_unit.c.closing_date,
                    org_unit.c.validation_status, boundary_wanted.label("bounded"))
             .select_from(org_unit.join(org_unit_type, org_unit_type.c.id == org_unit.c.org_unit_type_id)
                          .join(source_version, source_version.c.id == org_unit.c.source_version_id)
                          .join(data_source, data_source.c.id == source_version.c.data_source_id))
             .where(*conditions).order_by(org_unit.c.id))
    rows = conn.execute(query).all()
    boundaries = _boundaries(conn, [row[0] for row in rows if row[-1]])
    return [Unit(i, parent, name, code, tuple(aliases or ()), account, source, source_id, system, type_code,
                 type_name, type_depth, category, (path or "/").count("/") - 1 or 1, lat, lon, _day(opening),
                 _day(closing), status, boundaries.get(i) if bounded else None)
            for (i, parent, name, code, aliases, account, source, source_id, system, type_code, type_name, type_depth,
                 category, path, lat, lon, opening, closing, status, bounded) in rows]


def _boundaries(conn: Connection, ids: Sequence[int]) -> dict[int, Any]:
    found: dict[int, Any] = {}
    for start in range(0, len(ids), _BATCH):
        found.update(conn.execute(select(org_unit.c.id, org_unit.c.geometry)
                                  .where(org_unit.c.id.in_(ids[start:start + _BATCH]))).all())
    return found


def _day(value: Any) -> date | None:
    return date.fromisoformat(value[:10]) if isinstance(value, str) else value


@dataclass
class _Found:
    units: dict[str, list[Unit]] = field(default_factory=lambda: defaultdict(list))
    details: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def add(self, code: str, unit: Unit, detail: str | None = None) -> None:
        self.units[code].append(unit)
        if len(self.details[code]) < SAMPLE:
            self.details[code].append(f"{unit.named()}: {detail}" if detail else unit.named())


def run_checks(units: Sequence[Unit], today: date | None = None,
               only: Callable[[Unit], bool] | None = None) -> list[Finding]:
    """Every check over `units` (a whole data source or account: the checks compare units with their neighbours);
    `only`: report the units it admits (a load's dry run: the units it wrote)."""
    today = today or date.today()
    keep = only or (lambda unit: True)
    found = _Found()
    by_id = {unit.id: unit for unit in units}
    for unit in units:
        if keep(unit):
            _one(unit, today, found)
    _geometry(units, keep, found)
    _neighbours(units, by_id, today, keep, found)
    return [Finding(check, tuple(u.named() for u in found.units[check.code]), tuple(found.details[check.code]))
            for check in CHECKS if found.units.get(check.code)]


def _one(unit: Unit, today: date, found: _Found) -> None:
    if unit.category == "HF" and unit.latitude is None:
        found.add("facility-without-point", unit)
    if unit.opening and unit.closing and unit.closing < unit.opening:
        found.add("closed-before-opened", unit, f"closed {unit.closing}, opened {unit.opening}")
    if unit.opening and unit.opening > today and unit.status == "VALID":
        found.add("opening-in-future", unit, f"opens {unit.opening}")
    for text in (unit.name, unit.code or "", *unit.aliases):
        bad = CONTROL.search(text)
        if bad:
            found.add("control-characters", unit, f"{text!r} holds U+{ord(bad.group()):04X}")
            break
    if unicodedata.normalize("NFC", unit.name) != unit.name:
        found.add("not-nfc", unit)


def pyramid_of(units: Iterable[Unit]) -> Pyramid:
    return Pyramid(Placed(u.id, u.parent, (u.latitude, u.longitude) if u.latitude is not None and
                          u.longitude is not None else None, u.boundary) for u in units)


def _geometry(units: Sequence[Unit], keep: Callable[[Unit], bool], found: _Found) -> None:
    pyramid = pyramid_of(units)
    for unit in units:
        if not keep(unit) or unit.latitude is None:
            continue
        wrong = misplaced(pyramid, unit.id)
        if wrong is None:
            continue
        at = f"latitude {unit.latitude}, longitude {unit.longitude} {wrong.why}"
        if wrong.swapped:
            found.add("swapped-coordinates", unit, at + ", where the swapped point lies")
        elif wrong.why.startswith("outside"):
            found.add("outside-parent-boundary", unit, at)
        else:
            found.add("far-from-siblings", unit, at)


def _neighbours(units: Sequence[Unit], by_id: dict[int, Unit], today: date, keep: Callable[[Unit], bool],
                found: _Found) -> None:
    names: dict[tuple[int | None, int, str], list[Unit]] = defaultdict(list)
    codes: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    depths: dict[tuple[int, str], set[int]] = defaultdict(set)
    roots: dict[int, list[Unit]] = defaultdict(list)
    open_children: set[int] = set()
    for unit in units:
        names[(unit.parent, unit.source_id, " ".join(unit.name.casefold().split()))].append(unit)
        if unit.code:
            codes[(unit.account, unit.system or "", unit.code)].add(unit.source)
        depths[(unit.source_id, unit.type_code)].add(unit.depth)
        if unit.parent is None:
            roots[unit.source_id].append(unit)
        if unit.parent is not None and (unit.closing is None or unit.closing > today):
            open_children.add(unit.parent)
    for same in names.values():
        if len(same) > 1:
            for unit in same[1:]:
                if keep(unit):
                    found.add("duplicate-name-under-parent", unit, f"as id {same[0].id}")
    for unit in units:
        if not keep(unit):
            continue
        if unit.code and len(codes[(unit.account, unit.system or "", unit.code)]) > 1:
            others = sorted(codes[(unit.account, unit.system or "", unit.code)] - {unit.source})
            found.add("identifier-in-several-sources", unit, f"also in {', '.join(map(repr, others))}")
        if unit.closing is not None and unit.closing <= today and unit.id in open_children:
            found.add("closed-with-open-children", unit, f"closed {unit.closing}")
        if len(depths[(unit.source_id, unit.type_code)]) > 1 and unit.type_depth is not None \
                and unit.depth != unit.type_depth:
            found.add("type-at-several-depths", unit, f"type {unit.type_name!r} (depth {unit.type_depth}) at "
                                                      f"depth {unit.depth}")
    for source_roots in roots.values():
        if len(source_roots) > 1:
            for unit in source_roots[1:]:
                if keep(unit):
                    found.add("several-roots", unit, f"a root besides {source_roots[0].named()}")


def failed(findings: Iterable[Finding]) -> bool:
    """Whether an error-level check found anything (check-data exits 1)."""
    return any(finding.check.severity == ERROR for finding in findings)


def lines(findings: Sequence[Finding]) -> Iterator[str]:
    """The report as text, one line per check that found something, its first units below it."""
    for finding in findings:
        check = finding.check
        yield f"{check.severity.upper():<7} {check.code}: {finding.count:,} {check.title}"
        for detail in finding.details:
            yield f"          {detail}"


def summary(finding: Finding) -> str:
    """One finding in one line (a dry run's note)."""
    check = finding.check
    return (f"check-data {check.severity} {check.code}: {finding.count:,} {check.title} (first: "
            f"{'; '.join(finding.details)})")
