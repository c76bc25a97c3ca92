"""The reader protocol of Bulk Data (issue 42): everything an export asks of the engine, each answer decided where
every interaction's is. `server.bulk` imports `server` (the public surface), its own modules and this module only
(the layout test holds it); it reads no engine, search or storage module itself.

An export reads each provider's resources as they were at transactionTime T, streamed (never held), and the ones
deleted since `_since`: the queries are the search layer's (server.search.as_of, its rows' conditions from
server.search.seen), built here for a caller (its visibility: server.engine.visibility) and streamed here on one
read-only snapshot within the job's time budget.

Besides the reader, the names its contract hands Bulk: the server context a hook or an operation call gives a
plugin, the registry, the caller and a `_typeFilter`'s parsed search (opaque to Bulk: given back here), `_since`
parsed as `_history` parses it, the lock of its job rows (`exclusive`), and the storage errors a read or a job's
write raises."""
from __future__ import annotations

from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl

from sqlalchemy import ColumnElement, Connection, Engine, Select, Table

from server.declare.provider import ResourceProvider
from server.declare.registry import Registry
from server.declare.rendered import json_bytes
from server.engine.caller import Caller
from server.engine.context import ServerContext
from server.engine.drivers import in_thread
from server.engine.parsing import parse_selection
from server.engine.searches import search_condition
from server.engine.visibility import shown_gone, visibility
from server.errors import StatementTimedOut, StorageError
from server.params.dates import parse_since
from server.search.as_of import AsOf, changed, current, unchanged
from server.search.cost import search_cost
from server.search.request import SearchRequest
from server.settings import Settings
from server.storage.backend import backend_of
from server.storage.db import create_db_engine
from server.storage.writes import complete_through

__all__ = ["AsOf", "Caller", "ExportReader", "Exporter", "Registry", "SearchRequest", "ServerContext",
           "StatementTimedOut", "StorageError", "deletions", "exclusive", "exported_types", "parse_since",
           "resources"]

BATCH = 2000  # rows fetched at a time


def exported_types(registry: Registry) -> list[str]:
    """The types an export writes: every table-backed type, in the registry's order (static canonical resources
    are read and searched, not exported)."""
    return [p.resource_type for p in registry.table_backed]


@dataclass(frozen=True)
class Exporter:
    """Who asks for an export, as far as it decides what they read: a job is theirs to poll and download only."""

    subject: str | None  # the token's subject; None: a trusted in-process caller
    account: str | None  # the account the caller sees; None: every account (a trusted caller)
    scope: tuple[Hashable, ...]  # what else narrows it: the subtree roots, every account, the SMART scopes


@dataclass(frozen=True)
class ExportReader:
    """What Bulk Data reads of one server (its context, as `OperationCall.server` and the `stop_worker` hook give
    it)."""

    _server: ServerContext  # the engine behind the protocol: Bulk asks the methods, never the context

    @property
    def settings(self) -> Settings:
        return self._server.settings

    @property
    def types(self) -> list[str]:
        return exported_types(self._server.registry)

    def provider(self, resource_type: str) -> ResourceProvider:
        """An exported type's provider (KeyError for a type not served)."""
        provider = self._server.registry.providers[resource_type]
        assert isinstance(provider, ResourceProvider)  # exported: table-backed
        return provider

    def exporter(self, caller: Caller) -> Exporter:
        """Who may export: the account the caller's scope sees, checked as for any interaction (Forbidden, 403, for
        an account it may not see), with what else decides what it reads."""
        with self._server.db.connect() as conn:
            account = self._server.scoper.account(conn, caller.scope)
        principal = caller.principal
        smart = tuple(sorted(principal.scopes.names())) if principal and principal.scopes is not None else None
        return Exporter(principal.subject if principal else None, account,
                        (caller.scope.roots, caller.scope.all_accounts, smart))

    def type_filter(self, resource_type: str, query: str) -> SearchRequest:
        """A `_typeFilter`'s `query` parsed strictly as `[type]?query` is (InvalidRequest, 400: an unknown
        parameter, a bad value, a result parameter, or no criterion at all)."""
        return parse_selection(self._server, self.provider(resource_type), query, "the filter")

    def condition(self, caller: Caller, search: SearchRequest) -> ColumnElement[bool]:
        """What a `_typeFilter`'s search matches on its type's rows, compiled as `[type]?query` is for `caller`
        (its look-ups, chains and `_has` among what the caller sees; InvalidRequest for one the server cannot
        apply), without the caller's scope on the rows, which `as_of` adds on the versions an export reads."""
        return in_thread(self._server, search_condition(self._server, caller, self.provider(search.resource_type),
                                                       search))

    @staticmethod
    def cost(query: str) -> int:
        """The estimated cost of `[type]?query` as a search (server.search.cost: what the costly-search gate
        compares with server.costly_search_cost)."""
        return search_cost(parse_qsl(query, keep_blank_values=True))

    def transaction_time(self, conn: Connection) -> datetime:
        """The consistent instant T of an export started now: the sync point of the snapshot whose partitions it
        reads (the one that bounds _history), never a fresher instant, as the last instant it is complete through
        (every version stamped at or before it is committed; a write still open stamps later:
        server.storage.writes)."""
        return complete_through(self._server.freshness.snapshot(conn).synced)

    def engine(self, *, bounded: bool = False) -> Engine:
        """A new engine on the primary database (the jobs are written there), whose owner disposes of it: without a
        statement timeout (an export reads for long, within `snapshot`'s budget), or `bounded` as a request's
        waits are (a silent database: StorageError). Its errors are the storage errors of server.errors."""
        return create_db_engine(self.settings, writing=True, bounded=bounded)

    @staticmethod
    @contextmanager
    def snapshot(engine: Engine, seconds: float) -> Iterator[Connection]:
        """A connection of `engine` reading one snapshot, read-only, until the block ends: every statement inside
        sees the same commits, and all of them finish within `seconds` from now, else StatementTimedOut."""
        with engine.connect() as outer, backend_of(outer).read_only(outer) as snapshot, \
                backend_of(outer).within(snapshot, seconds) as conn:
            yield conn

    def as_of(self, conn: Connection, provider: ResourceProvider, caller: Caller, at: datetime,
              since: datetime | None, matching: ColumnElement[bool] | None) -> AsOf:
        """What `caller` reads of `provider` at `at` (T) on the snapshot `conn`: its visibility (SMART scopes, then
        its access scope), the versions it sees and is shown as gone since `since`, whether the stored bodies may
        be spliced, and `matching` (`condition`'s, OR-ed: the type's `_typeFilter`)."""
        vis = visibility(self._server, conn, provider, caller)
        return AsOf(at, since, vis.clause, self._server.freshness.snapshot(conn).splices(provider), matching,
                    vis.versions, shown_gone(provider, vis, since))


@contextmanager
def exclusive(conn: Connection, key: int, table: Table, wait_s: float) -> Iterator[Connection]:
    """A transaction on `conn` holding the writers' lock `key` until it ends (one at a time across workers and
    replicas: PostgreSQL's advisory lock; SQLite's write lock, taken by a write of `table` that changes nothing,
    waited for `wait_s` at most, then StorageBusy)."""
    backend = backend_of(conn)
    with backend.waiting_at_most(conn, wait_s), conn.begin():
        backend.exclusive(conn, key, table)
        yield conn


def encode(resource: dict[str, Any]) -> bytes:
    """A resource's bytes exactly as a read answers them in JSON."""
    return json_bytes(resource)


def _stream(conn: Connection, query: Select[Any]) -> Iterator[list[Any]]:
    result = conn.execution_options(stream_results=True, yield_per=BATCH).execute(query)
    try:
        yield from result.partitions()
    finally:
        result.close()


def resources(conn: Connection, provider: ResourceProvider, view: AsOf) -> Iterator[list[bytes]]:
    """Batches of the bytes of the provider's resources as `view` (ExportReader.as_of) reads them on `conn`
    (ExportReader.snapshot), one resource each."""
    if provider.versioning is None:
        for rows in _stream(conn, current(provider, view)):
            yield [encode(provider.to_resource(row._mapping)) for row in rows]
        return
    to_resource = provider.version_resource  # a version's snapshot (JSON text decoded)
    queries = [unchanged(provider, view), changed(provider, view)]
    if view.bodies and backend_of(conn).copies_binary:  # most bodies by COPY, in binary: no hex, no parsing
        yield from copied(conn, unchanged(provider, view, stored=True))
        queries[0] = unchanged(provider, view, stored=False)
    for query in queries:
        for rows in _stream(conn, query):
            yield [bytes(body) if body is not None else encode(to_resource(snapshot)) for body, snapshot in rows]


HEADER = 19  # PGCOPY signature, flags, header extension length
FIELD = 6  # a row's field count (int16) and its one field's length (int32)


def copied(conn: Connection, query: Select[Any]) -> Iterator[list[bytes]]:
    """The one bytea column of `query`, read by PostgreSQL's binary COPY (each message one row), in batches."""
    sql = str(query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    driver = conn.connection.driver_connection
    assert driver is not None
    batch: list[bytes] = []
    with driver.cursor() as cursor, cursor.copy(f"COPY ({sql}) TO STDOUT (FORMAT binary)") as copy:
        first = True
        for message in copy:
            row = memoryview(message)
            if first:
                row, first = row[HEADER:], False
            if len(row) > FIELD:  # the trailer (-1) is 2 bytes
                batch.append(bytes(row[FIELD:]))
                if len(batch) >= BATCH:
                    yield batch
                    batch = []
    if batch:
        yield batch


def deletions(conn: Connection, provider: ResourceProvider, view: AsOf) -> Iterator[list[str]]:
    """Batches of the ids of the resources deleted after `_since` and at or before T (versioned providers only)."""
    if provider.versioning is None or view.since is None:
        return
    for query in (unchanged(provider, view, deleted=True), changed(provider, view, deleted=True)):
        for rows in _stream(conn, query):
            yield [str(row[0]) for row in rows]
