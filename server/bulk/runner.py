"""One export job, run in a thread of the worker that received its kick-off: write each type's files as they were
at transactionTime (the sync point: every version stamped at or before it is committed), then the manifest (or
the failure) into the job's row."""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy import ColumnElement, Engine

from server import ResourceProvider, instant
from server.bulk.files import NdjsonFiles, Written, job_directory, remove_job
from server.bulk.jobs import Job, JobStore
from server.bulk.parameters import ExportRequest
from server.engine.export_reader import Caller, ExportReader, StatementTimedOut, StorageError, deletions, resources

log = logging.getLogger("orgunit_fhir")
HEARTBEAT_S = 1.0


@dataclass(frozen=True)
class Plan:
    """What a job exports, decided at the kick-off."""

    job: Job
    caller: Caller
    request: ExportRequest
    # each filtered type's condition (its `_typeFilter` searches OR-ed), compiled at the kick-off
    filters: Mapping[str, ColumnElement[bool]] = field(default_factory=dict)
    # its database time in all: bulk.job_timeout_seconds, or a search's (server.request_timeout_seconds) when a
    # `_typeFilter` is costly by the search's estimate (ExportReader.cost)
    budget_s: float = 600.0


def _deleted_entry(rtype: str, rid: str) -> bytes:
    """One deletion, as the Bulk Data spec lists them: a transaction Bundle whose entry's request is a DELETE."""
    return orjson.dumps({"resourceType": "Bundle", "type": "transaction", "entry": [
        {"request": {"method": "DELETE", "url": f"{rtype}/{rid}"}}]})


class Runner:
    def __init__(self, reader: ExportReader, engine: Engine, store: JobStore, plan: Plan,
                 stopping: threading.Event) -> None:
        self.reader = reader
        self.engine = engine
        self.store = store
        self.plan = plan
        self.stopping = stopping
        self.exported = 0
        self._last = 0.0
        self.deadline = time.monotonic() + plan.budget_s  # its database time, in all

    def beat(self, text: str, force: bool = False) -> None:
        if force or time.monotonic() - self._last >= HEARTBEAT_S:
            self._last = time.monotonic()
            try:
                self.store.progress(self.plan.job.id, text, self.exported)
            except StorageError:  # SQLite while a load holds the write lock: the next beat will tell
                log.debug("bulk export %s: progress not recorded", self.plan.job.id, exc_info=True)

    def run(self) -> None:
        job = self.plan.job
        try:
            manifest = self._export()
        except StatementTimedOut:  # its budget: a narrower export (fewer types, a _typeFilter, _since) may finish
            log.warning("bulk export %s stopped: longer than its time budget (%g s)", job.id, self.plan.budget_s)
            remove_job(self.reader.settings, job.id)
            self.store.fail(job.id, f"the export took longer than the server allows ({self.plan.budget_s:g} s; "
                                    f"a costly _typeFilter has a search's time); narrow it and start it again")
            return
        except Exception as exc:  # the job fails; the server goes on
            log.exception("bulk export %s failed", job.id)
            reason = "the server stopped while the export ran" if self.stopping.is_set() else \
                f"the export failed ({type(exc).__name__})"
            remove_job(self.reader.settings, job.id)  # a partial file serves no one and may fill the disk
            self.store.fail(job.id, reason)
            return
        self.store.finish(job.id, manifest, self.exported)

    def _check(self) -> None:
        if self.stopping.is_set():
            raise RuntimeError("the server is stopping")

    def _export(self) -> dict[str, Any]:
        plan, settings = self.plan, self.reader.settings
        where = job_directory(settings, plan.job.id)
        errors = NdjsonFiles(where, "OperationOutcome", settings.bulk.file_resources)
        output: list[Written] = []
        deleted: list[Written] = []
        for rtype in plan.request.types:
            out, gone = self._export_type(self.reader.provider(rtype), where)
            output += out
            deleted += gone
        return {"output": [self._entry(w) for w in output], "deleted": [self._entry(w) for w in deleted],
                "error": [self._entry(w) for w in errors.close()]}

    @staticmethod
    def _entry(written: Written) -> dict[str, Any]:
        return {"type": written.type, "file": written.name, "count": written.count}

    def _export_type(self, provider: ResourceProvider, where: Any) -> tuple[list[Written], list[Written]]:
        plan, settings = self.plan, self.reader.settings
        rtype = provider.resource_type
        files = NdjsonFiles(where, rtype, settings.bulk.file_resources)
        gone = NdjsonFiles(where, "Bundle", settings.bulk.file_resources, kind=f"deleted{rtype.lower()}")
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise StatementTimedOut("the export's time budget is spent")
        # one snapshot for every read of the type: a write committed between two of them (the resources unchanged
        # since T, then those changed since) would put a resource in both; all of them within the job's budget
        with self.reader.snapshot(self.engine, left) as conn:
            view = self.reader.as_of(conn, provider, plan.caller, plan.job.transaction_time, plan.request.since,
                                     plan.filters.get(rtype))
            for batch in resources(conn, provider, view):
                self._check()
                files.write(batch)
                self.exported += len(batch)
                self.beat(f"{rtype}: {files.total} exported ({self.exported} in all)")
            for ids in deletions(conn, provider, view):
                self._check()
                gone.write([_deleted_entry(rtype, rid) for rid in ids])
        self.beat(f"{rtype}: {files.total} exported ({self.exported} in all)", force=True)
        return files.close(), gone.close()


def manifest(job: Job, file_url: Callable[[str], str], entries: dict[str, Sequence[dict[str, Any]]]) -> dict[str, Any]:
    """The completion manifest: each file's absolute URL, its type and count."""
    def listed(kind: str) -> list[dict[str, Any]]:
        return [{"type": e["type"], "url": file_url(e["file"]), "count": e["count"]} for e in entries.get(kind, ())]

    return {"transactionTime": instant(job.transaction_time), "request": job.request, "requiresAccessToken": True,
            "output": listed("output"), "deleted": listed("deleted"), "error": listed("error")}
