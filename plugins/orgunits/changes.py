"""A load as a change set (issue 38): every version the write stamped, whatever caused it (a field of the file, a
derived value, a switch of the served version), read back from org_unit_history, so that the report counts what was
written and nothing else; and the mass effects held back unless the operator allows them, decided here only.

Kinds, as a consumer sees each version: `inserted` (a first live version), `updated` (live after live), `restored`
(live after a deletion or a withdrawal: its version is served again), `deleted` (deleted by the source:
--delete-missing, a removal), `withdrawn` (deleted because its version is no longer served). Between two live
versions, the fields a mass effect changes are compared: the parent (`moved`, `rooted` when it has none any more), the
identifier system (`resystemed`), the type's depth or category, hence physicalType (`reclassified`)."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, func, or_, select, tuple_

from plugins.orgunits.tables import data_source, org_unit, org_unit_history, source_version

KINDS = ("inserted", "updated", "restored", "deleted", "withdrawn")
SHARE = 0.1  # more than this share of a data source's stored units changed alike by one load: held back unasked
FLOOR = 5  # ...and more than this many (a small registry's few changes are ordinary edits)
DUPLICATE_SHARE = 0.5  # more than half of the units a load adds already belong to another data source: a duplicate
_CHUNK = 2000
_TYPE = ("type_depth", "type_category")


@dataclass(frozen=True)
class Allowed:
    """The mass effects the operator allows (`load --allow-...`); each is refused otherwise."""

    reparent: bool = False
    mass_delete: bool = False
    reclassify: bool = False
    duplicate_source: bool = False
    identifier_change: bool = False


@dataclass(frozen=True)
class ChangeSet:
    """The versions one write stamped, by kind (unit ids in id order), and what changed between live versions."""

    kinds: dict[str, tuple[int, ...]] = field(default_factory=dict)
    moved: tuple[int, ...] = ()  # another parent
    rooted: tuple[int, ...] = ()  # ...none any more: a new root
    resystemed: tuple[int, ...] = ()  # another identifier system
    reclassified: tuple[int, ...] = ()  # another type depth or category
    # (type code, (depth, category) before, after) -> units, for the message
    type_changes: dict[tuple[str, tuple[Any, Any], tuple[Any, Any]], int] = field(default_factory=dict)
    systems: dict[tuple[Any, Any], int] = field(default_factory=dict)  # (system before, after) -> units
    outside: tuple[int, ...] = ()  # units of another data source given a version (never: refused)

    def ids(self, kind: str) -> tuple[int, ...]:
        return self.kinds.get(kind, ())

    @property
    def versioned(self) -> set[int]:
        return {unit for ids in self.kinds.values() for unit in ids}


def read_changes(conn: Connection, data_source_id: int, now: datetime, restored: Iterable[int] = ()) -> ChangeSet:
    """The versions stamped `now` (this write's: one per unit), of the data source `data_source_id` (the others'
    are `outside`). `restored`: units a switch published again (a first or a live-after-invisible version, as the
    history alone shows it, is a restoration)."""
    previous = org_unit_history.alias("previous")
    rows = conn.execute(
        select(org_unit_history.c.org_unit_id, org_unit_history.c.version_id, org_unit_history.c.deleted,
               previous.c.deleted.label("was_deleted"), org_unit.c.withdrawn, source_version.c.data_source_id)
        .select_from(org_unit_history
                     .join(org_unit, org_unit.c.id == org_unit_history.c.org_unit_id)
                     .join(source_version, source_version.c.id == org_unit.c.source_version_id)
                     .outerjoin(previous, and_(previous.c.org_unit_id == org_unit_history.c.org_unit_id,
                                               previous.c.version_id == org_unit_history.c.version_id - 1)))
        .where(org_unit_history.c.updated_at == now).order_by(org_unit_history.c.org_unit_id)).all()
    back = set(restored)
    kinds: dict[str, list[int]] = {kind: [] for kind in KINDS}
    outside: list[int] = []
    pairs: list[tuple[int, int]] = []  # (unit, version) of live versions after a live one
    for row in rows:
        if row.data_source_id != data_source_id:
            outside.append(row.org_unit_id)
            continue
        if row.deleted:
            kinds["withdrawn" if row.withdrawn else "deleted"].append(row.org_unit_id)
        elif row.org_unit_id in back or row.was_deleted:
            kinds["restored"].append(row.org_unit_id)
        elif row.was_deleted is None:
            kinds["inserted"].append(row.org_unit_id)
        else:
            kinds["updated"].append(row.org_unit_id)
            pairs.append((row.org_unit_id, row.version_id))
    return _compared(ChangeSet({k: tuple(v) for k, v in kinds.items() if v}, outside=tuple(outside)), conn, pairs)


def _compared(changes: ChangeSet, conn: Connection, pairs: Sequence[tuple[int, int]]) -> ChangeSet:
    """`changes` with what differs between each updated version and the one before it."""
    moved: list[int] = []
    rooted: list[int] = []
    resystemed: list[int] = []
    reclassified: list[int] = []
    types: Counter[tuple[str, tuple[Any, Any], tuple[Any, Any]]] = Counter()
    systems: Counter[tuple[Any, Any]] = Counter()
    for start in range(0, len(pairs), _CHUNK):
        chunk = pairs[start:start + _CHUNK]
        wanted = [*chunk, *((unit, version - 1) for unit, version in chunk)]
        snaps = {(row.org_unit_id, row.version_id): row.snapshot or {} for row in conn.execute(
            select(org_unit_history.c.org_unit_id, org_unit_history.c.version_id, org_unit_history.c.snapshot)
            .where(tuple_(org_unit_history.c.org_unit_id, org_unit_history.c.version_id).in_(wanted)))}
        for unit, version in chunk:
            new, old = snaps.get((unit, version), {}), snaps.get((unit, version - 1), {})
            if new.get("parent_id") != old.get("parent_id"):
                moved.append(unit)
                if new.get("parent_id") is None:
                    rooted.append(unit)
            if new.get("source_system") != old.get("source_system"):
                resystemed.append(unit)
                systems[(old.get("source_system"), new.get("source_system"))] += 1
            if any(new.get(key) != old.get(key) for key in _TYPE) and new.get("type_code") == old.get("type_code"):
                reclassified.append(unit)
                types[(str(new.get("type_name") or new.get("type_code")), tuple(old.get(k) for k in _TYPE),
                       tuple(new.get(k) for k in _TYPE))] += 1  # type: ignore[index]
    return ChangeSet(changes.kinds, tuple(moved), tuple(rooted), tuple(resystemed), tuple(reclassified), dict(types),
                     dict(systems), changes.outside)


def duplicates(conn: Connection, data_source_id: int, ids: Sequence[int],
               renamed_to: str | None = None) -> dict[str, list[int]]:
    """Of the units `ids` (of the data source `data_source_id`), those whose identifier (system|code: the source
    reference under its system; a data source without a system of its own matches any system) a unit of another
    live data source of the same account holds (or of `renamed_to`, the account's name now when this load makes an
    account of a former name): by that data source's name ("account/name" in another account)."""
    account = str(conn.execute(select(data_source.c.account).where(data_source.c.id == data_source_id)).scalar_one())
    accounts = [account, *([renamed_to] if renamed_to else [])]
    other = org_unit.alias("other")
    other_version = source_version.alias("other_version")
    other_source = data_source.alias("other_source")
    mine_version = source_version.alias("mine_version")
    mine_source = data_source.alias("mine_source")
    system = func.coalesce(org_unit.c.identifier_system, mine_source.c.identifier_system, "")
    other_system = func.coalesce(other.c.identifier_system, other_source.c.identifier_system, "")
    found: dict[str, list[int]] = {}
    for start in range(0, len(ids), _CHUNK):
        query = (select(org_unit.c.id, other_source.c.account, other_source.c.name).distinct()
                 .select_from(org_unit
                              .join(mine_version, mine_version.c.id == org_unit.c.source_version_id)
                              .join(mine_source, mine_source.c.id == mine_version.c.data_source_id)
                              .join(other, and_(other.c.source_ref == org_unit.c.source_ref,
                                                other.c.deleted.is_(False)))
                              .join(other_version, other_version.c.id == other.c.source_version_id)
                              .join(other_source, other_source.c.id == other_version.c.data_source_id))
                 .where(org_unit.c.id.in_(ids[start:start + _CHUNK]), other_source.c.id != data_source_id,
                        other_source.c.account.in_(accounts), other_source.c.removed_at.is_(None),
                        or_(system == other_system, system == "", other_system == "")))
        for unit, where, name in conn.execute(query):
            found.setdefault(str(name) if where == account else f"{where}/{name}", []).append(int(unit))
    return found


@dataclass(frozen=True)
class Held:
    """One mass effect held back: what it would do (for the message) and the flag that allows it."""

    what: str
    flag: str


@dataclass(frozen=True)
class Stranded:
    """Published units a load withdrew by writing them into a version that is not served (not by a switch): their
    consumers get a deletion each. `loaded`, `served`: the version numbers."""

    ids: tuple[int, ...]
    loaded: int
    served: int | None


def held_back(changes: ChangeSet, stored: int, allow: Allowed, where: str, named: Any,
              duplicate: dict[str, list[int]], added: int, stranded: Stranded | None = None) -> list[Held]:
    """The mass effects of `changes` that are not allowed, each with its count and first units (`named(ids)`: "code
    'name' (id N)"...). `stored`: the units the data source held before; `where`: "account/data source";
    `duplicate`: `duplicates` of the `added` units the load inserted; `stranded`: see Stranded."""
    held: list[Held] = []

    def first(ids: Sequence[int]) -> str:
        return ", ".join(named(ids))

    deleted = changes.ids("deleted")
    if not allow.mass_delete and _mass(len(deleted), stored):
        held.append(Held(f"delete {len(deleted):,} of the {stored:,} units of {where} (first: {first(deleted)}): a "
                         "file cut short or the wrong file does this", "--allow-mass-delete"))
    if stranded is not None and not allow.mass_delete and _mass(len(stranded.ids), stored):
        served = f"version {stranded.served}" if stranded.served is not None else "another"
        held.append(Held(f"withdraw {len(stranded.ids):,} of the {stored:,} published units of {where} (first: "
                         f"{first(stranded.ids)}) by moving them into version {stranded.loaded}, which is not served "
                         f"({served} is): each would be a deletion to its consumers; to update what is served, load "
                         f"with --version {stranded.served}", "--allow-mass-delete"))
    if not allow.reparent and _mass(len(changes.moved), stored):
        held.append(Held(f"give {len(changes.moved):,} of the {stored:,} stored units of {where} another parent "
                         f"(first: {first(changes.moved)}): a mapping's parent or id field naming the wrong field, "
                         "or parent codes changed in the file (leading zeros dropped by a spreadsheet?), does this",
                         "--allow-reparent"))
    elif not allow.reparent and changes.rooted:
        held.append(Held(f"make {len(changes.rooted):,} stored unit{'s' if len(changes.rooted) != 1 else ''} of "
                         f"{where} a root (first: {first(changes.rooted)}), no longer under its parent: a blank "
                         "parent cell does this", "--allow-reparent"))
    if not allow.reclassify and changes.reclassified:
        kinds = "; ".join(f"type {name!r} from {_level(old)} to {_level(new)} ({count:,} units)"
                          for (name, old, new), count in sorted(changes.type_changes.items()))
        held.append(Held(f"reclassify {len(changes.reclassified):,} units of {where}: {kinds} (first: "
                         f"{first(changes.reclassified)}): a type is placed where most of its units stand, so a "
                         "level left out, or a file of another shape, does this", "--allow-reclassify"))
    if not allow.identifier_change and _mass(len(changes.resystemed), stored):
        systems = "; ".join(f"{old or 'the default system'!s} -> {new or 'the default system'!s} ({count:,} units)"
                            for (old, new), count in sorted(changes.systems.items(), key=str))
        held.append(Held(f"publish {len(changes.resystemed):,} of the {stored:,} units of {where} under another "
                         f"identifier system: {systems} (first: {first(changes.resystemed)}): a typo'd "
                         "identifier_system does this, and their codes are then found under it only",
                         "--allow-identifier-change"))
    shared = sorted({unit for ids in duplicate.values() for unit in ids})
    if not allow.duplicate_source and len(shared) > FLOOR and len(shared) > DUPLICATE_SHARE * added:
        sources = ", ".join(f"{name!r} ({len(ids):,})" for name, ids in sorted(duplicate.items()))
        held.append(Held(f"add {len(shared):,} of its {added:,} new units to {where} with the identifiers of units "
                         f"that data source {sources} of the account already has (first: {first(shared)}): the same "
                         "registry loaded again under another data source name? Load it into that data source "
                         "(--data-source, or data_source: in the mapping)", "--allow-duplicate-source"))
    return held


def _mass(count: int, stored: int) -> bool:
    return count > FLOOR and count > SHARE * stored


def _level(value: tuple[Any, Any]) -> str:
    depth, category = value
    return f"depth {depth} ({category})"
