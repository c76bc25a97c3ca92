"""The Bulk Data plugin's table: the export jobs, one row each, which every worker and replica of the server shares;
and its migration chain (`bulk`, recorded in alembic_version_bulk)."""
from __future__ import annotations

from pathlib import Path

from sqlalchemy import JSON, Column, DateTime, Index, Integer, MetaData, String, Table, Text

from server import Migrations

metadata = MetaData()

bulk_job = Table(
    "bulk_export_job", metadata,
    Column("id", String(64), primary_key=True),       # random: the status URL names it
    Column("subject", String, nullable=False),        # who started it (the token's subject)...
    Column("account", String, nullable=False),        # ...in which account ("*": a trusted caller)
    Column("scope", String, nullable=False),          # ...with which data scope (a digest of account and roots)
    Column("request", Text, nullable=False),          # the kick-off URL, as the manifest repeats it
    Column("parameters", JSON, nullable=False),       # types, _since, output format
    Column("transaction_time", DateTime(timezone=True), nullable=False),
    Column("status", String(16), nullable=False),     # running | done | failed
    Column("progress", String, nullable=False),       # X-Progress while it runs; the error when it failed
    Column("exported", Integer, nullable=False),      # resources written so far
    Column("manifest", JSON),                         # the files written, once done
    Column("worker", String, nullable=False),         # host:pid running it
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("heartbeat_at", DateTime(timezone=True), nullable=False),  # a running job's worker is alive
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Index("ix_bulk_export_job_expires_at", "expires_at"),
    Index("ix_bulk_export_job_status", "status"),
)

MIGRATIONS = Migrations("bulk", Path(__file__).parent / "migrations", metadata)
