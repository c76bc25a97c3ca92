"""The command line of accounts and served versions: load --account, versions list | set-default."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from server.settings import load_settings
from server.storage.db import create_db_engine
from plugins.orgunits.tables import data_source, source_version
from plugins.orgunits.views import SERVED, VERSION_PARTITIONS
from tests.support.contexts import IASO_CSV
from tests.support.commands import cli, run_cli

DHIS2 = Path(__file__).parents[1] / "fixtures" / "dhis2_sierra_leone_sample.json"


@pytest.fixture
def settings_path(tmp_path: Path) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\n")
    return path


def served(settings_path: Path, database: str) -> set[tuple[str, int]]:
    engine = create_db_engine(load_settings(settings_path, database))
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(data_source.c.account, source_version.c.number)
                                .select_from(source_version.join(data_source)).where(SERVED)).all()
            assert len(conn.execute(VERSION_PARTITIONS).all()) >= len(rows)
            return {(a, n) for a, n in rows}
    finally:
        engine.dispose()


def test_accounts_and_served_versions_from_the_command_line(settings_path: Path, database_url: str) -> None:
    common = {"settings": settings_path, "database": database_url}
    run_cli("load", "iaso-csv", str(IASO_CSV), "--account", "burkina", **common)
    run_cli("load", "dhis2", str(DHIS2), "--account", "partner", "--data-source", "Iaso", "--version", "4", **common)
    assert served(settings_path, database_url) == {("burkina", 1), ("partner", 4)}
    listing = run_cli("versions", "list", **common)
    assert "burkina" in listing and "partner" in listing and "yes (newest)" in listing
    only = run_cli("versions", "list", "--account", "partner", **common)
    assert "burkina" not in only and "Iaso" in only  # the same data source name in two accounts


def test_set_default_refuses_unknown_versions_and_sources(settings_path: Path, tmp_path: Path) -> None:
    loaded = cli("load", "iaso-csv", str(IASO_CSV), "--account", "burkina", "--settings", str(settings_path))
    assert loaded.returncode == 0
    done = cli("versions", "set-default", "--data-source", "Iaso", "--version", "7", "--account", "burkina",
               "--settings", str(settings_path))
    assert done.returncode == 1 and "has no version 7; it has 1" in done.stderr and "Traceback" not in done.stderr
    done = cli("versions", "set-default", "--data-source", "Iaso", "--version", "1", "--settings", str(settings_path))
    assert done.returncode == 1 and "account 'default' has no data source 'Iaso'" in done.stderr
    done = cli("versions", "set-default", "--data-source", "Iaso", "--version", "1", "--account", "burkina",
               "--settings", str(settings_path))
    assert done.returncode == 0, done.stderr
    assert "yes (default)" in cli("versions", "list", "--settings", str(settings_path)).stdout


def test_load_of_a_new_version_says_which_units_it_left_unserved(settings_path: Path, database_url: str,
                                                                  tmp_path: Path) -> None:
    common = ["--settings", str(settings_path), "--database", database_url]
    assert cli("load", "dhis2", str(DHIS2), "--version", "1", *common).returncode == 0
    document = json.loads(DHIS2.read_text(encoding="utf-8"))
    document["organisationUnits"] = document["organisationUnits"][2:]  # two facilities gone from version 2
    smaller = tmp_path / "v2.json"
    smaller.write_text(json.dumps(document), encoding="utf-8")
    done = cli("load", "dhis2", str(smaller), "--version", "2", *common)
    assert done.returncode == 0, done.stderr
    assert "2 withdrawn (first: DiszpKrYNg8 'Ngelehun CHC' (id 1)" in done.stderr  # a deleted version each
    assert "(2 of them withdrawn: their version is not served)" in done.stderr
    back = cli("versions", "set-default", "--data-source", "DHIS2", "--version", "1", *common)
    assert back.returncode == 0 and "version 1 of default/DHIS2 holds no units" not in back.stderr
    assert "yes (default)" in cli("versions", "list", *common).stdout


def test_set_default_refuses_an_empty_version_unless_forced(settings_path: Path, database_url: str) -> None:
    common = ["--settings", str(settings_path), "--database", database_url]
    assert cli("load", "dhis2", str(DHIS2), "--version", "1", *common).returncode == 0
    assert cli("load", "dhis2", str(DHIS2), "--version", "2", *common).returncode == 0  # the same ids: moved
    refused = cli("versions", "set-default", "--data-source", "DHIS2", "--version", "1", *common)
    assert refused.returncode == 1 and "holds no units" in refused.stderr and "--force" in refused.stderr
    assert "yes (newest)" in cli("versions", "list", *common).stdout  # nothing changed
    forced = cli("versions", "set-default", "--data-source", "DHIS2", "--version", "1", "--force", *common)
    assert forced.returncode == 0 and "yes (default)" in cli("versions", "list", *common).stdout
