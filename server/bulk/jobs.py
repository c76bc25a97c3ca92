"""The export jobs, one row each in `bulk_export_job` on the primary database: every worker and replica of the
server finds the same jobs (their files lie in the shared `bulk.directory`)."""
from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, insert, select, update

from server import as_utc
from server.bulk.tables import bulk_job
from server.engine.export_reader import exclusive

RUNNING, DONE, FAILED = "running", "done", "failed"
STALE = timedelta(seconds=120)  # a running job whose worker has not written for this long has stopped


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class Owner:
    """Who may poll a job and download its files: the same subject, in the same account, with the same data scope
    and SMART scopes (a narrower token of the same subject reads none of the files)."""

    subject: str
    account: str
    scope: str

    @staticmethod
    def of(subject: str | None, account: str | None, *scope: Any) -> Owner:
        return Owner(subject or "", account if account is not None else "*",
                     hashlib.sha256(repr((account, *scope)).encode()).hexdigest()[:32])


@dataclass(frozen=True)
class Job:
    id: str
    owner: Owner
    request: str
    parameters: Mapping[str, Any]
    transaction_time: datetime
    status: str
    progress: str
    exported: int
    manifest: Mapping[str, Any] | None
    created_at: datetime
    heartbeat_at: datetime
    expires_at: datetime

    def stale(self, now: datetime) -> bool:
        return self.status == RUNNING and now - self.heartbeat_at > STALE


def _job(row: Any) -> Job:
    return Job(row.id, Owner(row.subject, row.account, row.scope), row.request, row.parameters,
               as_utc(row.transaction_time), row.status, row.progress, row.exported, row.manifest,
               as_utc(row.created_at), as_utc(row.heartbeat_at), as_utc(row.expires_at))


def now() -> datetime:
    return datetime.now(timezone.utc)


KICKOFF_LOCK = 0x6275_6C6B  # PostgreSQL advisory lock of the kick-offs ("bulk")


KICKOFF_WAIT_S = 2.0


def _running(conn: Connection, at: datetime, account: str | None = None) -> int:
    """Jobs running now, on any worker (those whose worker stopped are not counted); of `account` only, if named."""
    query = select(func.count()).select_from(bulk_job).where(bulk_job.c.status == RUNNING,
                                                             bulk_job.c.heartbeat_at > at - STALE)
    if account is not None:
        query = query.where(bulk_job.c.account == account)
    return int(conn.execute(query).scalar_one())


class JobStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(self, job: Job, max_running: int, per_account: int | None = None) -> str | None:
        """Record the job if fewer than `max_running` jobs run, and fewer than `per_account` of its owner's account
        (counted and inserted under one lock); else None, or the limit it met ("account", "server").
        On SQLite the insert needs the database's one write lock: while a load holds it, the kick-off waits
        KICKOFF_WAIT_S at most, then StorageBusy (503 with Retry-After, naming the writer), never the busy timeout
        of a load (issue 37 item 7)."""
        # one kick-off at a time, across workers, until the transaction ends (the backend's writers' lock)
        with self.engine.connect() as outer, exclusive(outer, KICKOFF_LOCK, bulk_job, KICKOFF_WAIT_S) as conn:
            if per_account is not None and _running(conn, job.created_at, job.owner.account) >= per_account:
                return "account"
            if _running(conn, job.created_at) >= max_running:
                return "server"
            conn.execute(insert(bulk_job).values(
                id=job.id, subject=job.owner.subject, account=job.owner.account, scope=job.owner.scope,
                request=job.request, parameters=dict(job.parameters), transaction_time=job.transaction_time,
                status=job.status, progress=job.progress, exported=job.exported, manifest=None, worker=worker_name(),
                created_at=job.created_at, heartbeat_at=job.heartbeat_at, expires_at=job.expires_at))
        return None

    def get(self, job_id: str) -> Job | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(bulk_job).where(bulk_job.c.id == job_id)).first()
        return _job(row) if row is not None else None

    def stopped(self, at: datetime) -> list[str]:
        """Jobs said to run whose worker stopped (killed): their partial files serve no one."""
        with self.engine.connect() as conn:
            return list(conn.execute(select(bulk_job.c.id).where(
                bulk_job.c.status == RUNNING, bulk_job.c.heartbeat_at <= at - STALE)).scalars())

    def _update(self, job_id: str, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(bulk_job).where(bulk_job.c.id == job_id, bulk_job.c.status == RUNNING)
                         .values(heartbeat_at=now(), **values))

    def progress(self, job_id: str, text: str, exported: int) -> None:
        self._update(job_id, progress=text[:500], exported=exported)

    def finish(self, job_id: str, manifest: Mapping[str, Any], exported: int) -> None:
        self._update(job_id, status=DONE, progress="done", manifest=dict(manifest), exported=exported)

    def fail(self, job_id: str, reason: str) -> None:
        self._update(job_id, status=FAILED, progress=reason[:500])

    def expired(self, at: datetime) -> list[str]:
        with self.engine.connect() as conn:
            return list(conn.execute(select(bulk_job.c.id).where(bulk_job.c.expires_at <= at)).scalars())

    def remove(self, job_id: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(delete(bulk_job).where(bulk_job.c.id == job_id))
