"""The single write path of every importer (`import_units`): one file's units into one data source and version, in
ONE transaction (rolled back by a dry run), with the report of what changed, what the file left out, and what the
operator should know (a new account or data source, a data source restored, a change of format)."""
from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Any, Union

from sqlalchemy import Connection, Engine, func, select, update

from plugins.orgunits import history, integrity
from plugins.orgunits.changes import KINDS, Allowed, ChangeSet, Stranded, duplicates, held_back, read_changes
from plugins.orgunits.claimless import recorded, renamed_to
from plugins.orgunits.plausible import implausible
from plugins.orgunits.served import Switch, is_served, publish_switch, served_version
from plugins.orgunits.records import (
    SAMPLE,
    TypeRecord,
    UnitRecord,
    WriteReport,
    describe,
    field_list,
)
from plugins.orgunits.tables import DEFAULT_ACCOUNT, data_source, org_unit, source_version
from plugins.orgunits.views import SOURCE_HOLDS
from plugins.orgunits.writer import (
    ensure_data_source,
    ensure_source_version,
    ensure_types,
    stamp,
    transaction,
    write_units,
)
from server import LoadError

Records = Union[Iterable[UnitRecord], Callable[[Connection, int], Iterable[UnitRecord]]]
Types = Union[Iterable[TypeRecord], Callable[[Connection, int], Iterable[TypeRecord]]]
Progress = Callable[[int], None]
CHUNK = 2000


def import_units(engine: Engine, *, data_source: str, version: int, types: Types, records: Records,
                 delete_missing: bool = False, identifier_system: str | None = None, now: datetime | None = None,
                 progress: Progress | None = None, account: str = DEFAULT_ACCOUNT, fmt: str | None = None,
                 kept: frozenset[str] = frozenset(), dry_run: bool = False, allow: Allowed = Allowed()) -> WriteReport:
    """Write one file's units into `data_source`/`version` in ONE transaction: all or nothing.

    `types` and `records` are iterables, or callables `(conn, data_source_id) -> iterable` for importers that
    need the database to build them (ids allocated for string ids, parents among stored units); `types` is
    called (and written) first. A record whose id belongs to a unit of another data source is refused, and so
    is a file without units that would create an account or a data source. With `delete_missing`, the units of
    the data source that are not in `records` are marked deleted; without it they are counted as missing.
    `fmt` names the format (a load in another format than the data source's last one says so; `kept` are the
    fields this format does not carry). `dry_run`: everything is checked and counted, then rolled back.

    The report is the change set (plugins.orgunits.changes): every version the load stamped, read back, counted by
    kind, whatever caused it; a version of another data source's unit refuses the load. Its mass effects (changes.
    held_back: deleting, re-parenting, reclassifying or re-identifying more than a tenth of the data source, adding a
    registry the account already holds) are refused unless `allow` allows them, and so are points that look swapped
    (plugins.orgunits.plausible); a dry run reports them in `refused` instead.
    """
    with transaction(engine, dry_run) as conn:  # the versions' instant: taken under the writer lock
        return _import(conn, data_source, version, types, records, delete_missing, identifier_system,
                       now or stamp(conn), progress, account, fmt, kept, allow, dry_run)


def _import(conn: Connection, name: str, version: int, types: Types, records: Records, delete_missing: bool,
            identifier_system: str | None, now: datetime, progress: Progress | None, account: str,
            fmt: str | None, kept: frozenset[str], allow: Allowed, dry_run: bool) -> WriteReport:
    before = _before(conn, account, name)
    source_id = ensure_data_source(conn, name, identifier_system=identifier_system, now=now, account=account)
    version_id = ensure_source_version(conn, source_id, version, now=now)
    ensure_types(conn, types(conn, source_id) if callable(types) else types, now=now, account=account,
                 data_source_id=source_id)
    units = records(conn, source_id) if callable(records) else records
    seen: set[int] = set()
    written = write_units(conn, _owned(conn, units, source_id, seen), version_id, now, progress=progress)
    if not seen and (before.new_account or before.new_source):
        raise LoadError(_nothing_to_create(before, account, name))
    conn.execute(update(data_source).where(data_source.c.id == source_id).values(last_format=fmt, removed_at=None))
    notes = list(before.notes(account, name, fmt, kept, recorded(conn)))
    missing = history.missing_units(conn, data_source_id=source_id, seen_ids=seen)
    if delete_missing:
        history.delete_missing(conn, data_source_id=source_id, seen_ids=seen, now=now)
    where = f"{account}/{name}"
    switch = publish_switch(conn, source_id, before.served, now)
    notes += _switched(conn, source_id, before.served, switch, where)
    history.record_sources(conn, now, [source_id])  # a removed data source restored, a new version served...
    changes = read_changes(conn, source_id, now, switch.restored)
    refused = _refusals(conn, changes, before, allow, where, source_id, (version_id, version), now)
    if refused and not dry_run:
        new = [note for note in notes if " is new" in note][:1]  # a typo'd name is the likely cause
        raise LoadError("; and ".join(refused) + "; nothing was written" + "".join(f" (note: {n})" for n in new))
    if not delete_missing and missing:
        withdrawn = set(changes.ids("withdrawn")) | _withdrawn(conn, missing)
        first = ", ".join(named_units(conn, missing))
        away = sum(1 for unit in missing if unit in withdrawn)
        notes.append(f"{len(missing):,} unit{'s' if len(missing) != 1 else ''} of {where} "
                     f"{'are' if len(missing) != 1 else 'is'} not in the file (first: {first}): kept as before"
                     f"{f' ({away:,} of them withdrawn: their version is not served)' if away else ''}; load with "
                     "--delete-missing to record them as deleted")
    if dry_run:  # the data-quality report of the data source as the load would leave it
        notes += [integrity.summary(finding) for finding in integrity.run_checks(
            integrity.read_units(conn, where=source_version.c.data_source_id == source_id))]
    if written.held:
        notes.append(f"{written.held:,} unit{'s' if written.held != 1 else ''} of the file went into version "
                     f"{version} of {where}, which is not served: stored, not published (`orgunit-fhir versions "
                     "set-default` publishes them)")
    versioned = changes.versioned
    deleted = changes.ids("deleted")
    return WriteReport(
        len(changes.ids("inserted")), len(changes.ids("updated")),
        len(seen) - len(seen & versioned) - written.held, len(deleted),
        0 if delete_missing else len(missing), tuple(deleted[:SAMPLE]),
        () if delete_missing else tuple(missing[:SAMPLE]), tuple(notes), deleted_units=named_units(conn, deleted),
        missing_units=() if delete_missing else named_units(conn, missing),
        source_change=_source_change(conn, before.row, source_id), withdrawn=len(changes.ids("withdrawn")),
        restored=len(changes.ids("restored")), held=written.held,
        named=tuple((kind, named_units(conn, changes.ids(kind))) for kind in KINDS if changes.ids(kind)),
        refused=tuple(refused))


def _switched(conn: Connection, source_id: int, before: int | None, switch: Switch, where: str) -> list[str]:
    """A note when the load changed the version the data source serves (a newer version loaded)."""
    now_served = served_version(conn, source_id)
    if before is None or now_served == before:
        return []
    numbers = dict(conn.execute(select(source_version.c.id, source_version.c.number)
                                .where(source_version.c.data_source_id == source_id)).all())
    return [f"{where} now serves version {numbers.get(now_served)} (it served version {numbers.get(before)}): "
            f"published as versions, {switch.withdrawn:,} units withdrawn and "
            f"{len(switch.restored) + switch.republished:,} published again; `orgunit-fhir versions set-default` "
            "chooses the version served"]


def _refusals(conn: Connection, changes: ChangeSet, before: _Before, allow: Allowed, where: str, source_id: int,
              version: tuple[int, int], now: datetime) -> list[str]:
    """What the load would do that it refuses: a version of another data source's unit (never), its mass effects not
    allowed (changes.held_back), implausible points (plausible.implausible); one line each."""
    if changes.outside:  # derived values are decided per data source: never another one's units
        raise LoadError(f"this load would write a new version of {len(changes.outside):,} units of other data "
                        f"sources (first: {', '.join(named_units(conn, changes.outside))}); nothing was written "
                        "(a bug: please report it)")
    added = changes.ids("inserted")
    held = held_back(changes, before.units, allow, where, lambda ids: named_units(conn, ids),
                     duplicates(conn, source_id, added, before.renamed_to) if added else {}, len(added),
                     _stranded(conn, changes, *version, source_id))
    return [*(f"this load would {item.what}; pass {item.flag} if it is intended" for item in held),
            *(f"this load would {what}" for what in implausible(conn, source_id, now))]


def _stranded(conn: Connection, changes: ChangeSet, version_id: int, number: int, source_id: int) -> Stranded | None:
    """The published units this load withdrew by writing them into version `number` (`version_id`), when that version
    is not served (changes.Stranded)."""
    withdrawn = changes.ids("withdrawn")
    if not withdrawn or is_served(conn, version_id):
        return None
    here = tuple(sorted(set(withdrawn) & set(conn.execute(select(org_unit.c.id).where(
        org_unit.c.source_version_id == version_id, org_unit.c.withdrawn.is_(True))).scalars())))
    served = conn.execute(select(source_version.c.number).where(
        source_version.c.id == served_version(conn, source_id))).scalar()
    return Stranded(here, number, served) if here else None


def _withdrawn(conn: Connection, ids: Sequence[int]) -> set[int]:
    """Which of the units `ids` are withdrawn (their version is not served)."""
    found: set[int] = set()
    for start in range(0, len(ids), CHUNK):
        found.update(conn.execute(select(org_unit.c.id).where(org_unit.c.id.in_(ids[start:start + CHUNK]),
                                                              org_unit.c.withdrawn.is_(True))).scalars())
    return found


def _source_change(conn: Connection, before: Any, source_id: int) -> str:
    """What the load did to its data source (its Organization): inserted (it did not exist), updated (restored, or
    stamped anew: a new source version served...) or unchanged."""
    if before is None:
        return "inserted"
    after = conn.execute(select(data_source.c.updated_at).where(data_source.c.id == source_id)).scalar()
    return "updated" if before.removed_at is not None or after != before.updated_at else "unchanged"


def named_units(conn: Connection, ids: Sequence[int]) -> tuple[str, ...]:
    """The first units of `ids` as the operator knows them: their source code and name, the id beside
    ("10006 'Kapsowar Hospital' (id 3720)")."""
    first = list(ids[:SAMPLE])
    rows = {row.id: row for row in conn.execute(select(org_unit.c.id, org_unit.c.source_ref, org_unit.c.name)
                                                .where(org_unit.c.id.in_(first)))}
    return tuple(f"{rows[i].source_ref or '(no code)'} {rows[i].name!r} (id {i})" if i in rows else f"id {i}"
                 for i in first)


@dataclass(frozen=True)
class _Before:
    """What the account and the data source were before the load."""

    accounts: list[str]  # every account that holds a data source
    sources: list[str]  # the data sources of this account
    row: Any  # the data source (removed_at, last_format, updated_at), or None
    units: int = 0  # the units it holds (live or withdrawn)
    served: int | None = None  # the source version it serves (its id)
    first: str | None = None  # the account recorded for tokens without an account claim (None: no data source yet)
    renamed_to: str | None = None  # the account's name now when this name is a former one (accounts rename)

    @property
    def new_account(self) -> bool:
        return not self.sources

    @property
    def new_source(self) -> bool:
        return self.row is None or self.row.removed_at is not None

    def notes(self, account: str, name: str, fmt: str | None, kept: frozenset[str],
              claimless: str | None) -> Iterator[str]:
        """`claimless`: the account recorded for tokens without an account claim after the load."""
        if self.new_account and self.accounts:
            yield (f"account {account!r} is new{_did_you_mean(account, self.accounts)} (the others: "
                   f"{', '.join(self.accounts)}): its consumers need "
                   f"tokens for it (orgunit-fhir token --account {account}); {self._claimless(account, claimless)}")
        elif self.new_account and self.first is None:
            yield (f"created account {account!r} and its data source {name!r}: the first of this database, which "
                   "tokens without an account claim see")
        elif self.new_account:
            yield f"created account {account!r} and its data source {name!r}; {self._claimless(account, claimless)}"
        elif self.row is None and self.sources:
            yield (f"data source {name!r} is new in account {account!r}{_did_you_mean(name, self.sources)} (its other "
                   "data sources: "
                   f"{', '.join(self.sources)})")
        if self.row is not None and self.row.removed_at is not None:
            yield f"data source {account}/{name} had been removed: this load restores it"
        last = self.row.last_format if self.row is not None else None
        if fmt is not None and last is not None and last != fmt:
            yield (f"data source {account}/{name} was last loaded from {last}, this load is {fmt}: it replaced what "
                   f"{fmt} carries and kept the stored {field_list(kept)}" if kept else
                   f"data source {account}/{name} was last loaded from {last}, this load is {fmt}: {fmt} carries "
                   f"every field, so what only {last} held is replaced")

    def _claimless(self, account: str, claimless: str | None) -> str:
        unless = "(unless auth.default_account names another)"
        if claimless == account:
            return f"tokens without an account claim see it: the account recorded for them, the first loaded {unless}"
        if claimless in self.accounts:
            return f"tokens without an account claim still see account {claimless!r}, the first loaded {unless}"
        return (f"tokens without an account claim get 403 naming account {claimless!r}, the first loaded, which holds "
                f"no data source {unless}")


def _did_you_mean(name: str, known: list[str]) -> str:
    """A new account or data source named like an existing one is likely a typo: say which."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return f" (a typo of {close[0]!r}? if so, undo it with `data-sources remove ... --purge`)" if close else ""


def _before(conn: Connection, account: str, name: str) -> _Before:
    live = data_source.c.removed_at.is_(None)
    accounts = sorted(set(conn.execute(select(data_source.c.account).where(live)).scalars()))
    sources = sorted(conn.execute(select(data_source.c.name).where(data_source.c.account == account, live))
                     .scalars())
    row = conn.execute(select(data_source.c.id, data_source.c.removed_at, data_source.c.last_format,
                              data_source.c.updated_at)
                       .where(data_source.c.account == account, data_source.c.name == name)).first()
    units = 0 if row is None else int(conn.execute(
        select(func.count()).select_from(org_unit.join(source_version))
        .where(source_version.c.data_source_id == row.id, SOURCE_HOLDS)).scalar_one())
    return _Before(accounts, sources, row, units, None if row is None else served_version(conn, row.id),
                   recorded(conn), renamed_to(conn, account))


def _nothing_to_create(before: _Before, account: str, name: str) -> str:
    if before.new_account:
        return (f"the file holds no org units and account {account!r} does not exist (accounts: "
                f"{', '.join(before.accounts) or 'none'}): nothing loaded; check --account (a load never creates an "
                "empty account)")
    return (f"the file holds no org units and account {account!r} has no data source {name!r} (its data sources: "
            f"{', '.join(before.sources)}): nothing loaded; check --data-source (a load never creates an empty "
            "data source)")


def _owned(conn: Connection, records: Iterable[UnitRecord], source_id: int, seen: set[int]) -> Iterator[UnitRecord]:
    """The records, refusing any whose id is a unit of another data source (an import never moves units
    between data sources, but a removed data source's deleted units may come back elsewhere: a load into the
    wrong account, removed, then loaded into the right one); the ids are collected into `seen`."""
    iterator = iter(records)
    while batch := list(islice(iterator, CHUNK)):
        ids = [record.id for record in batch if isinstance(record.id, int)]
        query = (select(org_unit.c.id, data_source.c.name)
                 .join(source_version, source_version.c.id == org_unit.c.source_version_id)
                 .join(data_source, data_source.c.id == source_version.c.data_source_id)
                 .where(org_unit.c.id.in_(ids), data_source.c.id != source_id,
                        data_source.c.removed_at.is_(None))  # a removed data source's units may be loaded again
                 .limit(1))
        clash = conn.execute(query).first()
        if clash is not None:
            record = next(record for record in batch if record.id == clash.id)
            raise LoadError(f"{describe(record)}: id {clash.id} is already used by a unit of data source "
                            f"{clash.name!r}; an import does not move units between data sources")
        seen.update(ids)
        yield from batch
