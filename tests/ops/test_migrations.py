"""Migrations build exactly the schema the models describe, on both backends."""
from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine

from server.storage.migrate import current_revision, head_revision, is_current, upgrade
from plugins.orgunits.tables import metadata


def test_migrated_schema_matches_the_models(engine: Engine) -> None:
    assert is_current(engine) and current_revision(engine) == head_revision()
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)
    assert diff == []


def test_upgrade_is_idempotent(engine: Engine) -> None:
    upgrade(engine)
    assert is_current(engine)


def test_accounts_migration_keeps_existing_data_in_the_default_account(database_url: str) -> None:
    import pytest
    from alembic import command
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import IntegrityError

    from server.storage.db import normalize_url
    from server.storage.migrate import _config

    engine = create_engine(normalize_url(database_url))
    try:
        upgrade(engine, "0004")
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO data_source (name, slug) VALUES ('Iaso', 'iaso')"))
            conn.execute(text("INSERT INTO org_unit_type (name, short_name, category) VALUES ('CSPS', 'CSPS', 'HF')"))
        upgrade(engine)
        with engine.begin() as conn:
            assert conn.execute(text("SELECT account, default_version_id FROM data_source")).one() == ("default", None)
            assert conn.execute(text("SELECT account FROM org_unit_type")).scalar_one() == "default"
            conn.execute(text("INSERT INTO data_source (name, slug, account) VALUES ('Iaso', 'iaso', 'other')"))
            conn.execute(text("INSERT INTO org_unit_type (name, short_name, category, account) "
                              "VALUES ('CSPS', 'CSPS', 'HF', 'other')"))
        with pytest.raises(IntegrityError), engine.begin() as conn:
            conn.execute(text("INSERT INTO data_source (name, slug, account) VALUES ('Iaso', 'iaso2', 'other')"))
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM data_source WHERE account = 'other'"))
            conn.execute(text("DELETE FROM org_unit_type WHERE account = 'other'"))
            command.downgrade(_config(conn), "0004")
        assert current_revision(engine) == "0004"
    finally:
        engine.dispose()


def test_names_are_normalized_again_by_0006(database_url: str) -> None:
    from sqlalchemy import create_engine, text

    from server.storage.db import normalize_url

    engine = create_engine(normalize_url(database_url))
    try:
        upgrade(engine, "0005")
        with engine.begin() as conn:  # as the former normalization stored them
            conn.execute(text("INSERT INTO data_source (name, slug, name_norm) VALUES ('ℌauts', 'h', 'Hauts'), "
                              "('Ségou', 's', 'segou')"))
        upgrade(engine)
        with engine.connect() as conn:
            assert dict(conn.execute(text("SELECT name, name_norm FROM data_source")).all()) == \
                {"ℌauts": "hauts", "Ségou": "segou"}
    finally:
        engine.dispose()
