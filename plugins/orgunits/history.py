"""Versions of org units: paths kept right after moves, new versions, their snapshots in org_unit_history, and
the deletions of `--delete-missing`; versions of data sources (their Organizations) in data_source_history."""
from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    and_,
    case,
    delete,
    bindparam,
    exists,
    func,
    insert,
    or_,
    select,
    union_all,
    update,
)

from plugins.orgunits.tables import (
    data_source,
    data_source_history,
    directory_organization_history,
    org_unit,
    org_unit_history,
    source_version,
)
from plugins.orgunits.views import PUBLISHED_COLUMNS, PUBLISHED_FROM, PURGED, SOURCE_HOLDS, SOURCE_PUBLISHED, snapshot
from server import LoadError, as_utc, path_below, path_subtree

BATCH_SIZE = 2000
MAX_DEPTH = 256
_ID_CHUNK = 2000


_NEWEST = union_all(select(func.max(org_unit_history.c.updated_at).label("at")),
                    select(func.max(data_source_history.c.updated_at).label("at")),
                    select(func.max(directory_organization_history.c.updated_at).label("at")),
                    PURGED).subquery("newest")
# the instant of the newest version stored (or erased by a purge), of either versioned type (server.begin_writing: a
# write stamps after it)
NEWEST_VERSION: Select[Any] = select(func.max(_NEWEST.c.at))
SOURCE_KEYS = tuple(column.key for column in SOURCE_PUBLISHED)

# what scopes a version while it is current (server.VersionScope): recorded with it, and kept equal to the unit's own
# while it is the current one (sync_current_paths)
_SCOPED = (org_unit.c.source_version_id.label("scope_partition"), org_unit.c.path.label("scope_path"))
_PUBLISHED_KEYS = tuple(column.key for column in PUBLISHED_COLUMNS)
_MANY_MOVES = 500  # past this many moved units, the current versions' paths are compared over the whole table

RECORDED = exists().where(org_unit_history.c.org_unit_id == org_unit.c.id,  # the current version is in history
                          org_unit_history.c.version_id == org_unit.c.version_id)


def amend(conn: Connection, where: ColumnElement[bool], now: datetime) -> None:
    """The units matching `where` whose current version this write already recorded (stamped `now`) get it amended,
    not a second one: its history row is dropped (RECORDED is false again) and record_history writes it anew."""
    conn.execute(delete(org_unit_history).where(
        org_unit_history.c.updated_at == now,
        exists().where(org_unit.c.id == org_unit_history.c.org_unit_id,
                       org_unit.c.version_id == org_unit_history.c.version_id, where)))


def refresh_paths(conn: Connection, moved: list[int]) -> None:
    """Keep org_unit.path ("/root/.../self/") right: clear it under moved units, then fill level by level."""
    for start in range(0, len(moved), _ID_CHUNK):
        old = conn.execute(select(org_unit.c.path).where(org_unit.c.id.in_(moved[start:start + _ID_CHUNK]),
                                                         org_unit.c.path.is_not(None))).scalars().all()
        for path in old:
            conn.execute(update(org_unit).where(path_subtree(org_unit.c.path, path)).values(path=None))
    conn.execute(update(org_unit).where(org_unit.c.path.is_(None), org_unit.c.parent_id.is_(None))
                 .values(path=path_below(None, org_unit.c.id)))
    parent = org_unit.alias("p")
    parent_path = select(parent.c.path).where(parent.c.id == org_unit.c.parent_id).scalar_subquery()
    ready = exists().where(parent.c.id == org_unit.c.parent_id, parent.c.path.is_not(None))
    for _ in range(MAX_DEPTH):
        done = conn.execute(update(org_unit).where(org_unit.c.path.is_(None), ready)
                            .values(path=path_below(parent_path, org_unit.c.id)))
        if not done.rowcount:
            break
    sync_current_paths(conn, moved)


def sync_current_paths(conn: Connection, moved: list[int]) -> None:
    """The current version of each unit below a moved one keeps the unit's new path (server.VersionScope: a caller
    sees a version as it could while it was current; the unit did not change, its place did)."""
    if not moved:
        return
    current = [org_unit_history.c.org_unit_id == org_unit.c.id, org_unit_history.c.version_id == org_unit.c.version_id,
               or_(org_unit_history.c.path.is_(None), org_unit_history.c.path != org_unit.c.path)]
    if len(moved) > _MANY_MOVES:
        conn.execute(update(org_unit_history).where(*current).values(path=org_unit.c.path))
        return
    for start in range(0, len(moved), _ID_CHUNK):
        paths = conn.execute(select(org_unit.c.path).where(org_unit.c.id.in_(moved[start:start + _ID_CHUNK]),
                                                          org_unit.c.path.is_not(None))).scalars().all()
        for path in paths:
            conn.execute(update(org_unit_history).where(*current, path_subtree(org_unit.c.path, path))
                         .values(path=org_unit.c.path))


def new_versions(conn: Connection, where: ColumnElement[bool], now: datetime) -> None:
    """Published live units matching `where` get a new version (recorded by record_history), unless this load already
    gave them one (a withdrawn unit gets one when its version is served again)."""
    conn.execute(update(org_unit).where(where, org_unit.c.deleted.is_(False), org_unit.c.withdrawn.is_(False), RECORDED)
                 .values(version_id=org_unit.c.version_id + 1, updated_at=now))


def new_versions_below(conn: Connection, moved: list[int], now: datetime) -> None:
    """The live units below a moved one get a new version, before their paths change (refresh_paths): each kept
    version holds the place it had while current (server.VersionScope), so the version of before the move stays in
    the subtree it was in, and the new one is where the unit is now. A token of the subtree the units left is shown
    their new versions as departures (DELETE entries), one of the subtree they entered receives them: both copies
    converge (the units below a moved one left silently: no entry in either)."""
    for start in range(0, len(moved), _ID_CHUNK):
        paths = conn.execute(select(org_unit.c.path).where(org_unit.c.id.in_(moved[start:start + _ID_CHUNK]),
                                                          org_unit.c.path.is_not(None))).scalars().all()
        for path in paths:
            new_versions(conn, path_subtree(org_unit.c.path, path), now)


def new_versions_for_children(conn: Connection, renamed: list[int], now: datetime) -> None:
    """Children of renamed units get a new version (their partOf.display changes)."""
    for start in range(0, len(renamed), _ID_CHUNK):
        new_versions(conn, org_unit.c.parent_id.in_(renamed[start:start + _ID_CHUNK]), now)


def record_history(conn: Connection, batch_size: int = BATCH_SIZE) -> int:
    """Snapshot every org unit whose current version is not in org_unit_history yet (keyset-paged), but a withdrawn
    unit never published (plugins.orgunits.served: its version is recorded when a switch publishes it)."""
    missing = and_(~exists().where(org_unit_history.c.org_unit_id == org_unit.c.id,
                                   org_unit_history.c.version_id == org_unit.c.version_id),
                   or_(org_unit.c.deleted.is_(True), org_unit.c.withdrawn.is_(False)))
    last_id, written = None, 0
    while True:
        query = select(*PUBLISHED_COLUMNS, *_SCOPED).select_from(PUBLISHED_FROM).where(missing)
        if last_id is not None:
            query = query.where(org_unit.c.id > last_id)
        rows = conn.execute(query.order_by(org_unit.c.id).limit(batch_size)).mappings().all()
        if not rows:
            return written
        conn.execute(insert(org_unit_history), [
            {"org_unit_id": row["id"], "version_id": row["version_id"], "updated_at": row["updated_at"],
             "deleted": row["deleted"], "snapshot": None if row["deleted"] else snapshot(row, _PUBLISHED_KEYS),
             "source_version_id": row["scope_partition"], "path": row["scope_path"]}
            for row in rows
        ])
        written += len(rows)
        last_id = rows[-1]["id"]


def missing_units(conn: Connection, *, data_source_id: int, seen_ids: set[int]) -> list[int]:
    """The units the data source holds (live or withdrawn, any version) that are not among `seen_ids`, in id order."""
    of_source = (select(org_unit.c.id)
                 .join(source_version, org_unit.c.source_version_id == source_version.c.id)
                 .where(source_version.c.data_source_id == data_source_id, SOURCE_HOLDS)
                 .order_by(org_unit.c.id))
    return [unit_id for unit_id in conn.execute(of_source).scalars() if unit_id not in seen_ids]


def delete_missing(conn: Connection, *, data_source_id: int, seen_ids: set[int], now: datetime) -> list[int]:
    """Units of this data source absent from the file become deleted versions; returns their ids."""
    missing = missing_units(conn, data_source_id=data_source_id, seen_ids=seen_ids)
    if not missing:
        return []
    children = select(org_unit.c.id, org_unit.c.parent_id).where(
        org_unit.c.parent_id.in_(bindparam("ids", expanding=True)), org_unit.c.deleted.is_(False))
    for start in range(0, len(missing), _ID_CHUNK):  # a unit kept in the file under a parent that goes
        for child_id, parent_id in conn.execute(children, {"ids": missing[start:start + _ID_CHUNK]}):
            if child_id in seen_ids:
                raise LoadError(f"org unit {child_id} is in the file but its parent {parent_id} is not: "
                                "--delete-missing would leave it under a deleted parent")
    delete_units(conn, missing, now, what="--delete-missing")
    return missing


def delete_units(conn: Connection, ids: list[int], now: datetime, *, what: str) -> None:
    """The units `ids` become deleted versions (410 on read, a DELETE entry in _history), deleted by their source (a
    switch back does not restore them); one already withdrawn (a deleted version published) is marked so, without
    another version. A live unit of another data source under one of them refuses it (`what` names the operation in
    the message)."""
    now = as_utc(now)
    live_children = (select(org_unit.c.id, org_unit.c.parent_id)
                     .where(org_unit.c.deleted.is_(False), org_unit.c.parent_id.in_(bindparam("ids", expanding=True))))
    wanted = set(ids)
    for start in range(0, len(ids), _ID_CHUNK):
        chunk = ids[start:start + _ID_CHUNK]
        for child_id, parent_id in conn.execute(live_children, {"ids": chunk}):
            if child_id not in wanted:
                raise LoadError(f"org unit {child_id} (of another data source) has parent {parent_id}, which "
                                f"{what} would delete")
        amend(conn, and_(org_unit.c.id.in_(chunk), org_unit.c.deleted.is_(False)), now)
        conn.execute(update(org_unit).where(org_unit.c.id.in_(chunk), org_unit.c.deleted.is_(False))
                     .values(deleted=True, withdrawn=False, version_id=org_unit.c.version_id + case((RECORDED, 1),
                                                                                                   else_=0),
                             updated_at=now))
        conn.execute(update(org_unit).where(org_unit.c.id.in_(chunk), org_unit.c.withdrawn.is_(True))
                     .values(withdrawn=False))
    record_history(conn)


def record_sources(conn: Connection, now: datetime, ids: Iterable[int]) -> list[int]:
    """The data sources `ids` whose Organization changed since its newest version (created, renamed, serving another
    source version, removed, restored) get a new version stamped `now`: a snapshot of what it publishes
    (views.SOURCE_PUBLISHED, with the version's number and instant), or a deletion once removed. A change stamped
    `now` again (a later step of the same write) amends that version: one version per data source and write.
    Returns the ids given a version."""
    wanted = sorted(set(ids))
    if not wanted:
        return []
    now = as_utc(now)
    rows = conn.execute(select(*SOURCE_PUBLISHED, data_source.c.removed_at)
                        .where(data_source.c.id.in_(wanted))).mappings().all()
    later = data_source_history.alias("later")
    newest = ~exists().where(later.c.data_source_id == data_source_history.c.data_source_id,
                             later.c.version_id > data_source_history.c.version_id)
    recorded = {row.data_source_id: row for row in conn.execute(
        select(data_source_history).where(data_source_history.c.data_source_id.in_(wanted), newest))}
    changed: list[int] = []
    for row in rows:
        published = None if row["removed_at"] is not None else {key: row[key] for key in SOURCE_KEYS}
        last = recorded.get(row["id"])
        if last is not None and _published(last) == published:
            continue
        amend = last is not None and as_utc(last.updated_at) == now
        version = last.version_id if amend else (last.version_id + 1 if last is not None else 1)
        values = {"updated_at": now, "deleted": published is None,
                  "snapshot": None if published is None else {**published, "version_id": version,
                                                              "updated_at": now.isoformat()}}
        if amend:
            conn.execute(update(data_source_history).values(values).where(
                data_source_history.c.data_source_id == row["id"], data_source_history.c.version_id == version))
        else:
            conn.execute(insert(data_source_history).values(data_source_id=row["id"], version_id=version, **values))
        conn.execute(update(data_source).where(data_source.c.id == row["id"])
                     .values(version_id=version, updated_at=now))
        changed.append(row["id"])
    return changed


def _published(version: Any) -> dict[str, Any] | None:
    """What a stored version publishes (None: a deletion), as record_sources compares it."""
    return None if version.deleted else {key: (version.snapshot or {}).get(key) for key in SOURCE_KEYS}
