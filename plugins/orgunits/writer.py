"""The one place org units are written: data sources, versions, types, and the units with their names."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from itertools import islice
from typing import Any

from sqlalchemy import (
    JSON,
    Connection,
    Engine,
    Integer,
    Row,
    bindparam,
    delete,
    insert,
    literal_column,
    select,
    update,
)

from plugins.orgunits.claimless import record_first, reuse
from plugins.orgunits.history import (
    BATCH_SIZE,
    MAX_DEPTH,
    NEWEST_VERSION,
    RECORDED,
    new_versions,
    new_versions_below,
    new_versions_for_children,
    record_history,
    record_sources,
    refresh_paths,
)
from plugins.orgunits.ordering import parents_first
from plugins.orgunits.purged import forget, last_versions, next_data_source_id
from plugins.orgunits.served import is_served
from plugins.orgunits.views import types_of
from plugins.orgunits.validation import check
from plugins.orgunits.records import (
    TypeRecord,
    UnitRecord,
    WriteReport,
    describe,
    slugify,
)
from plugins.orgunits.tables import (
    DEFAULT_ACCOUNT,
    data_source,
    data_source_history,
    org_unit,
    org_unit_name,
    org_unit_type,
    source_version,
)
from server import LoadError, as_utc, begin_writing, composed, normalize, refresh_statistics, reuses_deleted_ids

_ID_CHUNK = 2000
_STAMP = "orgunits.stamp"
_FRESH_STATISTICS = 1000  # rows inserted by one write from which the planner's statistics are refreshed
_ALIASES = JSON(none_as_null=True)


def ensure_data_source(conn: Connection, name: str, slug: str | None = None,
                       identifier_system: str | None = None, now: datetime | None = None,
                       account: str = DEFAULT_ACCOUNT) -> int:
    """Id of the data source called `name` in `account`, created if missing (slug defaults to the slugified
    name; its Organization's first version is stamped `now`; the first of the database records its account as the
    one tokens without an account claim see). Data source names and slugs are unique within an account."""
    now = as_utc(now or datetime.now(timezone.utc))
    if not account or not account.strip() or len(account) > 200:
        raise LoadError(f"account {account!r}: give a name of 1 to 200 characters")
    row = conn.execute(select(data_source.c.id, data_source.c.identifier_system)
                       .where(data_source.c.account == account, data_source.c.name == name)).first()
    if row is not None:
        if identifier_system is not None and row.identifier_system != identifier_system:
            conn.execute(update(data_source).where(data_source.c.id == row.id)  # its Organization is the same
                         .values(identifier_system=identifier_system))
            of_source = select(source_version.c.id).where(source_version.c.data_source_id == row.id)
            new_versions(conn, org_unit.c.source_version_id.in_(of_source), now)  # their identifier changes
        return int(row.id)
    slug = slug or slugify(name)
    taken = conn.execute(select(data_source.c.name).where(data_source.c.account == account,
                                                          data_source.c.slug == slug)).scalar()
    if taken is not None:
        raise LoadError(f"data source {name!r}: slug {slug!r} already belongs to data source {taken!r}" + (
            f", which was called {name!r} before a rename (a rename keeps the slug): to load into it, give "
            f"--data-source {taken!r} (or data_source: in the mapping)" if slug == slugify(name) and
            renamed_from(conn, account, taken, name) else ""))
    # an id a purge erased is never given again: where the database would (SQLite), the id is given here
    given = {"id": next_data_source_id(conn)} if reuses_deleted_ids(conn) else {}
    result = conn.execute(insert(data_source).values(name=name, slug=slug, identifier_system=identifier_system,
                                                     updated_at=now, name_norm=normalize(name), account=account,
                                                     **given))
    source_id = int(result.inserted_primary_key[0])
    record_sources(conn, now, [source_id])
    record_first(conn)  # the first data source: its account is the one tokens without an account claim see
    reuse(conn, account)  # a name an account had before a rename names this account now
    return source_id


def renamed_from(conn: Connection, account: str, current: str, name: str) -> bool:
    """Whether the data source `current` of `account` was called `name` before (its Organization's versions say)."""
    return any((snap or {}).get("name") == name for snap in conn.execute(
        select(data_source_history.c.snapshot)
        .join(data_source, data_source.c.id == data_source_history.c.data_source_id)
        .where(data_source.c.account == account, data_source.c.name == current)).scalars())


def ensure_source_version(conn: Connection, data_source_id: int, number: int, now: datetime | None = None) -> int:
    """Id of version `number` of the data source, created if missing (its Organization gets a new version stamped
    `now` when that changes the version it serves: the newest, unless one was chosen)."""
    row_id = conn.execute(select(source_version.c.id).where(
        source_version.c.data_source_id == data_source_id, source_version.c.number == number)).scalar()
    if row_id is not None:
        return int(row_id)
    result = conn.execute(insert(source_version).values(data_source_id=data_source_id, number=number))
    record_sources(conn, as_utc(now or datetime.now(timezone.utc)), [data_source_id])
    return int(result.inserted_primary_key[0])


def ensure_types(conn: Connection, types: Iterable[TypeRecord], now: datetime | None = None,
                 account: str = DEFAULT_ACCOUNT, data_source_id: int | None = None) -> dict[str, int]:
    """short_name -> id for each type of the data source (each has its own: migration 0015; None: the account's
    types without a data source), inserting missing types and updating changed names/categories/depths (the units of
    a changed type get a new version: their published type changes; they are the data source's own, so one data
    source's load never changes another's units)."""
    wanted: dict[str, TypeRecord] = {}
    for item in types:
        previous = wanted.setdefault(item.short_name, item)
        if previous != item:
            raise LoadError(f"org unit type short name {item.short_name!r} is given twice: {previous} and {item}")
    if not wanted:
        return {}
    owner = (org_unit_type.c.data_source_id.is_(None) if data_source_id is None
             else org_unit_type.c.data_source_id == data_source_id)
    existing = {row.short_name: row for row in conn.execute(
        select(org_unit_type).where(org_unit_type.c.account == account, owner,
                                    org_unit_type.c.short_name.in_(list(wanted))))}
    ids: dict[str, int] = {}
    for short_name, item in wanted.items():
        values = {"name": item.name, "category": item.category, "depth": item.depth}
        row = existing.get(short_name)
        if row is None:
            result = conn.execute(insert(org_unit_type).values(short_name=short_name, account=account,
                                                               data_source_id=data_source_id, **values))
            ids[short_name] = int(result.inserted_primary_key[0])
            continue
        if (row.name, row.category, row.depth) != (item.name, item.category, item.depth):
            conn.execute(update(org_unit_type).where(org_unit_type.c.id == row.id).values(**values))
            new_versions(conn, org_unit.c.org_unit_type_id == row.id, as_utc(now or datetime.now(timezone.utc)))
        ids[short_name] = int(row.id)
    return ids


def write_units(conn: Connection, records: Iterable[UnitRecord], source_version_id: int, now: datetime, *,
                batch_size: int = BATCH_SIZE, progress: Callable[[int], None] | None = None) -> WriteReport:
    """Upsert `records` (any order, streamed) into org_unit and org_unit_name, parents before children.

    Compared are the mapped fields (not created_at/updated_at); moving a unit to another source version
    counts as a change. Unchanged units keep their version_id and updated_at; changed ones get
    version_id + 1 and updated_at = now; new ones get updated_at = now (the source's own modification
    time would hide them from consumers syncing with _since) and keep the record's created_at (and, an id a purge
    erased, the versions after its last: plugins.orgunits.purged). The children of a renamed unit get a new version
    too (their partOf.display changes). Every new version is recorded in org_unit_history.
    Into a source version that is not served (plugins.orgunits.served), units are written withdrawn: a new unit is
    never published, a published one is withdrawn (a deleted version), one already unpublished keeps its version (its
    content is stored for the switch that publishes it); the report counts them as `held`.
    Raises LoadError for duplicate ids, dangling parents, cycles and invalid field values, possibly after
    some batches were written: run it in a transaction that is rolled back on error (engine.begin()).
    """
    writer = _BatchWriter(conn, source_version_id, as_utc(now), is_served(conn, source_version_id))
    report = WriteReport()
    ordered = parents_first(conn, records, batch_size, source_version_id)
    while batch := list(islice(ordered, batch_size)):
        report = report + writer.write(batch)
        if progress is not None:
            progress(report.total)
    if report.inserted >= _FRESH_STATISTICS:
        # statistics taken on a table still empty (a fresh database) make PostgreSQL's planner walk the new rows
        # once per row (paths, history): let it see what this transaction wrote
        refresh_statistics(conn, org_unit)
    _refuse_cycles(conn, writer.reparented)
    new_versions_below(conn, writer.moved, as_utc(now))  # before the paths change: each version keeps its own
    refresh_paths(conn, writer.moved)
    new_versions_for_children(conn, writer.renamed, as_utc(now))
    record_history(conn)
    return replace(report, moved_ids=tuple(writer.moved))


_COMPARED = ("name", "uuid", "source_ref", "aliases", "validation_status", "org_unit_type_id", "parent_id",
             "source_version_id", "latitude", "longitude", "altitude", "opening_date", "closing_date", "geometry",
             "deleted", "withdrawn", "identifier_system")


class _BatchWriter:
    def __init__(self, conn: Connection, source_version_id: int, now: datetime, served: bool) -> None:
        self.conn = conn
        self.source_version_id = source_version_id
        self.now = now
        self.served = served
        source = conn.execute(select(source_version.c.data_source_id)
                              .where(source_version.c.id == source_version_id)).scalar_one()
        self.type_ids = {row.short_name: row.id for row in conn.execute(
            select(org_unit_type.c.short_name, org_unit_type.c.id).where(types_of(source))
            .order_by(org_unit_type.c.data_source_id.is_not(None)))}  # its own last: they win
        self.reparented: list[int] = []
        self.renamed: list[int] = []
        self.moved: list[int] = []
        set_values = {name: bindparam(f"b_{name}") for name in (*_COMPARED, "updated_at", "version_id")}
        self._update = (update(org_unit).where(org_unit.c.id == bindparam("b_id"))
                        .values({**set_values, "aliases": bindparam("b_aliases", type_=_ALIASES)}))
        self._insert = insert(org_unit).values(aliases=bindparam("b_aliases", type_=_ALIASES))

    def write(self, batch: list[UnitRecord]) -> WriteReport:
        existing = self._existing([record.id for record in batch])
        purged = last_versions(self.conn, [record.id for record in batch if record.id not in existing])
        inserts: list[dict[str, Any]] = []
        updates: list[dict[str, Any]] = []
        names: list[dict[str, Any]] = []
        held = 0
        for record in batch:
            values = self._values(record)
            row = existing.get(record.id)
            if row is not None:  # what the file does not carry stays as stored
                values.update({name: getattr(row, name) for name in record.kept})
            values["deleted"], values["withdrawn"] = self._published(row)
            unpublished = not self.served and (row is None or row.deleted or row.withdrawn)
            if row is None:
                held += unpublished
                row_values = {**values, "id": record.id, "version_id": purged.get(record.id, 0) + 1,
                              "created_at": _stored_time(record.created_at, self.now),
                              "updated_at": self.now}  # lastUpdated is when this server got it: syncs by
                                                         # _since must see every new unit
                row_values["b_aliases"] = row_values.pop("aliases")
                inserts.append(row_values)
            elif _differs(row, values):
                held += unpublished
                if unpublished:  # stored for the switch that publishes it: no version published now
                    version, stamp = row.version_id, row.updated_at
                else:  # one new version per load
                    version, stamp = (row.version_id + 1 if row.recorded else row.version_id), self.now
                updates.append({**{f"b_{key}": value for key, value in values.items()}, "b_id": record.id,
                                "b_updated_at": stamp, "b_version_id": version})
                if row.parent_id != values["parent_id"] and values["parent_id"] is not None:
                    self.reparented.append(record.id)
                if row.name != values["name"]:
                    self.renamed.append(record.id)
                if row.parent_id != values["parent_id"]:
                    self.moved.append(record.id)
            else:
                continue
            names.extend({"org_unit_id": record.id, "position": position, "text": text, "norm": normalize(text)}
                         for position, text in enumerate((values["name"], *(values["aliases"] or ()))))
        if inserts:
            forget(self.conn, [item["id"] for item in inserts if item["id"] in purged])
            self.conn.execute(self._insert, inserts)
        if updates:
            self.conn.execute(self._update, updates)
            self.conn.execute(delete(org_unit_name).where(
                org_unit_name.c.org_unit_id.in_([item["b_id"] for item in updates])))
        if names:
            self.conn.execute(insert(org_unit_name), names)
        return WriteReport(len(inserts), len(updates), len(batch) - len(inserts) - len(updates), held=held)

    def _published(self, row: Row[Any] | None) -> tuple[bool, bool]:
        """(deleted, withdrawn) of a unit written into this source version: live when it is served; else withdrawn,
        deleted when it was published (its withdrawal), as it was when it was not (never published, or withdrawn or
        deleted already)."""
        if self.served:
            return False, False
        if row is None:
            return False, True
        return (bool(row.deleted) if row.deleted or row.withdrawn else True), True

    def _existing(self, ids: list[int]) -> dict[int, Row[Any]]:
        columns = [org_unit.c.id, org_unit.c.version_id, org_unit.c.updated_at, RECORDED.label("recorded"),
                   *(org_unit.c[name] for name in _COMPARED)]
        return {row.id: row for row in self.conn.execute(select(*columns).where(org_unit.c.id.in_(ids)))}

    def _values(self, record: UnitRecord) -> dict[str, Any]:
        check(record)
        type_id = self.type_ids.get(record.type_short_name)
        if type_id is None:
            raise LoadError(f"{describe(record)}: unknown org unit type {record.type_short_name!r}")
        return {
            "name": composed(record.name),  # stored in NFC: name:exact finds it however it was typed
            "uuid": record.uuid,
            "source_ref": record.source_ref,
            "identifier_system": record.identifier_system,
            "aliases": [composed(alias) for alias in record.aliases] or None,
            "validation_status": record.validation_status,
            "org_unit_type_id": type_id,
            "parent_id": record.parent_id,
            "source_version_id": self.source_version_id,
            "latitude": record.latitude,
            "longitude": record.longitude,
            "altitude": record.altitude,
            "opening_date": record.opening_date,
            "closing_date": record.closing_date,
            "geometry": dict(record.geometry) if record.geometry is not None else None,
        }


def _stored_time(value: datetime | None, default: datetime) -> datetime:
    return default if value is None else as_utc(value)


def _differs(row: Row[Any], values: dict[str, Any]) -> bool:
    for name in _COMPARED:
        current, wanted = getattr(row, name), values[name]
        if name == "aliases":
            current, wanted = list(current or ()), list(wanted or ())
        if current != wanted:
            return True
    return False


def _refuse_cycles(conn: Connection, ids: list[int]) -> None:
    """A unit moved under a new parent must not end up among its own descendants."""
    for start in range(0, len(ids), _ID_CHUNK):
        chunk = ids[start:start + _ID_CHUNK]
        chain = (select(org_unit.c.id.label("start"), org_unit.c.parent_id.label("current"),
                        literal_column("1", Integer).label("depth"))
                 .where(org_unit.c.id.in_(chunk), org_unit.c.parent_id.is_not(None))
                 .cte("chain", recursive=True))
        step = (select(chain.c.start, org_unit.c.parent_id, chain.c.depth + 1)
                .join(org_unit, org_unit.c.id == chain.c.current)
                .where(org_unit.c.parent_id.is_not(None), chain.c.current != chain.c.start,
                       chain.c.depth < MAX_DEPTH))
        chain = chain.union_all(step)
        looped = conn.execute(select(chain.c.start).where(chain.c.current == chain.c.start).limit(1)).scalar()
        if looped is not None:
            name = conn.execute(select(org_unit.c.name).where(org_unit.c.id == looped)).scalar()
            raise LoadError(f"org unit {looped} ({name!r}) would become its own ancestor (parent cycle)")


@contextmanager
def transaction(engine: Engine, dry_run: bool = False) -> Iterator[Connection]:
    """The one transaction every write goes through: it takes the writer lock first (server.storage.writes; the
    versions' instant: `stamp(conn)`), is committed at the end, rolled back on an error, or (`dry_run`) anyway."""
    with engine.connect() as conn, conn.begin() as begun:  # committed at the end unless rolled back
        conn.info[_STAMP] = begin_writing(conn, NEWEST_VERSION)
        try:
            yield conn
        finally:
            del conn.info[_STAMP]
        if dry_run:
            begun.rollback()


def stamp(conn: Connection) -> datetime:
    """The instant of the versions written in `conn`'s transaction (taken under the writer lock)."""
    return conn.info[_STAMP]  # type: ignore[no-any-return]  # KeyError: not in writer.transaction
