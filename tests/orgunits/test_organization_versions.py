"""Organizations keep versions (mCSD's Update Option, ITI-91): a data source created, renamed, serving another source
version, removed or restored is a version an Update Client receives with `_history?_since=`; vread renders each."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine
from starlette.testclient import TestClient

from plugins.orgunits.admin import remove_source, rename_source
from plugins.orgunits.importers.transaction import import_units
from plugins.orgunits.records import UnitRecord
from plugins.orgunits.versions import set_default_version
from plugins.orgunits.writer import ensure_data_source, ensure_source_version, stamp, transaction, write_units
from server.access.mint import mint_token
from server.app import create_app
from server.storage.db import create_db_engine
from tests.support.contexts import SECRET, make_settings
from tests.support.data import NOW, TYPES, UNITS, load_small_pyramid
from tests.support.validators import assert_valid

T1 = NOW + timedelta(days=30)
T2 = NOW + timedelta(days=60)
NAME = "Ministère de la Santé"
SOURCE_VERSION = "https://orgunit-fhir.example.org/fhir/StructureDefinition/source-version"
Step = Callable[[Engine], Any]


def written(change: Callable[[Connection], Any]) -> Step:
    """A change made in one transaction of its own."""
    def run(engine: Engine) -> None:
        with engine.begin() as conn:
            change(conn)
    return run


def renamed(*names: str) -> Step:
    """Renamed to each name in turn, in one write (one version)."""
    def rename(conn: Connection) -> None:
        for old, new in zip((NAME, *names), names):
            rename_source(conn, "default", old, new, T1)
    return written(rename)


REMOVED = written(lambda conn: remove_source(conn, "default", NAME, force=True, now=T1))
NEWER_VERSION = written(lambda conn: ensure_source_version(conn, 1, 4, now=T1))


def restored(engine: Engine) -> None:
    import_units(engine, data_source=NAME, version=3, types=TYPES, records=UNITS, now=T2)


@dataclass(frozen=True)
class Case:
    """What the data source's Organization shows after `steps` (the small pyramid loaded at NOW first)."""

    steps: tuple[Step, ...]
    history: tuple[tuple[str, str], ...]  # (versionId, request.method) of Organization/1/_history, newest first
    name: str | None = NAME  # the current version's name; None: deleted (410)
    source_version: int = 3  # its source-version extension


CASES = [
    pytest.param(Case((), (("1", "POST"),)), id="created-by-a-load"),
    pytest.param(Case((renamed("Santé publique"),), (("2", "PUT"), ("1", "POST")), "Santé publique"), id="renamed"),
    pytest.param(Case((renamed("A", "Santé publique"),), (("2", "PUT"), ("1", "POST")), "Santé publique"),
                 id="renamed-twice-in-one-write"),
    pytest.param(Case((NEWER_VERSION,), (("2", "PUT"), ("1", "POST")), source_version=4),
                 id="serving-a-newer-source-version"),
    pytest.param(Case((NEWER_VERSION, written(lambda conn: set_default_version(conn, NAME, 3, now=T2))),
                      (("3", "PUT"), ("2", "PUT"), ("1", "POST"))), id="serving-an-older-source-version"),
    pytest.param(Case((written(lambda conn: set_default_version(conn, NAME, 3, now=T1)),), (("1", "POST"),)),
                 id="choosing-the-version-served-changes-nothing"),
    pytest.param(Case((written(lambda conn: ensure_data_source(conn, NAME, identifier_system="https://ms.example.org/ou",
                                                               now=T1)),), (("1", "POST"),)),
                 id="a-new-identifier-system-changes-nothing"),
    pytest.param(Case((REMOVED,), (("2", "DELETE"), ("1", "POST")), None), id="removed"),
    pytest.param(Case((REMOVED, restored), (("3", "PUT"), ("2", "DELETE"), ("1", "POST"))),
                 id="removed-then-restored-by-a-load"),
]


@pytest.fixture
def engine(migrated_url: str, tmp_path: Path) -> Iterator[Engine]:
    """The small pyramid (Organization/1) and another data source of the account (Organization/2: removing the first
    leaves the account, whose tokens then see the removal)."""
    engine = create_db_engine(make_settings(migrated_url, tmp_path, auth={"secret": SECRET}))
    load_small_pyramid(engine)
    with engine.begin() as conn:
        other = ensure_source_version(conn, ensure_data_source(conn, "Registre national", now=NOW), 1, now=NOW)
        write_units(conn, [UnitRecord(100, "Pays", "COUNTRY", "VALID")], other, NOW)
    yield engine
    engine.dispose()


def serving(engine: Engine, tmp_path: Path) -> TestClient:
    """A client of a server started after the writes (it sees them at once)."""
    settings = make_settings(str(engine.url.render_as_string(hide_password=False)), tmp_path, auth={"secret": SECRET})
    client = TestClient(create_app(settings, db=engine))
    client.headers["Authorization"] = f"Bearer {mint_token(settings)}"
    return client


def _versions(bundle: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["response"]["etag"].removeprefix('W/"').removesuffix('"'), e["request"]["method"])
            for e in bundle.get("entry", ())]


@pytest.mark.parametrize("case", CASES)
def test_each_change_of_a_data_source_is_a_version(engine: Engine, tmp_path: Path, case: Case) -> None:
    for step in case.steps:
        step(engine)
    http = serving(engine, tmp_path)
    history = http.get("/fhir/Organization/1/_history").json()
    assert_valid(history)
    assert _versions(history) == list(case.history)
    newest, method = case.history[0]
    read = http.get("/fhir/Organization/1")
    if case.name is None:
        assert read.status_code == 410 and method == "DELETE"
        assert [e["resource"]["id"] for e in http.get("/fhir/Organization").json()["entry"]] == ["2"]
    else:
        resource = read.json()
        assert (resource["meta"]["versionId"], resource["name"]) == (newest, case.name)
        assert resource["extension"] == [{"url": SOURCE_VERSION, "valueInteger": case.source_version}]
        assert http.get(f"/fhir/Organization/1/_history/{newest}").json() == resource  # the current version, vread
    for vid, method in case.history:
        vread = http.get(f"/fhir/Organization/1/_history/{vid}")
        assert vread.status_code == (410 if method == "DELETE" else 200)
    assert http.get("/fhir/Organization/1/_history/1").json()["name"] == NAME  # as it was first published
    # an Update Client that synced before T1 receives every later version, and nothing when nothing changed
    since = _versions(http.get("/fhir/Organization/_history", params={"_since": T1.isoformat()}).json())
    assert since == list(case.history[:-1])


def test_a_sync_follows_the_organizations_changes(engine: Engine, tmp_path: Path) -> None:
    """The type-level history walked as an Update Client does: each Bundle's sync point, sent back as _since."""
    http = serving(engine, tmp_path)
    first = http.get("/fhir/Organization/_history").json()
    assert _versions(first) == [("1", "POST"), ("1", "POST")]  # each data source's first version
    renamed("Santé publique")(engine)
    written(lambda conn: remove_source(conn, "default", "Santé publique", force=True, now=T2))(engine)
    http = serving(engine, tmp_path)  # a new server: no second to wait for its look at the data
    changes = http.get("/fhir/Organization/_history", params={"_since": first["meta"]["lastUpdated"]}).json()
    assert_valid(changes)
    assert [(e["fullUrl"].rsplit("/", 1)[1], *v) for e, v in zip(changes["entry"], _versions(changes))] == \
        [("1", "3", "DELETE"), ("1", "2", "PUT")]
    assert changes["entry"][1]["resource"]["name"] == "Santé publique"
    assert http.get("/fhir/Organization/_history", params={"_since": changes["meta"]["lastUpdated"]}).json()["total"] \
        == 0


def test_a_write_stamps_after_the_newest_organization_version(engine: Engine) -> None:
    """The writer lock's instant is after every version stored, of Locations and of Organizations alike (here an
    Organization's, later than the clock: its units have none)."""
    later = datetime(2100, 1, 1, tzinfo=timezone.utc)
    NEWER_VERSION(engine)
    written(lambda conn: set_default_version(conn, NAME, 3, now=later))(engine)
    with transaction(engine) as conn:
        assert stamp(conn) > later


def test_a_purged_data_source_leaves_no_version(engine: Engine, tmp_path: Path) -> None:
    renamed("Santé publique")(engine)
    written(lambda conn: remove_source(conn, "default", "Santé publique", force=True, now=T2, purge=True))(engine)
    http = serving(engine, tmp_path)
    assert http.get("/fhir/Organization/1").status_code == 404
    assert http.get("/fhir/Organization/1/_history").status_code == 404
    assert http.get("/fhir/Organization/1/_history/1").status_code == 404
    assert _versions(http.get("/fhir/Organization/_history").json()) == [("1", "POST")]  # the other one
