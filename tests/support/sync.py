"""Sync as an mCSD Update Client does it, against operators reloading edited files: `Operator` (one data source,
reloaded with renames, moves, deletions and additions), `Mirror` (a client's copy, kept by `_history?_since=` with
the sync point each answer gives), `registry` (what the database holds), `paused_load` (a load held open)."""
from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from sqlalchemy import Connection, Engine, select

from plugins.orgunits.importers.common import allocate_ids
from plugins.orgunits.importers.transaction import import_units
from plugins.orgunits.records import TypeRecord, UnitRecord, WriteReport
from plugins.orgunits.tables import org_unit

ACCOUNT = "sync"
TYPES = (TypeRecord("Country", "COUNTRY", "COUNTRY", 1), TypeRecord("District", "DISTRICT", "DISTRICT", 2),
         TypeRecord("Centre de santé", "CSPS", "HF", 3))
DISTRICTS = 5


@dataclass
class Operator:
    """Reloads one data source from an edited file, as an operator with `load --delete-missing` would: each step
    renames, moves and deletes some facilities and adds new ones (string ids: the server allocates the numbers)."""

    engine: Engine
    name: str
    facilities: int
    seed: int
    pause_s: float = 0.0  # held in the middle of each load (a longer load's window)
    names: dict[str, tuple[str, str]] = field(default_factory=dict)  # facility ref -> (name, district ref)
    loads: int = 0
    versions: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.added = 0
        for _ in range(self.facilities):
            self._add()

    def _add(self) -> None:
        self.added += 1
        ref = f"{self.name}-f{self.added}"
        self.names[ref] = (f"{self.name} CSPS {self.added}", f"{self.name}-d{self.rng.randrange(DISTRICTS)}")

    def step(self) -> WriteReport:
        refs = sorted(self.names)
        for ref in self.rng.sample(refs, max(1, len(refs) // 10)):  # renamed
            name, district = self.names[ref]
            self.names[ref] = (f"{name.split(' (')[0]} ({self.loads + 1})", district)
        for ref in self.rng.sample(refs, max(1, len(refs) // 20)):  # moved
            self.names[ref] = (self.names[ref][0], f"{self.name}-d{self.rng.randrange(DISTRICTS)}")
        for ref in self.rng.sample(refs, max(1, len(refs) // 20)):  # deleted (left out of the file)
            del self.names[ref]
        for _ in range(max(1, len(refs) // 20)):  # added
            self._add()
        return self.load()

    def load(self) -> WriteReport:
        report = import_units(self.engine, data_source=self.name, version=1, types=TYPES, records=self._records,
                              delete_missing=True, account=ACCOUNT, fmt="test")
        self.loads += 1
        self.versions += report.inserted + report.updated + report.deleted
        return report

    def _records(self, conn: Connection, source_id: int) -> Iterator[UnitRecord]:
        root, districts = f"{self.name}-root", [f"{self.name}-d{i}" for i in range(DISTRICTS)]
        ids = allocate_ids(conn, source_id, [root, *districts, *self.names])
        yield UnitRecord(ids[root], self.name, "COUNTRY", "VALID", source_ref=root)
        for ref in districts:
            yield UnitRecord(ids[ref], f"{self.name} {ref}", "DISTRICT", "VALID", source_ref=ref, parent_id=ids[root])
        for position, (ref, (name, district)) in enumerate(sorted(self.names.items())):
            if self.pause_s and position == len(self.names) // 2:
                threading.Event().wait(self.pause_s)
            yield UnitRecord(ids[ref], name, "CSPS", "VALID", source_ref=ref, parent_id=ids[district])


@dataclass
class Mirror:
    """A client's copy (id -> newest version, deleted), kept by walking `_history?_since=<sync point>&_count=`
    page by page; `since` is the sync point of the last walk's first page (Bundle.meta.lastUpdated)."""

    get: Callable[[str], dict[str, Any]]
    count: int = 10
    copy: dict[str, tuple[int, bool]] = field(default_factory=dict)
    since: str | None = None
    walks: int = 0
    pages: int = 0
    entries: int = 0
    duplicated: int = 0  # entries served twice within one walk
    skipped: int = 0  # entries a walk's total announced but no page served

    def sync(self) -> None:
        url: str | None = f"/fhir/Location/_history?_count={self.count}" + (
            f"&_since={quote(self.since)}" if self.since else "")
        first: dict[str, Any] | None = None
        seen: set[tuple[str, int]] = set()
        while url:
            page = self.get(url)
            first = first or page
            self.pages += 1
            for entry in page.get("entry", []):
                rid, version = entry["fullUrl"].rsplit("/", 1)[1], int(entry["response"]["etag"][3:-1])
                self.duplicated += (rid, version) in seen
                seen.add((rid, version))
                if version > self.copy.get(rid, (0, False))[0]:
                    self.copy[rid] = (version, entry["request"]["method"] == "DELETE")
            url = next((link["url"] for link in page["link"] if link["relation"] == "next"), None)
        assert first is not None
        self.walks += 1
        self.entries += len(seen)
        self.skipped += max(0, first["total"] - len(seen))
        self.since = first["meta"]["lastUpdated"]


def play_round(operators: list[Operator], mirror: Mirror, seconds: float, settle: Callable[[], None]) -> None:
    """One round: the operators reload, each in its thread, for `seconds`, while the client syncs again and again;
    then `settle()` (until the server's sync point is past the last load: it looks once a second) and a last sync."""
    stop = time.monotonic() + seconds
    threads = [threading.Thread(target=lambda o=operator: [o.step() for _ in iter(
        lambda: time.monotonic() < stop, False)]) for operator in operators]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        mirror.sync()
    settle()
    mirror.sync()


def registry(engine: Engine) -> dict[str, tuple[int, bool]]:
    """What the database holds: each unit's current version and whether it is deleted."""
    with engine.connect() as conn:
        return {str(row.id): (row.version_id, bool(row.deleted))
                for row in conn.execute(select(org_unit.c.id, org_unit.c.version_id, org_unit.c.deleted))}


def divergence(mirror: Mirror, held: dict[str, tuple[int, bool]]) -> dict[str, int]:
    """How the copy differs from what is held: units missing, stale (an older version), or extra."""
    missing = sum(1 for rid in held if rid not in mirror.copy)
    stale = sum(1 for rid, kept in mirror.copy.items() if rid in held and kept != held[rid])
    extra = sum(1 for rid in mirror.copy if rid not in held)
    return {name: n for name, n in (("missing", missing), ("stale", stale), ("extra", extra)) if n}


@dataclass
class Paused:
    started: threading.Event
    release: threading.Event
    reports: list[WriteReport]


@contextmanager
def paused_load(engine: Engine, units: list[UnitRecord], *, data_source: str, account: str,
                version: int = 1) -> Iterator[Paused]:
    """A load of `units` (types already stored) held open after its transaction began (the writer lock taken, its
    versions stamped) until `release` is set; joined when the block ends."""
    paused = Paused(threading.Event(), threading.Event(), [])

    def records() -> Iterator[UnitRecord]:
        paused.started.set()
        paused.release.wait(30)
        yield from units

    thread = threading.Thread(target=lambda: paused.reports.append(import_units(
        engine, data_source=data_source, version=version, types=(), records=records(), account=account)))
    thread.start()
    try:
        assert paused.started.wait(30), "the load did not start"
        yield paused
    finally:
        paused.release.set()
        thread.join(60)
