"""Sync as its consumers do it, against operators changing the registry: `Operator` (one data source of an account,
reloaded from an edited file: renames, moves, retypes, deletions, additions; and the admin commands on it), the
clients (`Mirror`: `_history?_since=` with the sync point each answer gives; `BulkChain`: `$export?_since=` chained on
transactionTime, with or without `_typeFilter`), `play_round` (operators, events and clients at once), `readable` (what
a token reads: the truth a copy must equal), `compare`, `round_events` and `consumers` (the torture's commands
and clients, shared by tests/search/test_sync.py and bench/sync.py), `paused_load` (a load held open)."""
from __future__ import annotations

import http.client
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote, urlencode, urlsplit

import orjson
from sqlalchemy import Connection, Engine, select

from plugins.orgunits.admin import remove_source
from plugins.orgunits.importers.common import allocate_ids
from plugins.orgunits.importers.transaction import import_units
from plugins.orgunits.records import TypeRecord, UnitRecord, WriteReport
from plugins.orgunits.tables import data_source, org_unit, source_version
from plugins.orgunits.versions import set_default_version
from plugins.orgunits.writer import stamp, transaction

ACCOUNT = "sync"
HEALTH_CENTRE, MEDICAL_CENTRE = "CSPS", "CMA"  # the facilities' two types (a retype moves in or out of a query)
TYPES = (TypeRecord("Country", "COUNTRY", "COUNTRY", 1), TypeRecord("District", "DISTRICT", "DISTRICT", 2),
         TypeRecord("Centre de santé", HEALTH_CENTRE, "HF", 3),
         TypeRecord("Centre médical", MEDICAL_CENTRE, "HF", 3))
DISTRICTS = 5


@dataclass
class Operator:
    """One data source of `account`, reloaded from an edited file as an operator with `load --delete-missing
    --version N` would: each step renames, moves (to another district), retypes and deletes some facilities and adds
    new ones (string ids: the server allocates the numbers). Its admin commands (`remove`, `purge`, `pin`, `unpin`)
    call what the command line calls, each in its own writer transaction; `lock` is held by each load and command
    (what the operator does to its data source is one thing at a time); `paused` (its data source removed): no load
    until `resume`."""

    engine: Engine
    name: str
    facilities: int
    seed: int
    pause_s: float = 0.0  # held in the middle of each load (a longer load's window)
    account: str = ACCOUNT
    version: int = 1  # the source version loaded into (`load --version`)
    names: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # facility ref -> (name, district, type)
    loads: int = 0
    versions: int = 0
    paused: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.added = 0
        for _ in range(self.facilities):
            self._add()

    def _add(self) -> None:
        self.added += 1
        ref = f"{self.name}-f{self.added}"
        kind = MEDICAL_CENTRE if self.added % 4 == 0 else HEALTH_CENTRE
        self.names[ref] = (f"{self.name} CSPS {self.added}", f"{self.name}-d{self.rng.randrange(DISTRICTS)}", kind)

    def district(self, number: int) -> str:
        return f"{self.name}-d{number}"

    def step(self) -> WriteReport:
        refs = sorted(self.names)
        for ref in self.rng.sample(refs, max(1, len(refs) // 10)):  # renamed
            name, district, kind = self.names[ref]
            self.names[ref] = (f"{name.split(' (')[0]} ({self.loads + 1})", district, kind)
        for ref in self.rng.sample(refs, max(1, len(refs) // 20)):  # moved
            name, _, kind = self.names[ref]
            self.names[ref] = (name, self.district(self.rng.randrange(DISTRICTS)), kind)
        for ref in self.rng.sample(refs, max(1, len(refs) // 20)):  # retyped
            name, district, kind = self.names[ref]
            self.names[ref] = (name, district, HEALTH_CENTRE if kind == MEDICAL_CENTRE else MEDICAL_CENTRE)
        for ref in self.rng.sample(refs, max(1, len(refs) // 20)):  # deleted (left out of the file)
            del self.names[ref]
        for _ in range(max(1, len(refs) // 20)):  # added
            self._add()
        return self.load()

    def turn(self) -> None:
        """One step, unless paused (then a moment's wait)."""
        with self.lock:
            if not self.paused:
                self.step()
                return
        threading.Event().wait(0.05)

    def load(self) -> WriteReport:
        report = import_units(self.engine, data_source=self.name, version=self.version, types=TYPES,
                              records=self._records, delete_missing=True, account=self.account, fmt="test")
        self.loads += 1
        self.versions += report.inserted + report.updated + report.deleted
        return report

    def _records(self, conn: Connection, source_id: int) -> Iterator[UnitRecord]:
        root, districts = f"{self.name}-root", [self.district(i) for i in range(DISTRICTS)]
        ids = allocate_ids(conn, source_id, [root, *districts, *self.names])
        yield UnitRecord(ids[root], self.name, "COUNTRY", "VALID", source_ref=root)
        for ref in districts:
            yield UnitRecord(ids[ref], f"{self.name} {ref}", "DISTRICT", "VALID", source_ref=ref, parent_id=ids[root])
        for position, (ref, (name, district, kind)) in enumerate(sorted(self.names.items())):
            if self.pause_s and position == len(self.names) // 2:
                threading.Event().wait(self.pause_s)
            yield UnitRecord(ids[ref], name, kind, "VALID", source_ref=ref, parent_id=ids[district])

    # the admin commands (what `data-sources remove`, `versions set-default` and `load --version` call)

    def remove(self, *, purge: bool = False) -> int:
        """`data-sources remove NAME --account A --force [--purge]`; paused until `resume`."""
        with transaction(self.engine) as conn:
            done = remove_source(conn, self.account, self.name, force=True, now=stamp(conn), purge=purge)
        self.paused = True
        return done

    def resume(self) -> None:
        """Loads again (the data source made again when it was removed: its next load)."""
        self.paused = False

    def newest(self) -> int:
        """The highest source version number of the data source (0: none)."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(source_version.c.number).join(
                data_source, data_source.c.id == source_version.c.data_source_id).where(
                data_source.c.account == self.account, data_source.c.name == self.name)
                .order_by(source_version.c.number.desc()).limit(1)).scalar() or 0)

    def bump(self) -> None:
        """The next loads go into a new version (`load --version N+1 --delete-missing`: served once loaded)."""
        self.version = self.newest() + 1

    def pin(self, number: int) -> None:
        """`versions set-default --version N --force`; the next loads go into it (what is served)."""
        with transaction(self.engine) as conn:
            set_default_version(conn, self.name, number, account=self.account, now=stamp(conn))
        self.version = number

    def unpin(self) -> None:
        """`versions set-default --version newest`; the next loads go into a new version."""
        with transaction(self.engine) as conn:
            set_default_version(conn, self.name, None, account=self.account, now=stamp(conn))
        self.bump()

    def ids(self, refs: Sequence[str]) -> dict[str, int]:
        """The ids the data source gives the refs (its units')."""
        with self.engine.connect() as conn:
            found = conn.execute(select(org_unit.c.source_ref, org_unit.c.id)
                                 .join(source_version, source_version.c.id == org_unit.c.source_version_id)
                                 .join(data_source, data_source.c.id == source_version.c.data_source_id)
                                 .where(data_source.c.account == self.account, data_source.c.name == self.name,
                                        data_source.c.removed_at.is_(None), org_unit.c.source_ref.in_(refs)))
            return {str(ref): int(rid) for ref, rid in found}


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]  # names in lower case
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


Send = Callable[[str, Mapping[str, str]], Answer]  # path (with its query), headers -> the answer


def live(origin: str, token: str) -> Send:
    """GETs to a live server at `origin` with `token` (one connection each)."""
    where = urlsplit(origin)

    def send(path: str, headers: Mapping[str, str]) -> Answer:
        conn = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port, timeout=300)
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {token}", **headers})
            response = conn.getresponse()
            return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
        finally:
            conn.close()
    return send


def in_process(client: Any, token: str | None = None) -> Send:
    """GETs through a Starlette TestClient, with `token` (else the client's own Authorization header)."""
    def send(path: str, headers: Mapping[str, str]) -> Answer:
        got = client.get(path, headers={**({"Authorization": f"Bearer {token}"} if token else {}), **headers})
        return Answer(got.status_code, {k.lower(): v for k, v in got.headers.items()}, got.content)
    return send


@dataclass
class Api:
    """One token's reads: absolute URLs of the server taken as paths; a 429 or 503 with Retry-After (a kick-off
    while SQLite's writer holds its lock) is asked again after it, as a client must."""

    send: Send
    retries: int = 30
    waited: float = 0.0  # seconds spent honouring Retry-After

    def get(self, url: str, headers: Mapping[str, str] | None = None) -> Answer:
        parts = urlsplit(url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        for _ in range(self.retries):
            answer = self.send(path, headers or {})
            if answer.status not in (429, 503) or "retry-after" not in answer.headers:
                return answer
            delay = float(answer.headers["retry-after"])
            self.waited += delay
            threading.Event().wait(delay)
        raise AssertionError(f"GET {url}: still {answer.status} after {self.retries} tries: {answer.body[:300]!r}")

    def json(self, url: str) -> dict[str, Any]:
        answer = self.get(url)
        if answer.status != 200:
            raise AssertionError(f"GET {url}: {answer.status} {answer.body[:300]!r}")
        return answer.json()  # type: ignore[no-any-return]


Copy = dict[str, tuple[int, bool]]  # id -> (versionId, deleted)


class Client(Protocol):
    """A consumer keeping a copy of Locations: `sync()` brings it up to date the way README says; `truth` is the
    query (beside its token's scope) that its copy must equal; the counters add up over its syncs."""

    name: str
    api: Api
    truth: str
    copy: Copy
    syncs: int
    pages: int
    entries: int
    duplicated: int
    skipped: int

    def sync(self) -> None: ...


@dataclass
class Mirror:
    """A client's copy (id -> newest version, deleted), kept by walking `_history?_since=<sync point>&_count=`
    page by page; `since` is the sync point of the last walk's first page (Bundle.meta.lastUpdated)."""

    api: Api
    count: int = 10
    name: str = "history"
    truth: str = ""
    copy: Copy = field(default_factory=dict)
    since: str | None = None
    syncs: int = 0
    pages: int = 0
    entries: int = 0
    duplicated: int = 0  # entries served twice within one walk
    skipped: int = 0  # entries a walk's total announced but no page served
    # a token whose SMART scope holds a query is shown current versions only (its query is proven on the current
    # row): a version superseded after the walk's sync point, counted by its first page, leaves the later pages (its
    # successor is in the next walk); counted here, not as skipped
    current_only: bool = False
    superseded: int = 0

    @property
    def walks(self) -> int:
        return self.syncs

    def sync(self) -> None:
        url: str | None = f"/fhir/Location/_history?_count={self.count}" + (
            f"&_since={quote(self.since)}" if self.since else "")
        first: dict[str, Any] | None = None
        seen: set[tuple[str, int]] = set()
        while url:
            page = self.api.json(url)
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
        self.syncs += 1
        self.entries += len(seen)
        gap = max(0, first["total"] - len(seen))
        if self.current_only:
            self.superseded += gap
        else:
            self.skipped += gap
        self.since = first["meta"]["lastUpdated"]


ASYNC = {"Prefer": "respond-async", "Accept": "application/fhir+json"}


@dataclass
class BulkChain:
    """A client's copy kept by Bulk Data: `$export?_type=Location[&_typeFilter=...]`, then `_since=` the previous
    manifest's transactionTime; each file downloaded, its resources applied, the `deleted` Bundles' entries dropped
    (a deletion names no version: the copy forgets the id). A page is a file downloaded."""

    api: Api
    name: str = "bulk"
    type_filter: str | None = None  # a Location query (`type=CMA`)
    truth: str = ""
    copy: Copy = field(default_factory=dict)
    since: str | None = None
    syncs: int = 0
    pages: int = 0
    entries: int = 0
    duplicated: int = 0  # resources named twice within one export (in its files or its deletions)
    skipped: int = 0  # lines a file's manifest count announced but the file did not hold
    timeout_s: float = 300
    doubled: list[str] = field(default_factory=list)  # what was named twice: "id (output|deleted) @ request"

    def __post_init__(self) -> None:
        self.truth = self.truth or (self.type_filter or "")

    def sync(self) -> None:
        params = {"_type": "Location", **({"_since": self.since} if self.since else {}),
                  **({"_typeFilter": f"Location?{self.type_filter}"} if self.type_filter else {})}
        kick = self.api.get(f"/fhir/$export?{urlencode(params)}", ASYNC)
        assert kick.status == 202, f"kick-off: {kick.status} {kick.body[:300]!r}"
        status, deadline = kick.headers["content-location"], time.monotonic() + self.timeout_s
        while True:
            answer = self.api.get(status)
            if answer.status != 202:
                assert answer.status == 200, f"status: {answer.status} {answer.body[:300]!r}"
                break
            assert time.monotonic() < deadline, f"{self.name}: the export did not finish"
            threading.Event().wait(float(answer.headers["retry-after"]))
        manifest = answer.json()
        seen: dict[str, str] = {}

        def named(rid: str, where: str) -> None:
            if rid in seen:
                self.duplicated += 1
                self.doubled.append(f"{rid} ({seen[rid]}, {where}) @ {manifest['request']} {manifest['transactionTime']}")
            seen[rid] = where

        def lines(entry: dict[str, Any]) -> list[bytes]:
            got = self.api.get(entry["url"], {"Accept": "application/fhir+ndjson"})
            assert got.status == 200, f"{entry['url']}: {got.status}"
            self.pages += 1
            found = got.body.splitlines()
            self.skipped += max(0, entry["count"] - len(found))
            return found

        for entry in manifest["output"]:
            for line in lines(entry):
                resource = orjson.loads(line)
                named(resource["id"], "output")
                self.copy[resource["id"]] = (int(resource["meta"]["versionId"]), False)
        for entry in manifest.get("deleted", []):
            for line in lines(entry):
                for item in orjson.loads(line)["entry"]:
                    kind, rid = item["request"]["url"].split("/", 1)
                    if kind != "Location":
                        continue
                    named(rid, "deleted")
                    self.copy.pop(rid, None)
        self.syncs += 1
        self.entries += len(seen)
        self.since = manifest["transactionTime"]


def readable(api: Api, query: str = "", count: int = 1000) -> dict[str, int]:
    """What the token reads: every Location of `Location?<query>` (its scope applied), id -> versionId, walking the
    next links."""
    url: str | None = f"/fhir/Location?_count={count}" + (f"&{query}" if query else "")
    found: dict[str, int] = {}
    while url:
        page = api.json(url)
        for entry in page.get("entry", []):
            if entry.get("search", {}).get("mode", "match") == "match":
                resource = entry["resource"]
                assert resource["id"] not in found, f"{resource['id']} twice in the truth"
                found[resource["id"]] = int(resource["meta"]["versionId"])
        url = next((link["url"] for link in page["link"] if link["relation"] == "next"), None)
    return found


def compare(copy: Copy, truth: Mapping[str, int]) -> dict[str, int]:
    """How a copy differs from what its token reads: ids missing, stale (another version) or extra (held live
    but not readable); empty when equal."""
    held = {rid: version for rid, (version, deleted) in copy.items() if not deleted}
    missing = sum(1 for rid in truth if rid not in held)
    stale = sum(1 for rid, version in held.items() if rid in truth and version != truth[rid])
    extra = sum(1 for rid in held if rid not in truth)
    return {name: n for name, n in (("missing", missing), ("stale", stale), ("extra", extra)) if n}


class Sweeps:
    """The passes of the clients over their syncs in a round; `wait()` returns once a whole pass has begun and
    ended after the call (each client then synced since)."""

    def __init__(self) -> None:
        self.done = 0
        self.broken = False  # the clients stopped (a sync failed)
        self.condition = threading.Condition()

    def stop(self) -> None:
        with self.condition:
            self.broken = True
            self.condition.notify_all()

    def passed(self) -> None:
        with self.condition:
            self.done += 1
            self.condition.notify_all()

    def wait(self, timeout: float = 600) -> None:
        with self.condition:
            target = self.done + 2
            assert self.condition.wait_for(lambda: self.done >= target or self.broken, timeout), \
                "the clients did not sync"
            assert not self.broken, "the clients stopped"


Event = Callable[[Sweeps], None]  # an operator's command in a round (it may wait for the clients to sync)


def play_round(operators: Sequence[Operator], clients: Sequence[Client], seconds: float,
               settle: Callable[[], None], events: Sequence[Event] = ()) -> None:
    """One round: the operators reload, each in its thread, for `seconds`, and the `events` run one after the other
    in another thread, while the clients sync again and again, one after the other; then `settle()` (until the server's
    sync point is past the last write: it looks once a second) and a last sync of each."""
    stop = time.monotonic() + seconds
    sweeps = Sweeps()
    failed: list[BaseException] = []

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except BaseException as error:  # re-raised by the round
                failed.append(error)
        return run

    def reloads(operator: Operator) -> None:
        while time.monotonic() < stop and not failed:
            operator.turn()

    def commands() -> None:
        for event in events:
            event(sweeps)

    threads = [threading.Thread(target=guarded(lambda o=operator: reloads(o))) for operator in operators]
    threads.append(threading.Thread(target=guarded(commands)))
    for thread in threads:
        thread.start()
    try:
        while any(thread.is_alive() for thread in threads):
            for client in clients:
                client.sync()
            sweeps.passed()
    except BaseException:
        sweeps.stop()
        raise
    finally:
        for thread in threads:
            thread.join(600)
    if failed:
        raise failed[0]
    settle()
    for client in clients:
        client.sync()


def round_events(number: int, source0: Operator, source1: Operator, solo: Operator, said: list[str],
                 settle: Callable[[], None]) -> list[Event]:
    """The operators' commands of round `number`, one after the other, beside the reloads (each says what it did in
    `said`; `settle()`: until the server looks again):
    - `source0` reloaded into a new version with `--delete-missing` (even rounds: unpinned first, `versions
      set-default --version newest`), then (odd rounds) pinned to the version before, its loads then going there;
    - `solo`'s data source, its account's last, removed (odd rounds) or loaded again (even rounds);
    - `source1` removed and, once every client synced that removal (README: a purge publishes nothing), purged and
      loaded again (new ids)."""
    def versions(_: Sweeps) -> None:
        with source0.lock:
            if number % 2 == 0:
                source0.unpin()
                said.append("source0: unpinned (newest)")
            else:
                source0.bump()
            report = source0.step()
            said.append(f"source0: --version {source0.version} --delete-missing ({report.deleted} deleted)")
            if number % 2:  # the operator's loads go into the version pinned, as `versions set-default` advises
                source0.pin(source0.version - 1)
                said.append(f"source0: pinned to version {source0.version}")

    def solo_account(_: Sweeps) -> None:
        with solo.lock:
            if number % 2:
                said.append(f"solo: last data source removed ({solo.remove():,} units)")
            else:
                solo.resume()
                solo.load()
                said.append("solo: loaded again")

    def purge(sweeps: Sweeps) -> None:
        with source1.lock:
            removed = source1.remove()
        settle()
        sweeps.wait()  # every client synced the removal
        with source1.lock:
            source1.remove(purge=True)
            source1.resume()
            source1.load()
        said.append(f"source1: removed ({removed:,} units), purged, loaded again")

    return [versions, solo_account, purge]


def consumers(api: Callable[..., Api], source0: Operator, permission: str, count: int = 50) -> list[Client]:
    """The six consumers of the torture, each with its token (`api(**mint_token options)`): `history` (the account's
    `_history?_since=`), `subtree` (roots: two districts of `source0`), `query` (SMART scope `system/Location.rs?
    type=CMA`), `solo` (the second account), `bulk` (`$export?_since=` chained on transactionTime) and `bulk-filter`
    (the same with `_typeFilter=Location?type=CMA`)."""
    roots = source0.ids([source0.district(0), source0.district(1)])
    scope = f"system/Location.rs?type={MEDICAL_CENTRE} {permission}"
    return [Mirror(api(account=ACCOUNT), count, name="history"),
            Mirror(api(account=ACCOUNT, roots=[str(i) for i in roots.values()]), count, name="subtree"),
            Mirror(api(account=ACCOUNT, extra={"scope": scope}), count, name="query", current_only=True),
            Mirror(api(account="solo"), count, name="solo"),
            BulkChain(api(account=ACCOUNT), name="bulk"),
            BulkChain(api(account=ACCOUNT), name="bulk-filter", type_filter=f"type={MEDICAL_CENTRE}")]


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
