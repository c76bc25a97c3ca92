"""The job table is the bulk plugin's (its own chain, `bulk`, in alembic_version_bulk): a new database gets it from
b001; a database of before, whose engine chain made it at e002 (the engine's e002 is now empty), keeps it and its
jobs, the bulk chain recording it; downgrading the bulk chain removes it."""
from __future__ import annotations

from sqlalchemy import create_engine, inspect, insert, select, text

from plugins.orgunits.tables import MIGRATIONS as ORGUNITS
from server.bulk.tables import MIGRATIONS as BULK
from server.bulk.tables import bulk_job
from server.bulk.jobs import now
from server.extensions import load_extensions
from server.settings import parse_settings
from server.storage.db import normalize_url
from server.storage.migrate import ENGINE_MIGRATIONS, Schema

SCHEMA = load_extensions(parse_settings({})).schema


def _job(job_id: str) -> dict[str, object]:
    at = now()
    return {"id": job_id, "subject": "s", "account": "a", "scope": "x", "request": "r", "parameters": {},
            "transaction_time": at, "status": "done", "progress": "done", "exported": 0, "manifest": None,
            "worker": "w", "created_at": at, "heartbeat_at": at, "expires_at": at}


def test_the_chain_is_the_bulk_plugins() -> None:
    assert SCHEMA.chain("bulk") == BULK and BULK.table == "alembic_version_bulk" and BULK.head() == "b001"
    assert ENGINE_MIGRATIONS.knows("e002")  # kept, empty: databases recorded at e002 keep a known revision
    assert "bulk_export_job" not in ENGINE_MIGRATIONS.metadata.tables


def test_a_database_of_before_keeps_its_table_and_jobs(database_url: str) -> None:
    engine = create_engine(normalize_url(database_url))
    try:
        # as the server of before left it: engine at e002...
        Schema((ENGINE_MIGRATIONS, ORGUNITS)).upgrade(engine, {"engine": "e002"})
        bulk_job.metadata.create_all(engine)  # ...which had made the job table
        with engine.begin() as conn:
            conn.execute(insert(bulk_job).values(**_job("0" * 32)))
        assert not SCHEMA.is_current(engine)
        SCHEMA.upgrade(engine)
        assert SCHEMA.is_current(engine)
        with engine.connect() as conn:
            assert SCHEMA.current(conn) == {"engine": ENGINE_MIGRATIONS.head(), "bulk": "b001",
                                            "orgunits": ORGUNITS.head()}
            assert conn.execute(select(bulk_job.c.id)).scalars().all() == ["0" * 32]
    finally:
        engine.dispose()


def test_a_new_database_gets_the_table_from_the_bulk_chain_and_loses_it_with_it(database_url: str) -> None:
    engine = create_engine(normalize_url(database_url))
    try:
        SCHEMA.upgrade(engine)
        with engine.begin() as conn:
            conn.execute(insert(bulk_job).values(**_job("1" * 32)))
        with engine.begin() as conn:
            BULK.run(conn, "base", downgrade=True)
        assert not inspect(engine).has_table("bulk_export_job")
        with engine.connect() as conn:
            assert BULK.current(conn) is None and ENGINE_MIGRATIONS.current(conn) == ENGINE_MIGRATIONS.head()
            assert conn.execute(text("SELECT count(*) FROM render_state")).scalar_one() == 0
        SCHEMA.upgrade(engine)
        assert inspect(engine).has_table("bulk_export_job") and SCHEMA.is_current(engine)
    finally:
        engine.dispose()
