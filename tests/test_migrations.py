"""Migrations build exactly the schema the models describe, on both backends."""
from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine

from server.store.migrate import current_revision, head_revision, is_current, upgrade
from server.store.models import metadata


def test_migrated_schema_matches_the_models(engine: Engine) -> None:
    assert is_current(engine) and current_revision(engine) == head_revision()
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)
    assert diff == []


def test_upgrade_is_idempotent(engine: Engine) -> None:
    upgrade(engine)
    assert is_current(engine)
