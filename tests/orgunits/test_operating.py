"""Operating the data (issue 15): loads that say what they changed, mistakes that can be undone (accounts and data
sources listed, renamed, removed), and Iaso's CSV and GeoPackage combined in one data source without loss."""
from __future__ import annotations

import csv
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select
from starlette.testclient import TestClient

from plugins.orgunits.admin import list_accounts, list_sources, remove_source, rename_account, rename_source
from plugins.orgunits.importers.dhis2 import load_dhis2
from plugins.orgunits.importers.fhir_bundle import import_fhir_bundle
from plugins.orgunits.importers.iaso_csv import load_iaso_csv
from plugins.orgunits.importers.iaso_gpkg import load_iaso_gpkg
from plugins.orgunits.tables import data_source, org_unit, org_unit_type, source_version
from plugins.orgunits.writer import ensure_data_source, ensure_source_version, ensure_types, write_units
from plugins.orgunits.records import TypeRecord, UnitRecord
from server.access.mint import mint_token
from server.app import create_app
from server.errors import LoadError
from server.settings import Settings
from tests.support.contexts import IASO_CSV
from tests.support.data import counts
from tests.support.commands import cli
from tests.support.store_snapshot import snapshot, units

DHIS2 = Path(__file__).resolve().parents[1] / "fixtures" / "dhis2_sierra_leone_sample.json"
IASO_GPKG = IASO_CSV.with_suffix(".gpkg")
EMPTY = {"resourceType": "Bundle", "type": "collection"}
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


@pytest.fixture
def settings_path(tmp_path: Path) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\n  log_format: text\n")
    return path


def minus_one(tmp_path: Path) -> tuple[Path, str]:
    """Iaso's CSV without its last facility, and that facility's id."""
    rows = list(csv.reader(IASO_CSV.open(encoding="utf-8-sig", newline="")))
    last = max(i for i, row in enumerate(rows) if row[2].endswith(" - HF"))
    path = tmp_path / "minus1.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows(rows[:last] + rows[last + 1:])
    return path, rows[last][0]


def client(settings: Settings, **token: Any) -> TestClient:
    api = TestClient(create_app(settings))
    api.headers["Authorization"] = f"Bearer {mint_token(settings, **token)}"
    return api


# --- finding 1: a load says what it changed -----------------------------------------------------------------------

def test_a_load_reports_missing_and_deleted_units(settings_path: Path, database_url: str, tmp_path: Path) -> None:
    common = ["--settings", str(settings_path), "--database", database_url]
    assert cli("load", "iaso-csv", str(IASO_CSV), *common).returncode == 0
    smaller, gone = minus_one(tmp_path)
    kept = cli("load", "iaso-csv", str(smaller), "--json", *common)
    assert kept.returncode == 0, kept.stderr
    report = json.loads(kept.stdout)
    assert (report["unchanged"], report["missing"], report["missing_ids"], report["deleted"]) == (135, 1, [gone], 0)
    assert "135 unchanged, 1 missing from the file (first: " in kept.stderr and f"(id {gone}))" in kept.stderr
    assert "load with --delete-missing to record them as deleted" in kept.stderr
    deleted = cli("load", "iaso-csv", str(smaller), "--delete-missing", "--json", *common)
    report = json.loads(deleted.stdout)
    assert (report["unchanged"], report["deleted"], report["deleted_ids"], report["missing"]) == (135, 1, [gone], 0)
    assert "0 inserted, 0 updated, 135 unchanged, 1 deleted (first: " in deleted.stderr
    assert f"(id {gone}))" in deleted.stderr  # the unit by its code and name, the id beside


def test_a_dry_run_reports_and_writes_nothing(settings_path: Path, database_url: str, tmp_path: Path) -> None:
    common = ["--settings", str(settings_path), "--database", database_url]
    assert cli("load", "iaso-csv", str(IASO_CSV), *common).returncode == 0
    smaller, gone = minus_one(tmp_path)
    done = cli("load", "iaso-csv", str(smaller), "--delete-missing", "--dry-run", "--json", *common)
    assert done.returncode == 0 and json.loads(done.stdout)["deleted"] == 1 and json.loads(done.stdout)["dry_run"]
    assert "(dry run: nothing written)" in done.stderr and "render:" not in done.stderr
    again = json.loads(cli("load", "iaso-csv", str(IASO_CSV), "--json", *common).stdout)
    assert (again["unchanged"], again["updated"]) == (136, 0)  # the facility was never deleted


def test_the_report_counts_with_thousands_separators(settings_path: Path, database_url: str) -> None:
    done = cli("demo", "--size", "1500", "--settings", str(settings_path), "--database", database_url)
    assert done.returncode == 0 and "demo org-unit pyramid: 1,500 written" in done.stderr
    assert "render: 1,500 versions pre-rendered" in done.stderr
    listing = cli("data-sources", "list", "--settings", str(settings_path), "--database", database_url)
    assert "1,500" in listing.stdout


# --- finding 2: mistakes can be undone -----------------------------------------------------------------------------

@pytest.mark.parametrize("options, message", [
    pytest.param({"account": "defualt"}, "account 'defualt' does not exist (accounts: default)", id="account-typo"),
    pytest.param({"data_source": "FHR"}, "account 'default' has no data source 'FHR' (its data sources: DHIS2)",
                 id="data-source-typo"),
])
def test_a_file_without_units_never_creates_an_account_or_a_data_source(engine: Engine, options: dict[str, Any],
                                                                         message: str) -> None:
    load_dhis2(engine, DHIS2)
    before = snapshot(engine)
    with pytest.raises(LoadError) as error:
        import_fhir_bundle(engine, EMPTY, **options)
    assert message in str(error.value) and "nothing loaded" in str(error.value) and snapshot(engine) == before
    assert counts(import_fhir_bundle(engine, EMPTY, data_source="DHIS2")) == {"missing": 32}  # it exists: fine


def test_the_typo_account_of_the_issue_is_refused(settings_path: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps(EMPTY), encoding="utf-8")
    assert cli("load", "dhis2", str(DHIS2), "--settings", str(settings_path)).returncode == 0
    done = cli("load", "fhir-bundle", str(empty), "--account", "defualt", "--settings", str(settings_path))
    assert done.returncode == 1 and "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "account 'defualt' does not exist (accounts: default): nothing loaded; check --account" in done.stderr
    assert "defualt" not in cli("accounts", "list", "--settings", str(settings_path)).stdout


def test_accounts_and_data_sources_from_the_command_line(settings_path: Path, database_url: str) -> None:
    common = ["--settings", str(settings_path), "--database", database_url]
    assert cli("load", "iaso-csv", str(IASO_CSV), *common).returncode == 0
    typo = cli("load", "dhis2", str(DHIS2), "--account", "defualt", *common)
    assert typo.returncode == 0 and "account 'defualt' is new (a typo of 'default'?" in typo.stderr
    listing = cli("accounts", "list", *common).stdout.splitlines()
    assert [line.split()[:2] for line in listing[1:]] == [["default", "1"], ["defualt", "1"]]
    refused = cli("accounts", "remove", "defualt", *common)
    assert refused.returncode == 1 and "32 of its units are served; pass --force" in refused.stderr
    assert cli("accounts", "rename", "defualt", "default", *common).returncode == 1  # accounts are not merged
    assert cli("accounts", "rename", "defualt", "partner", *common).returncode == 0
    assert cli("data-sources", "rename", "DHIS2", "Sierra Leone", "--account", "partner", *common).returncode == 0
    sources = cli("data-sources", "list", *common).stdout
    assert "Sierra Leone" in sources and "partner" in sources and "defualt" not in sources
    dry = cli("data-sources", "remove", "Sierra Leone", "--account", "partner", "--force", "--dry-run", *common)
    assert dry.returncode == 0 and "would remove" in dry.stderr and "Sierra Leone" in cli(
        "data-sources", "list", *common).stdout
    removed = cli("accounts", "remove", "partner", "--force", *common)
    assert removed.returncode == 0 and "1 data source, 32 units deleted" in removed.stderr
    listed = [line.split()[:5] for line in cli("accounts", "list", *common).stdout.splitlines()[1:]]
    assert listed == [["default", "1", "136", "136"], ["partner", "1", "0", "0", "removed"]]  # its tokens: deletions
    assert "partner" not in cli("versions", "list", *common).stdout


def test_removal_publishes_deletions_and_the_only_account_serves_again(settings: Settings, engine: Engine) -> None:
    load_iaso_csv(engine, IASO_CSV)
    load_dhis2(engine, DHIS2, account="defualt")
    load_dhis2(engine, DHIS2, data_source="Second", account="default")
    # two accounts: a token naming none still sees the first loaded (issue 23)
    assert client(settings).get("/fhir/Location?_summary=count").json()["total"] == 136 + 32
    second = of_source(engine, "Second")
    with engine.begin() as conn:
        assert remove_source(conn, "defualt", "DHIS2", force=True, now=datetime.now(timezone.utc)) == 32
        assert remove_source(conn, "default", "Second", force=True, now=datetime.now(timezone.utc)) == 32
    api = client(settings)  # a new app: no snapshot of before
    assert api.get("/fhir/Location?_summary=count").json()["total"] == 136  # the only account again
    history = api.get("/fhir/Location/_history", params={"_count": 100}).json()
    deletions = {int(e["request"]["url"].split("/")[1]) for e in history["entry"] if e["request"]["method"] == "DELETE"}
    assert deletions == second  # the account's consumers see its removed data source's deletions
    assert api.get(f"/fhir/Location/{min(second)}").status_code == 410
    assert [e["resource"]["name"] for e in api.get("/fhir/Organization").json()["entry"]] == ["Iaso"]
    with engine.connect() as conn:
        assert [(s.account, s.name) for s in list_sources(conn)] == [("default", "Iaso")]


def of_source(engine: Engine, name: str) -> set[int]:
    with engine.connect() as conn:
        return set(conn.execute(select(org_unit.c.id).select_from(org_unit.join(source_version).join(data_source))
                                .where(data_source.c.name == name)).scalars())


def test_a_refused_removal_changes_nothing(engine: Engine) -> None:
    load_dhis2(engine, DHIS2)
    before = snapshot(engine)
    with engine.begin() as conn, pytest.raises(LoadError, match="32 of its units are served; pass --force"):
        remove_source(conn, "default", "DHIS2", force=False, now=NOW)
    assert snapshot(engine) == before
    with engine.begin() as conn:  # a unit of another data source under one of DHIS2's
        other = ensure_data_source(conn, "Other")
        ensure_types(conn, [TypeRecord("Guest", "guest", "HF", 2)], data_source_id=other)  # each its own types
        parent = conn.execute(select(org_unit.c.id).limit(1)).scalar_one()
        write_units(conn, [UnitRecord(9999, "Guest", "guest", parent_id=parent)], ensure_source_version(conn, other, 1),
                    NOW)
    before = snapshot(engine)
    with engine.begin() as conn, pytest.raises(LoadError, match="org unit 9999 .of another data source. has parent"):
        remove_source(conn, "default", "DHIS2", force=True, now=NOW)
    assert snapshot(engine) == before


def test_renames(settings: Settings, engine: Engine) -> None:
    load_dhis2(engine, DHIS2, account="partner")
    with engine.begin() as conn:
        assert rename_source(conn, "partner", "DHIS2", "Sierra Leone MoH", NOW) == 32
        with pytest.raises(LoadError, match="another data source is already called 'Sierra Leone MoH'"):
            rename_source(conn, "partner", "Sierra Leone MoH", "Sierra Leone MoH", NOW)
        assert rename_account(conn, "partner", "sierra-leone") == 1
        assert [a.account for a in list_accounts(conn)] == ["sierra-leone"]
    unit = next(iter(units(engine).values()))
    body = client(settings, account="sierra-leone").get(f"/fhir/Location/{unit.id}").json()
    assert body["meta"]["versionId"] == "2" and body["managingOrganization"]["display"] == "Sierra Leone MoH"
    assert body["managingOrganization"]["identifier"]["value"] == "dhis2"  # the slug stays
    refused = client(settings, account="partner").get(f"/fhir/Location/{unit.id}")  # the old name: told, not empty
    assert refused.status_code == 403 and "which was renamed 'sierra-leone'" in refused.text


# --- finding 3: Iaso's CSV and GeoPackage combine ---------------------------------------------------------------------

@pytest.mark.parametrize("order", [pytest.param(("csv", "gpkg"), id="csv-then-gpkg"),
                                   pytest.param(("gpkg", "csv"), id="gpkg-then-csv")])
def test_iaso_csv_and_gpkg_combine_without_loss(engine: Engine, order: tuple[str, str]) -> None:
    loaders = {"csv": lambda: load_iaso_csv(engine, IASO_CSV), "gpkg": lambda: load_iaso_gpkg(engine, IASO_GPKG)}
    loaders[order[0]]()
    second = loaders[order[1]]()
    assert second.inserted == 0 and "was last loaded from iaso-" in second.notes[0]
    stored = units(engine)
    closed = [row for row in stored.values() if row.closing_date is not None]
    assert [(row.id, str(row.closing_date)) for row in closed] == [(2049004, "2024-12-01")]  # the CSV's
    assert sum(row.geometry is not None for row in stored.values()) == 53  # the GeoPackage's boundaries
    assert sum(row.latitude is not None for row in stored.values()) == 83
    for load in (loaders["csv"], loaders["gpkg"], loaders["csv"]):  # from then on, nothing moves either way
        assert counts(load()) == {"unchanged": 136}
    with engine.connect() as conn:
        assert conn.execute(select(source_version.c.number)).scalars().all() == [1]
