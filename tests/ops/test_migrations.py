"""Migrations: one chain per contributor (the engine's, the org-unit plugin's), each building exactly the tables
its metadata describes, on both backends; databases of before the chains upgrade in place."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import (JSON, Boolean, Column, DateTime, Engine, Integer, MetaData, column, create_engine, func, inspect,
                        select, table, text)
from sqlalchemy.exc import IntegrityError

from plugins.orgunits.tables import MIGRATIONS as ORGUNITS
from plugins.orgunits.tables import data_source, data_source_history, orgunit_setting
from plugins.orgunits.views import FIRST_ACCOUNT, PUBLISHED_FROM, SOURCE_SYSTEM
from server.errors import ConfigError
from server.extensions import load_extensions
from server.settings import parse_settings
from server.storage.db import normalize_url
from server.storage.migrate import ENGINE_MIGRATIONS, Migrations, Schema

SCHEMA = load_extensions(parse_settings({})).schema


def _everything() -> MetaData:
    combined = MetaData()
    for chain in SCHEMA.chains:
        for table in chain.metadata.tables.values():
            table.to_metadata(combined)
    return combined


def _version_tables(name: str | None) -> bool:
    return not (name or "").startswith("alembic_version")


def test_the_chains_are_the_engines_then_the_plugins() -> None:
    assert [c.name for c in SCHEMA.chains] == ["engine", "bulk", "orgunits"]  # the core plugins first
    assert SCHEMA.chain("orgunits").table == "alembic_version"  # databases of before keep their version table
    assert ENGINE_MIGRATIONS.table == "alembic_version_engine"


def _expression_index_names() -> set[str]:
    return {index.name for table in _everything().tables.values() for index in table.indexes
            if index.name and any(not isinstance(e, Column) for e in index.expressions)}


def _compared(obj: Any, name: str | None, kind: str, reflected: bool, _: Any) -> bool:
    """Alembic compares an index on an expression by its text, which PostgreSQL rewrites (casts, parentheses):
    those are checked by name below, and by the query-plan tests that read them."""
    return not (kind == "index" and name in _expression_index_names())


def test_migrated_schema_matches_the_models(engine: Engine) -> None:
    assert SCHEMA.is_current(engine)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, "include_name": lambda name, kind, _:
                                                         kind != "table" or _version_tables(name),
                                                         "include_object": _compared})
        assert compare_metadata(context, _everything()) == []


def test_every_index_on_an_expression_is_migrated(engine: Engine) -> None:
    expected = _expression_index_names()
    assert expected >= {"ix_org_unit_source_ref_lower", "ix_org_unit_name_text_lower"}
    listed = ("SELECT indexname FROM pg_indexes" if engine.dialect.name == "postgresql"
              else "SELECT name FROM sqlite_master WHERE type = 'index'")
    with engine.connect() as conn:
        assert expected <= {name for (name,) in conn.execute(text(listed))}


def test_upgrade_is_idempotent(engine: Engine) -> None:
    SCHEMA.upgrade(engine)
    assert SCHEMA.is_current(engine)


def test_a_database_of_before_the_chains_upgrades_in_place(database_url: str) -> None:
    """A database that only the org-unit chain (then the only one) migrated, with data, gains the engine's chain
    and keeps everything."""
    engine = create_engine(normalize_url(database_url))
    try:
        Schema((ORGUNITS,)).upgrade(engine)  # as the server of before left it: render_state made by 0004
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO render_state (resource_type, fingerprint) VALUES ('Location', 'f')"))
            conn.execute(text("INSERT INTO data_source (name, slug) VALUES ('Iaso', 'iaso')"))
        assert not SCHEMA.is_current(engine)
        SCHEMA.upgrade(engine)
        assert SCHEMA.is_current(engine)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT fingerprint FROM render_state")).scalar_one() == "f"
            assert conn.execute(text("SELECT slug FROM data_source")).scalar_one() == "iaso"
    finally:
        engine.dispose()


def test_accounts_migration_keeps_existing_data_in_the_default_account(database_url: str) -> None:
    engine = create_engine(normalize_url(database_url))
    try:
        SCHEMA.upgrade(engine, {"orgunits": "0004"})
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO data_source (name, slug) VALUES ('Iaso', 'iaso')"))
            conn.execute(text("INSERT INTO org_unit_type (name, short_name, category) VALUES ('CSPS', 'CSPS', 'HF')"))
        SCHEMA.upgrade(engine)
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
            ORGUNITS.run(conn, "0004", downgrade=True)
        with engine.connect() as conn:
            assert ORGUNITS.current(conn) == "0004"
    finally:
        engine.dispose()


def test_names_are_normalized_again_by_0006(database_url: str) -> None:
    engine = create_engine(normalize_url(database_url))
    try:
        SCHEMA.upgrade(engine, {"orgunits": "0005"})
        with engine.begin() as conn:  # as the former normalization stored them
            conn.execute(text("INSERT INTO data_source (name, slug, name_norm) VALUES ('ℌauts', 'h', 'Hauts'), "
                              "('Ségou', 's', 'segou')"))
        SCHEMA.upgrade(engine)
        with engine.connect() as conn:
            assert dict(conn.execute(text("SELECT name, name_norm FROM data_source")).all()) == \
                {"ℌauts": "hauts", "Ségou": "segou"}
    finally:
        engine.dispose()


def test_0010_gives_units_a_system_of_their_own_and_keeps_the_data_sources(database_url: str) -> None:
    """A database at 0009 with units gains org_unit.identifier_system, NULL: they keep publishing their source
    code under their data source's system (a mapping's level may name its own on the next load)."""
    engine = create_engine(normalize_url(database_url))
    try:
        SCHEMA.upgrade(engine, {"orgunits": "0009"})
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO data_source (id, name, slug, identifier_system) "
                              "VALUES (1, 'MFL', 'mfl', 'https://mfl.example.org/code')"))
            conn.execute(text("INSERT INTO source_version (id, number, data_source_id) VALUES (1, 1, 1)"))
            conn.execute(text("INSERT INTO org_unit_type (id, name, short_name, category) VALUES (1, 'F', 'f', 'HF')"))
            conn.execute(text("INSERT INTO org_unit (id, name, source_ref, validation_status, org_unit_type_id, "
                              "source_version_id, created_at, updated_at, version_id, deleted) VALUES "
                              "(1, 'Clinic', '10231', 'VALID', 1, 1, '2026-01-01', '2026-01-01', 1, false)"))
        SCHEMA.upgrade(engine)
        with engine.connect() as conn:
            assert ORGUNITS.current(conn) >= "0010"
            assert conn.execute(text("SELECT identifier_system FROM org_unit")).one() == (None,)
            assert conn.execute(select(SOURCE_SYSTEM).select_from(PUBLISHED_FROM)).scalar_one() == \
                "https://mfl.example.org/code"
    finally:
        engine.dispose()


def test_0011_gives_each_data_source_its_first_organization_version(database_url: str) -> None:
    """A database at 0010: each data source gets version 1 of its Organization, what it publishes then (the source
    version served: the one chosen, else the newest) at its updated_at; a removed one a deletion at its removed_at."""
    engine = create_engine(normalize_url(database_url))
    try:
        SCHEMA.upgrade(engine, {"orgunits": "0010"})
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO data_source (id, name, slug, updated_at, removed_at) VALUES "
                              "(1, 'Iaso', 'iaso', '2026-01-01 00:00:00+00', NULL), (2, 'MFL', 'mfl', NULL, NULL), "
                              "(3, 'Old', 'old', '2026-01-01 00:00:00+00', '2026-02-01 00:00:00+00')"))
            conn.execute(text("INSERT INTO source_version (id, number, data_source_id) VALUES (1, 1, 1), (2, 2, 1), "
                              "(3, 7, 3)"))
            conn.execute(text("UPDATE data_source SET default_version_id = 1 WHERE id = 1"))
        SCHEMA.upgrade(engine)
        with engine.connect() as conn:
            rows = conn.execute(select(data_source_history).order_by(data_source_history.c.data_source_id)).all()
            current = dict(conn.execute(select(data_source.c.id, data_source.c.updated_at)).all())
            versions = set(conn.execute(select(data_source.c.version_id)).scalars())
    finally:
        engine.dispose()
    first = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert [(r.data_source_id, r.version_id, r.deleted) for r in rows] == [(1, 1, False), (2, 1, False), (3, 1, True)]
    assert rows[0].snapshot == {"id": 1, "name": "Iaso", "slug": "iaso", "current_version": 1, "version_id": 1,
                                "updated_at": first.isoformat()}
    assert rows[1].snapshot["current_version"] is None and rows[2].snapshot is None
    assert [rows[0].updated_at, rows[2].updated_at] == [first, datetime(2026, 2, 1, tzinfo=timezone.utc)]
    assert current == {r.data_source_id: r.updated_at for r in rows} and versions == {1}  # the current version's


@pytest.mark.parametrize("sources, recorded", [
    pytest.param("(1, 'Demo', 'demo', 'default', NULL), (2, 'DHIS2', 'dhis2', 'sl-sample', NULL)", "default",
                 id="the-oldest-data-source"),
    pytest.param("(1, 'Demo', 'demo', 'default', '2026-02-01 00:00:00+00'), (2, 'DHIS2', 'dhis2', 'sl-sample', NULL)",
                 "default", id="a-removed-one-counts"),
    pytest.param("(2, 'DHIS2', 'dhis2', 'sl-sample', NULL), (7, 'Demo', 'demo', 'default', NULL)", "sl-sample",
                 id="by-id-not-by-name"),
    pytest.param(None, None, id="no-data-source"),
])
def test_0012_records_the_account_tokens_without_the_claim_see(database_url: str, sources: str | None,
                                                                recorded: str | None) -> None:
    """A database at 0011: the account a token without an account claim saw, derived then from the oldest data source
    (removed ones included), is recorded as it was, so that a purge of its rows can no longer change it."""
    engine = create_engine(normalize_url(database_url))
    try:
        SCHEMA.upgrade(engine, {"orgunits": "0011"})
        if sources is not None:
            with engine.begin() as conn:
                conn.execute(text(f"INSERT INTO data_source (id, name, slug, account, removed_at) VALUES {sources}"))
        SCHEMA.upgrade(engine)
        with engine.connect() as conn:
            assert conn.execute(FIRST_ACCOUNT).scalar() == recorded
            assert conn.execute(select(func.count()).select_from(orgunit_setting)).scalar_one() == \
                (recorded is not None)
        with engine.begin() as conn:
            ORGUNITS.run(conn, "0011", downgrade=True)
        with engine.connect() as conn:
            assert ORGUNITS.current(conn) == "0011" and "orgunit_setting" not in inspect(conn).get_table_names()
    finally:
        engine.dispose()


# org_unit_history as 0012 left it (no scope columns)
_HISTORY_0012 = table("org_unit_history", column("org_unit_id", Integer), column("version_id", Integer),
                      column("updated_at", DateTime(timezone=True)), column("deleted", Boolean),
                      column("snapshot", JSON))


def test_0013_scopes_each_kept_version_by_what_it_published(database_url: str) -> None:
    """A database at 0012: each kept version of a unit gets the source version and the place it published (issue
    36: a caller sees a version only as it could while it was current). Unit 5 was under unit 7 in source version
    1, deleted, then published under unit 1 in version 2 (its current version); unit 1 was never moved."""
    engine = create_engine(normalize_url(database_url))
    snap = {"data_source_id": 1, "source_version": 1, "parent_id": 7}
    try:
        SCHEMA.upgrade(engine, {"orgunits": "0012"})
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO data_source (id, name, slug) VALUES (1, 'Iaso', 'iaso')"))
            conn.execute(text("INSERT INTO source_version (id, number, data_source_id) VALUES (11, 1, 1), (12, 2, 1)"))
            conn.execute(text("INSERT INTO org_unit_type (id, name, short_name, category) VALUES (1, 'X', 'X', 'X')"))
            conn.execute(text(
                "INSERT INTO org_unit (id, name, validation_status, org_unit_type_id, parent_id, source_version_id, "
                "created_at, updated_at, version_id, deleted, path) VALUES "
                "(1, 'Root', 'VALID', 1, NULL, 12, '2026-01-01', '2026-01-01', 1, false, '/1/'), "
                "(7, 'Old parent', 'VALID', 1, NULL, 11, '2026-01-01', '2026-01-01', 1, false, '/7/'), "
                "(5, 'Unit', 'VALID', 1, 1, 12, '2026-01-01', '2026-03-01', 3, false, '/1/5/')"))
            conn.execute(_HISTORY_0012.insert(), [
                {"org_unit_id": 5, "version_id": 1, "updated_at": datetime(2026, 1, 1, tzinfo=timezone.utc),
                 "deleted": False, "snapshot": snap},
                {"org_unit_id": 5, "version_id": 2, "updated_at": datetime(2026, 2, 1, tzinfo=timezone.utc),
                 "deleted": True, "snapshot": None},
                {"org_unit_id": 5, "version_id": 3, "updated_at": datetime(2026, 3, 1, tzinfo=timezone.utc),
                 "deleted": False, "snapshot": {**snap, "source_version": 2, "parent_id": 1}},
                {"org_unit_id": 1, "version_id": 1, "updated_at": datetime(2026, 1, 1, tzinfo=timezone.utc),
                 "deleted": False, "snapshot": {"data_source_id": 1, "source_version": 2, "parent_id": None}}])
        SCHEMA.upgrade(engine)
        with engine.connect() as conn:
            found = conn.execute(text("SELECT org_unit_id, version_id, source_version_id, path FROM org_unit_history "
                                      "ORDER BY org_unit_id, version_id")).all()
        with engine.begin() as conn:
            ORGUNITS.run(conn, "0012", downgrade=True)
    finally:
        engine.dispose()
    assert [tuple(r) for r in found] == [(1, 1, 12, "/1/"), (5, 1, 11, "/7/5/"), (5, 2, 11, "/7/5/"),
                                         (5, 3, 12, "/1/5/")]



def test_0014_withdraws_without_a_version_the_units_of_versions_not_served(database_url: str) -> None:
    """A database at 0013: source version 2 is the newest (served); a live unit of version 1 was never published, so it
    becomes withdrawn (never published: not deleted, no new version); a deleted one stays deleted by its source."""
    engine = create_engine(normalize_url(database_url))
    try:
        SCHEMA.upgrade(engine, {"orgunits": "0013"})
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO data_source (id, name, slug) VALUES (1, 'Iaso', 'iaso')"))
            conn.execute(text("INSERT INTO source_version (id, number, data_source_id) VALUES (11, 1, 1), (12, 2, 1)"))
            conn.execute(text("INSERT INTO org_unit_type (id, name, short_name, category) VALUES (1, 'X', 'X', 'X')"))
            conn.execute(text(
                "INSERT INTO org_unit (id, name, validation_status, org_unit_type_id, source_version_id, created_at, "
                "updated_at, version_id, deleted) VALUES "
                "(1, 'Old', 'VALID', 1, 11, '2026-01-01', '2026-01-01', 1, false), "
                "(2, 'Gone', 'VALID', 1, 11, '2026-01-01', '2026-01-02', 2, true), "
                "(3, 'New', 'VALID', 1, 12, '2026-01-01', '2026-01-01', 1, false)"))
        SCHEMA.upgrade(engine)
        with engine.connect() as conn:
            found = [tuple(row) for row in conn.execute(text(
                "SELECT id, version_id, deleted, withdrawn FROM org_unit ORDER BY id"))]
        with engine.begin() as conn:
            ORGUNITS.run(conn, "0013", downgrade=True)
    finally:
        engine.dispose()
    assert found == [(1, 1, False, True), (2, 2, True, False), (3, 1, False, False)]


def test_0015_gives_each_data_source_its_own_types(database_url: str) -> None:
    """A database at 0014: type 1 is used by the units of data sources 1 and 2 (one account), type 2 by none. Type 1
    stays data source 1's, a copy is data source 2's (its unit points at it: the same name, code, category and depth,
    so nothing published changes), type 2 stays its account's."""
    engine = create_engine(normalize_url(database_url))
    try:
        SCHEMA.upgrade(engine, {"orgunits": "0014"})
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO data_source (id, name, slug) VALUES (1, 'Kenya', 'kenya'), "
                              "(2, 'Partner', 'partner')"))
            conn.execute(text("INSERT INTO source_version (id, number, data_source_id) VALUES (11, 1, 1), (21, 1, 2)"))
            conn.execute(text("INSERT INTO org_unit_type (id, name, short_name, category, depth) VALUES "
                              "(1, 'Dispensary', 'dispensary', 'HF', 5), (2, 'Unused', 'unused', 'HF', 5)"))
            conn.execute(text(
                "INSERT INTO org_unit (id, name, validation_status, org_unit_type_id, source_version_id, created_at, "
                "updated_at, version_id, deleted, withdrawn) VALUES "
                "(1, 'A', 'VALID', 1, 11, '2026-01-01', '2026-01-01', 1, false, false), "
                "(2, 'B', 'VALID', 1, 21, '2026-01-01', '2026-01-01', 1, false, false)"))
        SCHEMA.upgrade(engine)
        with engine.connect() as conn:
            types = [tuple(row) for row in conn.execute(text(
                "SELECT id, short_name, category, depth, data_source_id FROM org_unit_type ORDER BY id"))]
            units = [tuple(row) for row in conn.execute(text("SELECT id, org_unit_type_id FROM org_unit ORDER BY id"))]
        with engine.begin() as conn:
            ORGUNITS.run(conn, "0014", downgrade=True)
            merged = [tuple(row) for row in conn.execute(text("SELECT id, org_unit_type_id FROM org_unit ORDER BY id"))]
    finally:
        engine.dispose()
    assert types == [(1, "dispensary", "HF", 5, 1), (2, "unused", "HF", 5, None), (3, "dispensary", "HF", 5, 2)]
    assert units == [(1, 1), (2, 3)]
    assert merged == [(1, 1), (2, 1)]


def test_0019_keeps_each_units_current_body_apart(database_url: str) -> None:
    """A database at 0018: unit 1 has two versions with bodies, unit 2 a current version without one (rendered per
    request), unit 3 is deleted. org_unit_body gets unit 1's current version and body only; going back drops it."""
    engine = create_engine(normalize_url(database_url))
    try:
        SCHEMA.upgrade(engine, {"orgunits": "0018"})
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO data_source (id, name, slug) VALUES (1, 'Kenya', 'kenya')"))
            conn.execute(text("INSERT INTO source_version (id, number, data_source_id) VALUES (11, 1, 1)"))
            conn.execute(text("INSERT INTO org_unit_type (id, name, short_name, category, depth, data_source_id) "
                              "VALUES (1, 'Dispensary', 'dispensary', 'HF', 5, 1)"))
            conn.execute(text(
                "INSERT INTO org_unit (id, name, validation_status, org_unit_type_id, source_version_id, created_at, "
                "updated_at, version_id, deleted, withdrawn) VALUES "
                "(1, 'A', 'VALID', 1, 11, '2026-01-01', '2026-01-02', 2, false, false), "
                "(2, 'B', 'VALID', 1, 11, '2026-01-01', '2026-01-01', 1, false, false), "
                "(3, 'C', 'VALID', 1, 11, '2026-01-01', '2026-01-02', 2, true, false)"))
            conn.execute(text(
                "INSERT INTO org_unit_history (org_unit_id, version_id, updated_at, deleted, body) VALUES "
                "(1, 1, '2026-01-01', false, :one), (1, 2, '2026-01-02', false, :two), "
                "(2, 1, '2026-01-01', false, NULL), (3, 1, '2026-01-01', false, :three), "
                "(3, 2, '2026-01-02', true, NULL)"), {"one": b'{"v":1}', "two": b'{"v":2}', "three": b'{"v":3}'})
        SCHEMA.upgrade(engine)
        with engine.connect() as conn:
            kept = [(rid, version, bytes(body)) for rid, version, body in conn.execute(text(
                "SELECT org_unit_id, version_id, body FROM org_unit_body ORDER BY org_unit_id"))]
        with engine.begin() as conn:
            ORGUNITS.run(conn, "0018", downgrade=True)
            gone = "org_unit_body" not in inspect(conn).get_table_names()
    finally:
        engine.dispose()
    assert kept == [(1, 2, b'{"v":2}')]
    assert gone


def test_e003_leaves_the_kept_bodies_unproven(database_url: str) -> None:
    """A database at e002: render_state gains current_fingerprint, NULL (nothing proves what made the current
    bodies already kept); a release that does not know the column claims a type by deleting its row and inserting
    one without it, which leaves it NULL again; going back drops it."""
    engine = create_engine(normalize_url(database_url))
    try:
        SCHEMA.upgrade(engine, {"engine": "e002"})
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO render_state (resource_type, fingerprint) VALUES ('Location', 'f')"))
        SCHEMA.upgrade(engine)
        with engine.begin() as conn:
            migrated = conn.execute(text("SELECT fingerprint, current_fingerprint FROM render_state")).one()
            conn.execute(text("UPDATE render_state SET current_fingerprint = 'f'"))
            conn.execute(text("DELETE FROM render_state WHERE resource_type = 'Location'"))  # an older release's claim
            conn.execute(text("INSERT INTO render_state (resource_type, fingerprint) VALUES ('Location', 'g')"))
            claimed = conn.execute(text("SELECT fingerprint, current_fingerprint FROM render_state")).one()
        with engine.begin() as conn:
            ENGINE_MIGRATIONS.run(conn, "e002", downgrade=True)
            columns = {c["name"] for c in inspect(conn).get_columns("render_state")}
    finally:
        engine.dispose()
    assert tuple(migrated) == ("f", None)
    assert tuple(claimed) == ("g", None)
    assert columns == {"resource_type", "fingerprint"}


def test_an_upgrade_refuses_a_chain_a_newer_release_migrated(database_url: str) -> None:
    """A chain at a revision this server does not know: nothing is run (alembic would fail half way, after the
    chains before it), and the error says which chain and what to do."""
    engine = create_engine(normalize_url(database_url))
    try:
        SCHEMA.upgrade(engine, {"engine": "e002"})
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
        with pytest.raises(ConfigError, match=r"chain orgunits .* is at 0099, a revision this server does not know "
                                              r".*run the release that migrated it"):
            SCHEMA.upgrade(engine)
        with engine.connect() as conn:
            assert SCHEMA.current(conn)["engine"] == "e002"  # the engine's chain, first, was not run either
    finally:
        engine.dispose()


@pytest.mark.parametrize("downgraded, ran", [
    pytest.param(None, [], id="every-chain-at-its-head"),
    pytest.param("0018", ["orgunits"], id="one-chain-behind"),
])
def test_an_upgrade_runs_only_the_chains_behind(database_url: str, monkeypatch: pytest.MonkeyPatch,
                                                downgraded: str | None, ran: list[str]) -> None:
    engine = create_engine(normalize_url(database_url))
    try:
        SCHEMA.upgrade(engine)
        if downgraded is not None:
            with engine.begin() as conn:
                ORGUNITS.run(conn, downgraded, downgrade=True)
        run = Migrations.run
        seen: list[str] = []

        def recorded(self: Migrations, conn: Any, destination: str, *, downgrade: bool = False) -> None:
            seen.append(self.name)
            run(self, conn, destination, downgrade=downgrade)

        monkeypatch.setattr(Migrations, "run", recorded)
        SCHEMA.upgrade(engine)
        assert seen == ran
        assert SCHEMA.is_current(engine)
    finally:
        engine.dispose()


def test_a_chain_reads_its_revisions_once() -> None:
    """A command asks for a chain's heads and known revisions several times: each read every revision file."""
    assert ORGUNITS.script() is ORGUNITS.script()
    again = Migrations(ORGUNITS.name, ORGUNITS.directory, ORGUNITS.metadata, ORGUNITS.version_table)
    assert again.script() is not ORGUNITS.script() and again.head() == ORGUNITS.head()
