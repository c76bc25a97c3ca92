"""Kick-off, status and download: the handlers of the plugin's operations (run in the request's worker thread
once the pipeline admitted the caller), each answering a plain Answer the HTTP layer renders. The job state is in the database and the files in the shared directory, so any worker answers a poll or a
download of a job another one runs."""
from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote
from sqlalchemy import ColumnElement, Engine, or_

from server import (PRIVATE_NO_STORE, Answer, FileBody, Forbidden, InternalError, OperationCall, ResourceNotFound,
                    TooManyRequests, http_date)
from server.bulk.files import JOB_ID, job_directory, remove_job
from server.bulk.jobs import DONE, FAILED, Job, JobStore, Owner, now
from server.bulk.parameters import NDJSON, ExportRequest, naming, parse_export
from server.bulk.ranges import byte_ranges
from server.bulk.runner import Plan, Runner, manifest
from server.engine.export_reader import Caller, ExportReader

log = logging.getLogger("orgunit_fhir")
STATUS_PATH = "$export-status"
FILE_PATH = "$export-file"


class BulkService:
    """Per worker: two engines on the primary (the jobs are written there): the exports' own (no statement timeout:
    an export reads for long) and the requests' (kick-off, status, files: every wait bounded as a read's is, so a
    silent database answers 503), and the threads of the jobs this worker runs."""

    def __init__(self, reader: ExportReader) -> None:
        self.reader = reader
        self.settings = reader.settings
        self._engine: Engine | None = None
        self._requests_engine: Engine | None = None
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.stopping = threading.Event()
        self.clock: Callable[[], datetime] = now  # what a job's expiry and staleness are read against (tests move it)

    @property
    def engine(self) -> Engine:
        with self._lock:
            if self._engine is None:
                self._engine = self.reader.engine()
            return self._engine

    @property
    def requests_engine(self) -> Engine:
        with self._lock:
            if self._requests_engine is None:
                self._requests_engine = self.reader.engine(bounded=True)
            return self._requests_engine

    @property
    def store(self) -> JobStore:
        """The jobs as a request reads and writes them (bounded waits)."""
        return JobStore(self.requests_engine)

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the jobs of this worker (each is marked failed) and release the engine."""
        self.stopping.set()
        for thread in list(self._threads):
            thread.join(timeout_s)
        for engine in (self._engine, self._requests_engine):
            if engine is not None:
                engine.dispose()

    def join(self, timeout_s: float = 60.0) -> None:
        """Wait for the jobs this worker runs (tests)."""
        for thread in list(self._threads):
            thread.join(timeout_s)

    # ------------------------------------------------------------------ who asks
    def owner(self, caller: Caller) -> Owner:
        exporter = self.reader.exporter(caller)  # 403 as for any interaction
        return Owner.of(exporter.subject, exporter.account, *exporter.scope)

    def _conditions(self, caller: Caller, request: ExportRequest) -> dict[str, ColumnElement[bool]]:
        """Each filtered type's condition: its `_typeFilter` searches OR-ed, each compiled as `[type]?query` is
        for the caller (ExportReader.condition)."""
        found: dict[str, ColumnElement[bool]] = {}
        for rtype in request.types:
            compiled: list[ColumnElement[bool]] = []
            for type_filter in request.filters_of(rtype):
                with naming(type_filter.query):
                    compiled.append(self.reader.condition(caller, type_filter.search))
            if compiled:
                found[rtype] = or_(*compiled)
        return found

    def _budget_s(self, request: ExportRequest) -> float:
        """A job's database time: bulk.job_timeout_seconds; a search's (server.request_timeout_seconds) when one of
        its `_typeFilter`s is costly by the search's estimate, as the same query would be as a search."""
        server = self.settings.server
        costly = any(self.reader.cost(f.query.partition("?")[2]) >= server.costly_search_cost
                     for rtype in request.types for f in request.filters_of(rtype))
        return float(server.request_timeout_seconds if costly else self.settings.bulk.job_timeout_seconds)

    def enabled(self) -> None:
        if not self.settings.bulk.enabled:
            raise ResourceNotFound("Bulk Data $export is disabled on this server (bulk.enabled: false)")

    def _job(self, caller: Caller, job_id: str) -> Job:
        """The caller's job; 404 for an unknown job, another caller's or an expired one (the same answer)."""
        self.enabled()
        job = self.store.get(job_id) if JOB_ID.fullmatch(job_id) else None
        if job is not None and job.expires_at <= self.clock():
            self.sweep()
            job = None
        if job is None or job.owner != self.owner(caller):
            raise ResourceNotFound(f"no export job {job_id[:64]!r} (unknown, expired, or another caller's)")
        return job

    def sweep(self) -> None:
        """Remove the expired jobs and their files (any worker, at each kick-off and poll)."""
        store, at = self.store, self.clock()
        for job_id in store.expired(at):
            remove_job(self.settings, job_id)
            store.remove(job_id)
        for job_id in store.stopped(at):  # its status says it failed until it expires
            remove_job(self.settings, job_id)

    # ------------------------------------------------------------------ interactions
    def kickoff(self, call: OperationCall) -> Answer:
        """`[base]/$export` or `[base]/[type]/$export` (the type's read scope, `r`, checked by the pipeline); at the
        system level, the types the token may not read are left out, or refused (403, insufficient_scope) when
        `_type` or a `_typeFilter` names one. Each `_typeFilter` is parsed and compiled here, as `[type]?query` is
        for this caller: one the server cannot apply is a 400 naming it."""
        self.enabled()
        caller, items, level_type = call.caller, call.parameters, call.resource_type
        exportable = self.reader.types
        if level_type is not None and level_type not in exportable:
            raise ResourceNotFound(f"{level_type} is not exported (canonical resources are read and searched)")
        request = parse_export(items, call.headers.get("prefer", ""), exportable, level_type, self.reader.type_filter)
        denied = [t for t in request.types if not call.permitted(t)]
        named = any(k == "_type" for k, _ in items)
        refused = next((t for t in denied if named or request.filters_of(t)), None)
        if refused is None and denied and len(denied) == len(request.types):  # nothing left to export: say why
            refused = denied[0]
        if refused is not None:
            raise Forbidden(call.denial(refused) or f"the token may not read {refused}")
        request = replace(request, types=tuple(t for t in request.types if t not in denied))
        filters = self._conditions(caller, request)
        owner = self.owner(caller)
        self.sweep()
        started = self.clock()
        store = self.store
        bulk = self.settings.bulk
        # transactionTime (ExportReader.transaction_time): a data source loaded since the snapshot whose partitions
        # the job reads is after it, in the next export's _since, not lost between two exports
        with self.requests_engine.connect() as conn:
            at = self.reader.transaction_time(conn)
        job = Job(uuid.uuid4().hex, owner, call.url, request.to_json(), at, "running", "exporting", 0, None, started,
                  started, started + timedelta(seconds=bulk.expire_seconds))
        full = store.create(job, bulk.max_running, bulk.account_slots)
        if full == "account":
            raise TooManyRequests(f"{bulk.account_slots} exports of this account are running (bulk.max_running_per_"
                                  f"account); try again later",
                                  headers={"Retry-After": "10"})
        if full is not None:
            raise TooManyRequests(f"{bulk.max_running} exports are running; try again later",
                                  headers={"Retry-After": "10"})
        runner = Runner(self.reader, self.engine, JobStore(self.engine),
                        Plan(job, caller, request, filters, self._budget_s(request)), self.stopping)
        thread = threading.Thread(target=runner.run, name=f"bulk-{job.id[:8]}", daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()
        return Answer(202, {"Content-Location": f"{call.base}/{STATUS_PATH}/{job.id}", **PRIVATE_NO_STORE})

    def status(self, call: OperationCall) -> Answer:
        base, job = call.base, self._job(call.caller, call.segments["job"])
        if job.stale(self.clock()):  # said, not written: a poll only reads
            raise InternalError("the export failed: the worker running it stopped; start a new one")
        if job.status == FAILED:
            raise InternalError(f"the export failed: {job.progress}; start a new one")
        if job.status != DONE:
            return Answer(202, {"X-Progress": job.progress, "Retry-After": str(self.settings.bulk.poll_seconds),
                                **PRIVATE_NO_STORE})
        body = manifest(job, lambda name: f"{base}/{FILE_PATH}/{job.id}/{quote(name)}", _entries(job))
        return Answer(200, {"Expires": http_date(job.expires_at), **PRIVATE_NO_STORE}, json=body)

    def download(self, call: OperationCall) -> Answer:
        job_id, name = call.segments["job"], call.segments["name"]
        job = self._job(call.caller, job_id)
        listed = {e["file"] for kind in ("output", "deleted", "error") for e in _entries(job).get(kind, ())}
        if job.status != DONE or name not in listed:
            raise ResourceNotFound(f"export job {job_id} has no file {name[:100]!r}")
        path = job_directory(self.settings, job.id) / name
        if not path.is_file():
            raise ResourceNotFound(f"export job {job_id}: the file {name[:100]!r} was removed")
        served = byte_ranges(call.headers.get("range"), path.stat().st_size)
        return Answer(200, dict(PRIVATE_NO_STORE), file=FileBody(path, NDJSON, served))


def _entries(job: Job) -> dict[str, Any]:
    return dict(job.manifest or {})
