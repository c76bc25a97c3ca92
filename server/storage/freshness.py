"""What `load`, `demo` and `versions set-default` change under a running server, re-read at most once a second:
which stored bodies it may splice, each versioned type's generation (its newest version), which keys the cached
counts, and each tenanted type's partitions (which account owns them, which are served). So a load shows in
totals within a second, as in its reads and pages at once."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select

from server.declare.instants import as_utc
from server.storage.cache import Bounded
from server.storage.prerender import usable
from server.storage.writes import sync_point
from server.declare.provider import ResourceProvider
from server.declare.registry import Registry

MAX_COUNTS = 10_000


@dataclass(frozen=True)
class Snapshot:
    """What one database held when last looked at (replaced whole, never changed in place)."""

    checked: float = float("-inf")
    bodies: frozenset[str] = frozenset()
    generations: dict[str, Any] = field(default_factory=dict)
    partitions: dict[str, tuple[tuple[Any, str, bool], ...]] = field(default_factory=dict)  # (key, account, served)
    accounts: frozenset[str] = frozenset()
    stamp: int = 0  # changes whenever any of the above does
    first_account: str | None = None  # what a token naming no account sees among several (Tenancy.first_account)
    former: tuple[tuple[str, str], ...] = ()  # (account, what became of it): Tenancy.former_accounts

    @cached_property
    def synced(self) -> datetime:
        """The sync point of what this database held when looked at (server.storage.writes): every answer read
        since is complete up to it, and the Bundles say so (meta.lastUpdated)."""
        return sync_point(generation[0] for generation in self.generations.values() if generation is not None)

    def splices(self, provider: ResourceProvider) -> bool:
        """Whether the provider's stored bodies may be spliced into answers (all rendered for what the database
        holds)."""
        return provider.prerendered is not None and provider.resource_type in self.bodies


class Freshness:
    """One snapshot per database (the primary, each replica: `conn.info["database"]`), so that what is cached
    (counts, visibilities) is keyed by what the database that answers holds, not by what another one held."""

    def __init__(self, registry: Registry, interval_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = registry
        self.interval_s = interval_s
        self.clock = clock  # when to look again is measured on it (tests hold it still: tests/support/clock.py)
        self._lock = threading.Lock()
        self._snapshots: dict[str, Snapshot] = {}

    def generation(self, conn: Connection, provider: ResourceProvider) -> Any:
        return self.snapshot(conn).generations.get(provider.resource_type)

    def expire(self) -> None:
        """Look again at the next request (tests; a server looks once a second)."""
        with self._lock:
            self._snapshots = {db: replace(snapshot, checked=float("-inf")) for db, snapshot in self._snapshots.items()}

    def current(self, database: str) -> Snapshot | None:
        """The snapshot of `database` while it is fresh, without looking (the hot path); None when it is due: the
        caller then takes the path that looks."""
        snapshot = self._snapshots.get(database)
        if snapshot is None or self.clock() - snapshot.checked >= self.interval_s:
            return None
        return snapshot

    def snapshot(self, conn: Connection) -> Snapshot:
        database = database_of(conn)
        snapshot = self._snapshots.get(database)
        if snapshot is not None and self.clock() - snapshot.checked < self.interval_s:
            return snapshot
        with self._lock:
            snapshot = self._snapshots.get(database, Snapshot())
            if self.clock() - snapshot.checked < self.interval_s:
                return snapshot
            providers = self.registry.table_backed
            generations = {p.resource_type: _generation(conn, p) for p in providers if p.versioning is not None}
            bodies = usable(conn, self.registry)
            partitions = {p.resource_type: _partitions(conn, p) for p in providers
                          if p.tenancy is not None and p.tenancy.partitions is not None}
            first = _first_account(conn, providers)
            former = _former_accounts(conn, providers)
            if (generations, bodies, partitions, first, former) != (snapshot.generations, snapshot.bodies,
                                                                    snapshot.partitions, snapshot.first_account,
                                                                    snapshot.former):
                # a new object, swapped in whole: a reader never sees half of the old and half of the new
                snapshot = Snapshot(self.clock(), bodies, generations, partitions,
                                    frozenset(acct for rows in partitions.values() for _, acct, _ in rows),
                                    snapshot.stamp + 1, first, former)
            else:
                snapshot = replace(snapshot, checked=self.clock())
            self._snapshots[database] = snapshot
            return snapshot


def synced(snapshot: Snapshot, provider: ResourceProvider) -> datetime | None:
    """The sync point an answer about `provider` read after `snapshot` gives (Bundle.meta.lastUpdated): the
    snapshot's, for a provider that keeps versions (the others have no instants to sync by)."""
    return snapshot.synced if provider.versioning is not None else None


def database_of(conn: Connection) -> str:
    """Which database the connection reads (server.storage.replicas names replicas; else the primary)."""
    return str(conn.info.get("database", "primary"))


def _generation(conn: Connection, provider: ResourceProvider) -> Any:
    """The newest version's (instant, id, version): any write of a version changes it; or, when a purge erased
    newer versions, (the instant of the newest erased, None, None): the sync point never goes back
    (Versioning.high_water)."""
    v = provider.versioning
    assert v is not None
    row = conn.execute(select(v.history_updated, v.history_id, v.history_version)
                       .order_by(v.history_updated.desc(), v.history_id.desc(), v.history_version.desc())
                       .limit(1)).first()
    erased = conn.execute(v.high_water).scalar() if v.high_water is not None else None
    if erased is not None and (row is None or as_utc(erased) > as_utc(row[0])):
        return (erased, None, None)
    return None if row is None else tuple(row)


def _first_account(conn: Connection, providers: Iterable[ResourceProvider]) -> str | None:
    for provider in providers:
        if provider.tenancy is not None and provider.tenancy.first_account is not None:
            found = conn.execute(provider.tenancy.first_account).scalar()
            return None if found is None else str(found)
    return None


def _former_accounts(conn: Connection, providers: Iterable[ResourceProvider]) -> tuple[tuple[str, str], ...]:
    found: dict[str, str] = {}
    for provider in providers:
        if provider.tenancy is not None and provider.tenancy.former_accounts is not None:
            found.update((str(account), str(words)) for account, words in conn.execute(provider.tenancy.former_accounts))
    return tuple(sorted(found.items()))


def _partitions(conn: Connection, provider: ResourceProvider) -> tuple[tuple[Any, str, bool], ...]:
    assert provider.tenancy is not None and provider.tenancy.partitions is not None
    return tuple(sorted(((key, str(acct), bool(served)) for key, acct, served in
                         conn.execute(provider.tenancy.partitions)), key=lambda r: (str(r[0]), r[1])))


class CountCache(Bounded[int]):
    """Totals by (generation, what the search selects)."""

    def __init__(self, size: int = MAX_COUNTS) -> None:
        super().__init__(size)
