"""Source versions of each data source, and which one is served (`orgunit-fhir versions list|set-default`)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import Connection, func, select, update

from plugins.orgunits.history import record_sources
from plugins.orgunits.tables import (
    DEFAULT_ACCOUNT,
    data_source,
    org_unit,
    source_version,
)
from plugins.orgunits.served import Switch, publish_switch, served_version
from plugins.orgunits.views import SERVED, SOURCE_HOLDS
from server import LoadError


@dataclass(frozen=True)
class VersionInfo:
    account: str
    data_source: str
    number: int
    units: int  # the units it holds: live, or withdrawn (published when it is served)
    served: bool
    default: bool  # chosen with set-default (else the newest is served)


def list_versions(conn: Connection, account: str | None = None) -> list[VersionInfo]:
    units = (select(func.count()).where(org_unit.c.source_version_id == source_version.c.id,
                                        SOURCE_HOLDS).scalar_subquery())
    query = (select(data_source.c.account, data_source.c.name, source_version.c.number, units, SERVED,
                    data_source.c.default_version_id == source_version.c.id)
             .select_from(source_version.join(data_source, source_version.c.data_source_id == data_source.c.id))
             .where(data_source.c.removed_at.is_(None))
             .order_by(data_source.c.account, data_source.c.name, source_version.c.number))
    if account is not None:
        query = query.where(data_source.c.account == account)
    return [VersionInfo(a, n, int(v), int(u or 0), bool(s), bool(d)) for a, n, v, u, s, d in conn.execute(query)]


def set_default_version(conn: Connection, data_source_name: str, number: int | None,
                        account: str = DEFAULT_ACCOUNT, now: datetime | None = None) -> Switch:
    """Serve version `number` of the data source (None: back to the newest); when that changes the version served,
    it is published as versions stamped `now` (plugins.orgunits.served: the units of the version left are withdrawn,
    those of the version served restored) and its Organization gets a new version (its source-version extension)."""
    now = now or datetime.now(timezone.utc)
    source = conn.execute(select(data_source.c.id).where(data_source.c.account == account,
                                                         data_source.c.name == data_source_name,
                                                         data_source.c.removed_at.is_(None))).scalar()
    if source is None:
        raise LoadError(f"account {account!r} has no data source {data_source_name!r}")
    version_id = None
    if number is not None:
        version_id = conn.execute(select(source_version.c.id).where(
            source_version.c.data_source_id == source, source_version.c.number == number)).scalar()
        if version_id is None:
            known = conn.execute(select(source_version.c.number).where(source_version.c.data_source_id == source)
                                 .order_by(source_version.c.number)).scalars().all()
            raise LoadError(f"data source {data_source_name!r} has no version {number}; "
                            f"it has {', '.join(map(str, known)) or 'none'}")
    before = served_version(conn, source)
    conn.execute(update(data_source).where(data_source.c.id == source).values(default_version_id=version_id))
    switch = publish_switch(conn, source, before, now)
    record_sources(conn, now, [source])
    return switch
