"""Accounts and data sources, as an operator manages them (`orgunit-fhir accounts | data-sources`): list, rename,
remove. Each change is one transaction of the caller's; a removal deletes the units (a deleted version each, so
consumers syncing with `_history` see it) and marks the data source removed (its Organization too: a deleted
version); a rename gives its Organization a new version."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, delete, func, select, true, update

from plugins.orgunits import claimless
from plugins.orgunits import directory
from plugins.orgunits.history import delete_units, new_versions, record_history, record_sources
from plugins.orgunits.purged import record_purge, remember
from plugins.orgunits.tables import (
    data_source,
    data_source_history,
    org_unit,
    org_unit_body,
    org_unit_history,
    org_unit_name,
    org_unit_type,
    source_version,
)
from plugins.orgunits.views import SERVED, SOURCE_HOLDS
from server import LoadError, as_utc, normalize

_LIVE = data_source.c.removed_at.is_(None)
_CHUNK = 2000


@dataclass(frozen=True)
class SourceInfo:
    account: str
    name: str
    slug: str
    versions: int
    units: int  # the units it holds (live or withdrawn), every version
    served: int  # live units of the version served
    last_format: str | None


@dataclass(frozen=True)
class AccountInfo:
    account: str
    sources: int
    units: int
    served: int
    # every data source of the account removed (not purged), the last at this instant: its tokens see its deletions
    removed: datetime | None = None


def list_sources(conn: Connection, account: str | None = None) -> list[SourceInfo]:
    held = (select(func.count()).select_from(org_unit.join(source_version))
            .where(source_version.c.data_source_id == data_source.c.id))
    live_units = held.where(SOURCE_HOLDS)
    served = held.where(SERVED, org_unit.c.deleted.is_(False))
    versions = select(func.count()).where(source_version.c.data_source_id == data_source.c.id)
    query = (select(data_source.c.account, data_source.c.name, data_source.c.slug, versions.scalar_subquery(),
                    live_units.scalar_subquery(), served.scalar_subquery(), data_source.c.last_format)
             .where(_LIVE).order_by(data_source.c.account, data_source.c.name))
    if account is not None:
        query = query.where(data_source.c.account == account)
    return [SourceInfo(a, n, s, int(v or 0), int(u or 0), int(d or 0), f)
            for a, n, s, v, u, d, f in conn.execute(query)]


def list_accounts(conn: Connection) -> list[AccountInfo]:
    """Every account: those holding data sources, then those whose data sources were all removed (not purged)."""
    accounts: dict[str, AccountInfo] = {}
    for source in list_sources(conn):
        held = accounts.get(source.account, AccountInfo(source.account, 0, 0, 0))
        accounts[source.account] = AccountInfo(source.account, held.sources + 1, held.units + source.units,
                                               held.served + source.served)
    gone = conn.execute(select(data_source.c.account, func.count(), func.max(data_source.c.removed_at))
                        .where(data_source.c.account.not_in(list(accounts) or [""]))
                        .group_by(data_source.c.account).order_by(data_source.c.account)).all()
    return [*accounts.values(), *(AccountInfo(account, int(count), 0, 0, when) for account, count, when in gone)]


def account_names(conn: Connection) -> list[str]:
    return sorted(set(conn.execute(select(data_source.c.account).where(_LIVE)).scalars()))


def _source(conn: Connection, account: str, name: str) -> Any:
    row = conn.execute(select(data_source).where(data_source.c.account == account, data_source.c.name == name,
                                                 _LIVE)).first()
    if row is None:
        known = [s.name for s in list_sources(conn, account)]
        where = (f"its data sources: {', '.join(known)}" if known else
                 f"it holds none; accounts: {', '.join(account_names(conn)) or 'none'}")
        raise LoadError(f"account {account!r} has no data source {name!r} ({where})")
    return row


def _of_source(source_id: int) -> Any:
    return org_unit.c.source_version_id.in_(select(source_version.c.id)
                                            .where(source_version.c.data_source_id == source_id))


def rename_source(conn: Connection, account: str, name: str, new_name: str, now: datetime) -> int:
    """The data source gets a new name (its slug, the identifier consumers know it by, stays): its Organization and
    each live unit get a new version (the unit's managingOrganization.display changes). Returns how many units."""
    row = _source(conn, account, name)
    new_name = new_name.strip()
    if not new_name or len(new_name) > 200:
        raise LoadError(f"new name {new_name!r}: give a name of 1 to 200 characters")
    taken = conn.execute(select(data_source.c.removed_at).where(data_source.c.account == account,
                                                                data_source.c.name == new_name)).first()
    if taken is not None:
        what = "a removed data source" if taken.removed_at is not None else "another data source"
        raise LoadError(f"account {account!r}: {what} is already called {new_name!r}; choose another name")
    now = as_utc(now)
    conn.execute(update(data_source).where(data_source.c.id == row.id)
                 .values(name=new_name, name_norm=normalize(new_name)))
    record_sources(conn, now, [row.id])
    changed = _count_live(conn, _of_source(row.id))
    new_versions(conn, _of_source(row.id), now)
    record_history(conn)
    return changed


def remove_source(conn: Connection, account: str, name: str, *, force: bool, now: datetime,
                  purge: bool = False) -> int:
    """Delete every live unit of the data source (refused while some are served, unless `force`) and mark it
    removed. Returns how many units were deleted. `purge`: erase it instead, with every version of its units (a
    data source already removed too): see `_purge`."""
    what = f"{'purging' if purge else 'removing'} data source {account}/{name}"
    if purge:
        rows = conn.execute(select(data_source).where(data_source.c.account == account,
                                                      data_source.c.name == name)).all()
        return _purge(conn, rows or [_source(conn, account, name)], force=force, what=what, now=now)
    return _remove(conn, [_source(conn, account, name)], force=force, now=now, what=what)


def rename_account(conn: Connection, account: str, new_account: str) -> int:
    """Every data source (and org unit type) of `account` moves to `new_account`, which must not exist: accounts
    are not merged. Published resources do not change (the account is not part of them); the account recorded for
    tokens without an account claim moves with it. Returns the number of data sources moved."""
    new_account = new_account.strip()
    if not new_account or len(new_account) > 200:
        raise LoadError(f"new account {new_account!r}: give a name of 1 to 200 characters")
    sources = [s.name for s in list_sources(conn, account)]
    if not sources:
        raise LoadError(f"account {account!r} does not exist (accounts: {', '.join(account_names(conn)) or 'none'})")
    if conn.execute(select(data_source.c.id).where(data_source.c.account == new_account).limit(1)).first():
        raise LoadError(f"account {new_account!r} already exists (or held data sources that were removed); accounts "
                        "are not merged: choose another name")
    conn.execute(update(data_source).where(data_source.c.account == account).values(account=new_account))
    conn.execute(update(org_unit_type).where(org_unit_type.c.account == account).values(account=new_account))
    claimless.move(conn, account, new_account)
    return len(sources)


def remove_account(conn: Connection, account: str, *, force: bool, now: datetime,
                   purge: bool = False) -> tuple[int, int]:
    """Remove every data source of the account (refused while units are served, unless `force`): the account no
    longer exists. Returns (data sources removed, units deleted). `purge`: erase them (see `_purge`), removed
    ones included."""
    rows = conn.execute(select(data_source).where(data_source.c.account == account,
                                                  true() if purge else _LIVE)).all()
    if not rows:
        raise LoadError(f"account {account!r} does not exist (accounts: {', '.join(account_names(conn)) or 'none'})")
    if purge:
        return len(rows), _purge(conn, rows, force=force, what=f"purging account {account}", now=now)
    deleted = _remove(conn, rows, force=force, now=now, what=f"removing account {account}")
    return len(rows), deleted


def _remove(conn: Connection, rows: list[Any], *, force: bool, now: datetime, what: str) -> int:
    _refuse_served(conn, rows, force, what)
    ids = [int(i) for row in rows for i in conn.execute(
        select(org_unit.c.id).where(_of_source(row.id), org_unit.c.deleted.is_(False)).order_by(org_unit.c.id))
        .scalars()]
    now = as_utc(now)
    delete_units(conn, ids, now, what=what)
    conn.execute(update(data_source).where(data_source.c.id.in_([row.id for row in rows])).values(removed_at=now))
    record_sources(conn, now, [row.id for row in rows])  # each Organization: a deleted version
    directory.withdraw(conn, [row.id for row in rows], now)  # and each of their directory Organizations
    return len(ids)


def _refuse_served(conn: Connection, rows: list[Any], force: bool, what: str, purge: bool = False) -> None:
    removed = {(row.account, row.name) for row in rows}
    served = sum(s.served for account in {row.account for row in rows} for s in list_sources(conn, account)
                 if (s.account, s.name) in removed)
    if served and not force:
        raise LoadError(f"{what}: {served:,} of its units are served; pass --force to " + (
            "erase them (consumers that read them are not told: no deleted version)" if purge else
            "delete them (each gets a deleted version, which consumers syncing with _history see)"))


def _purge(conn: Connection, rows: list[Any], *, force: bool, what: str, now: datetime) -> int:
    """Erase the data sources `rows` as if never loaded: every version of their units (history, bodies, names), their
    source versions, every version of their Organizations, the rows themselves and the account's types no unit uses
    any more. No read, vread, _history, search or $export returns them afterwards; nor do consumers learn of a
    deletion (undoing a load into the wrong account). A unit of another data source under one of them refuses it. The
    account recorded for tokens without an account claim stays recorded (plugins.orgunits.claimless): erasing it
    leaves them with 403, never with the next account. Nothing it erased is named again (plugins.orgunits.purged):
    each unit's last version is kept (its id is never allocated again; loaded again, its versions go on), and so are
    the purge's instant (`now`: the sync point never goes back) and its data sources' ids. Returns the units
    erased."""
    _refuse_served(conn, rows, force, what, purge=True)
    source_ids = [row.id for row in rows]
    versions = select(source_version.c.id).where(source_version.c.data_source_id.in_(source_ids))
    ids = [int(i) for i in conn.execute(select(org_unit.c.id).where(org_unit.c.source_version_id.in_(versions))
                                        .order_by(org_unit.c.id)).scalars()]
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start:start + _CHUNK]
        other = conn.execute(select(org_unit.c.id, org_unit.c.parent_id).where(
            org_unit.c.parent_id.in_(chunk), org_unit.c.source_version_id.not_in(versions)).limit(1)).first()
        if other is not None:
            raise LoadError(f"{what}: org unit {other.id} (of another data source) has parent {other.parent_id}, "
                            "which the purge would erase; nothing was changed")
        remember(conn, chunk)
        conn.execute(delete(org_unit_history).where(org_unit_history.c.org_unit_id.in_(chunk)))
        conn.execute(delete(org_unit_body).where(org_unit_body.c.org_unit_id.in_(chunk)))
        conn.execute(delete(org_unit_name).where(org_unit_name.c.org_unit_id.in_(chunk)))
    conn.execute(update(org_unit).where(org_unit.c.source_version_id.in_(versions)).values(parent_id=None))
    conn.execute(delete(org_unit).where(org_unit.c.source_version_id.in_(versions)))
    conn.execute(update(data_source).where(data_source.c.id.in_(source_ids)).values(default_version_id=None))
    conn.execute(delete(source_version).where(source_version.c.data_source_id.in_(source_ids)))
    conn.execute(delete(data_source_history).where(data_source_history.c.data_source_id.in_(source_ids)))
    directory.erase(conn, source_ids)
    conn.execute(delete(data_source).where(data_source.c.id.in_(source_ids)))
    record_purge(conn, rows, len(ids), as_utc(now))
    used = select(org_unit.c.org_unit_type_id).distinct()
    conn.execute(delete(org_unit_type).where(org_unit_type.c.account.in_({row.account for row in rows}),
                                             org_unit_type.c.id.not_in(used)))
    return len(ids)


def _count_live(conn: Connection, where: Any) -> int:
    """The published live units matching `where` (those new_versions gives a version)."""
    return int(conn.execute(select(func.count()).select_from(org_unit)
                            .where(and_(where, org_unit.c.deleted.is_(False), org_unit.c.withdrawn.is_(False))))
               .scalar_one())
