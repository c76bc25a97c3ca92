"""The source version each data source serves, and what a switch publishes: versions, as any other change (issue 37).

A unit is published while its source version is served. When a data source's served version changes (`versions
set-default`, a load creating a newer version, a load into a pinned data source), in the same transaction and stamped
with its instant:
- every published unit of a version no longer served is withdrawn: a deleted version (410 on read, a DELETE in
  `_history` and `$export?_since` for every consumer of the account), marked `withdrawn`, so that it is not a deletion
  of the source's data (`versions list` counts it, `--delete-missing` may still delete it);
- every withdrawn unit of the version now served is restored (a new live version: its content as it is), and every
  other live unit of it whose last version is older than the switch gets a new version too, so that a consumer
  syncing with `_since` receives the units it never had.
A unit loaded into a version that is not served is written withdrawn, never published (writer._BatchWriter): its
content is kept, unpublished, until a switch to its version publishes it. A switch back restores exactly what was
withdrawn (what the source deleted stays deleted)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, and_, case, exists, select, update

from plugins.orgunits.history import RECORDED, amend, record_history
from plugins.orgunits.tables import data_source, org_unit, org_unit_history, source_version
from plugins.orgunits.views import SERVED


_VERSIONS = source_version.join(data_source, data_source.c.id == source_version.c.data_source_id)
# no version of the unit was ever recorded: written by this transaction, never published
NEVER_RECORDED = ~exists().where(org_unit_history.c.org_unit_id == org_unit.c.id)


@dataclass(frozen=True)
class Switch:
    """What a switch of the served version published: units withdrawn, restored (their ids), given a new version."""

    withdrawn: int = 0
    restored: tuple[int, ...] = ()
    republished: int = 0


def served_version(conn: Connection, data_source_id: int) -> int | None:
    """The id of the source version the data source serves (None: it has none)."""
    return conn.execute(select(source_version.c.id).select_from(_VERSIONS)
                        .where(source_version.c.data_source_id == data_source_id, SERVED)).scalar()


def is_served(conn: Connection, source_version_id: int) -> bool:
    return bool(conn.execute(select(SERVED).select_from(_VERSIONS)
                             .where(source_version.c.id == source_version_id)).scalar())


def publish_switch(conn: Connection, data_source_id: int, before: int | None, now: datetime) -> Switch:
    """Publish the switch of the data source's served version from `before` (its id when the transaction began) to
    the one served now, with versions stamped `now` (nothing when it did not change). A unit already given a version
    by this transaction (not recorded yet) is amended, never given a second one."""
    after = served_version(conn, data_source_id)
    if after == before:
        return Switch()
    of_source = org_unit.c.source_version_id.in_(select(source_version.c.id)
                                                 .where(source_version.c.data_source_id == data_source_id))
    step = case((RECORDED, 1), else_=0)
    elsewhere = [of_source, org_unit.c.source_version_id != after] if after is not None else [of_source]
    amend(conn, and_(*elsewhere, org_unit.c.deleted.is_(False), org_unit.c.withdrawn.is_(False)), now)
    if after is not None:
        amend(conn, and_(org_unit.c.source_version_id == after, org_unit.c.withdrawn.is_(True)), now)
    # never published yet (written by this transaction): withdrawn before anyone saw it
    conn.execute(update(org_unit).where(*elsewhere, org_unit.c.deleted.is_(False), org_unit.c.withdrawn.is_(False),
                                        NEVER_RECORDED).values(withdrawn=True))
    withdrawn = conn.execute(update(org_unit).where(*elsewhere, org_unit.c.deleted.is_(False),
                                                    org_unit.c.withdrawn.is_(False))
                             .values(deleted=True, withdrawn=True, version_id=org_unit.c.version_id + step,
                                     updated_at=now)).rowcount
    restored: tuple[int, ...] = ()
    republished = 0
    if after is not None:
        mine = org_unit.c.source_version_id == after
        restored = tuple(conn.execute(select(org_unit.c.id).where(mine, org_unit.c.withdrawn.is_(True))
                                      .order_by(org_unit.c.id)).scalars())
        conn.execute(update(org_unit).where(mine, org_unit.c.withdrawn.is_(True))
                     .values(deleted=False, withdrawn=False, version_id=org_unit.c.version_id + step, updated_at=now))
        republished = conn.execute(update(org_unit).where(mine, org_unit.c.deleted.is_(False),
                                                          org_unit.c.withdrawn.is_(False), org_unit.c.updated_at < now,
                                                          RECORDED)
                                   .values(version_id=org_unit.c.version_id + 1, updated_at=now)).rowcount
    record_history(conn)
    return Switch(withdrawn, restored, republished)
