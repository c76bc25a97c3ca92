"""What a purge leaves behind so that nothing is named twice (issue 37): the last version of each unit it erased (its
id is never allocated again, and a source loading that id again, as Iaso's own ids, continues its versions), each
purge with its instant (the sync point never goes back: views.HIGH_WATER) and the data source ids it erased (never
given again). `(id, versionId)` then names one content for ever, purge or not."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, delete, func, insert, select, union_all

from plugins.orgunits.tables import data_source, org_unit, org_unit_history, org_unit_purged, orgunit_purge

_CHUNK = 2000


def last_versions(conn: Connection, ids: Sequence[int]) -> dict[int, int]:
    """The last version of each of `ids` that a purge erased (ids never purged are left out)."""
    found: dict[int, int] = {}
    for start in range(0, len(ids), _CHUNK):
        found.update((int(i), int(v)) for i, v in conn.execute(
            select(org_unit_purged.c.org_unit_id, org_unit_purged.c.version_id)
            .where(org_unit_purged.c.org_unit_id.in_(ids[start:start + _CHUNK]))))
    return found


def forget(conn: Connection, ids: Sequence[int]) -> None:
    """The purged ids loaded again: their versions continue in org_unit (and org_unit_history)."""
    for start in range(0, len(ids), _CHUNK):
        conn.execute(delete(org_unit_purged).where(org_unit_purged.c.org_unit_id.in_(ids[start:start + _CHUNK])))


def remember(conn: Connection, ids: Sequence[int]) -> None:
    """Before the units `ids` are erased: their last version (of the unit or of its history, whichever is higher)."""
    newest = union_all(select(org_unit.c.id.label("id"), org_unit.c.version_id.label("v"))
                       .where(org_unit.c.id.in_(bindparam("ids", expanding=True))),
                       select(org_unit_history.c.org_unit_id, org_unit_history.c.version_id)
                       .where(org_unit_history.c.org_unit_id.in_(bindparam("ids", expanding=True)))).subquery()
    query = select(newest.c.id, func.max(newest.c.v)).group_by(newest.c.id)
    for start in range(0, len(ids), _CHUNK):
        rows = [{"org_unit_id": int(i), "version_id": int(v)}
                for i, v in conn.execute(query, {"ids": list(ids[start:start + _CHUNK])})]
        if rows:
            forget(conn, [row["org_unit_id"] for row in rows])
            conn.execute(insert(org_unit_purged), rows)


def record_purge(conn: Connection, rows: Iterable[Any], units: int, at: datetime) -> None:
    """One line per data source a purge erases: its instant (the sync point stays at or after it) and its id (never
    given again)."""
    conn.execute(insert(orgunit_purge), [{"at": at, "account": row.account, "data_source": row.name,
                                          "data_source_id": row.id, "units": units} for row in rows])


def next_unit_id(conn: Connection) -> int:
    """The lowest id never given to a unit, purged or not."""
    return 1 + int(conn.execute(select(func.max(union_all(
        select(func.coalesce(func.max(org_unit.c.id), 0).label("id")),
        select(func.coalesce(func.max(org_unit_purged.c.org_unit_id), 0))).subquery().c.id))).scalar_one())


def next_data_source_id(conn: Connection) -> int:
    """The lowest id never given to a data source, purged or not."""
    return 1 + int(conn.execute(select(func.max(union_all(
        select(func.coalesce(func.max(data_source.c.id), 0).label("id")),
        select(func.coalesce(func.max(orgunit_purge.c.data_source_id), 0))).subquery().c.id))).scalar_one())
