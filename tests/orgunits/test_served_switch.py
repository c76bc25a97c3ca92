"""Issue 37 items 3 and 6 (load side): a switch of the version a data source serves is published as versions, and
so are the deletions of `--delete-missing` under a new `--version`. A consumer following `_history?_since=` (and
`$export?_since=`) then holds exactly what its token reads after each switch: the units of the version left are
withdrawn (a deleted version each: 410, a DELETE entry), those of the version served published (a live version each,
stamped at the switch). Iaso copies a pyramid into a new version with new ids; DHIS2 and FHIR bundles keep ids by
source reference and move the units between versions. On SQLite and PostgreSQL, through the command line."""
from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from pathlib import Path

from starlette.testclient import TestClient

from server.cli.main import main

from tests.support.bulk import deleted_ids, export
from tests.support.contexts import IASO_CSV
from tests.support.operator import (
    DHIS2_SAMPLE,
    Operator,
    operator,
    settings_path,
)
from tests.support.sync import Api, Mirror, in_process

__all__ = ["operator", "settings_path"]  # fixtures
IASO_UNITS = 136
EPOCH = "2000-01-01T00:00:00Z"


def iaso_copy(tmp_path: Path, offset: int = 1_000_000) -> Path:
    """The same pyramid as Iaso exports it from a new version: every unit under a new id."""
    rows = list(csv.reader(io.StringIO(IASO_CSV.read_text(encoding="utf-8-sig"))))
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(rows[0])
    for row in rows[1:]:
        writer.writerow([str(int(row[0]) + offset), *row[1:]])
    path = tmp_path / "iaso_v2.csv"
    path.write_text(out.getvalue(), encoding="utf-8")
    return path


def without_two(tmp_path: Path) -> tuple[Path, list[str]]:
    """The DHIS2 sample without its first two facilities (their UIDs)."""
    document = json.loads(DHIS2_SAMPLE.read_text(encoding="utf-8"))
    gone = [unit["id"] for unit in document["organisationUnits"][:2]]
    document["organisationUnits"] = document["organisationUnits"][2:]
    smaller = tmp_path / "v2.json"
    smaller.write_text(json.dumps(document), encoding="utf-8")
    return smaller, gone


def ids(client: TestClient) -> set[str]:
    """What the token reads: every Location it finds."""
    found: set[str] = set()
    url: str | None = "/fhir/Location?_count=500&_elements=id"
    while url:
        page = client.get(url).json()
        found |= {entry["resource"]["id"] for entry in page.get("entry", [])}
        url = next((link["url"] for link in page["link"] if link["relation"] == "next"), None)
    return found


def live(mirror: Mirror) -> set[str]:
    return {rid for rid, (_, deleted) in mirror.copy.items() if not deleted}


def synced(client: TestClient, mirror: Mirror) -> set[str]:
    client.app.state.ctx.freshness.expire()  # type: ignore[attr-defined]
    mirror.sync()
    held = live(mirror)
    assert held == ids(client)  # the copy equals what the token reads
    return held


def versions_listed(operator: Operator, data_source: str) -> dict[int, tuple[int, str]]:
    """`versions list` of one data source: version -> (units, served)."""
    operator.capsys.readouterr()
    assert main(["versions", "list", "--settings", str(operator.settings_path), "--database", operator.url]) == 0
    rows = operator.capsys.readouterr().out.splitlines()[1:]
    return {int(row[50:57]): (int(row[58:67].replace(",", "")), row[69:].strip()) for row in rows
            if row[17:49].strip() == data_source}


def test_an_iaso_version_with_new_ids_withdraws_the_last_and_a_switch_back_restores_it(operator: Operator,
                                                                                      tmp_path: Path) -> None:
    operator.ok("load", "iaso-csv", str(IASO_CSV))
    with operator.consumer() as client:
        mirror = Mirror(Api(in_process(client)), count=100)
        first = synced(client, mirror)
        assert len(first) == IASO_UNITS
        said = operator.ok("load", "iaso-csv", str(iaso_copy(tmp_path)), "--version", "2")
        assert f"{IASO_UNITS} inserted" in said and f"{IASO_UNITS} withdrawn (first: " in said, said
        second = synced(client, mirror)
        assert len(second) == IASO_UNITS and not second & first  # the new ids only
        assert client.get("/fhir/Location/2049004").status_code == 410  # withdrawn: a deleted version
        # its history tells how it ended: the version read before, then the withdrawal (and that version stays
        # answerable to the client that holds it)
        told = client.get("/fhir/Location/2049004/_history").json()
        assert [(e["request"]["method"], e["fullUrl"].rsplit("/", 1)[1]) for e in told["entry"]] == [
            ("DELETE", "2049004"), ("POST", "2049004")]
        assert client.get("/fhir/Location/2049004/_history/1").json()["meta"]["versionId"] == "1"
        assert client.get("/fhir/Location/3049004").status_code == 200
        assert versions_listed(operator, "Iaso") == {1: (IASO_UNITS, ""), 2: (IASO_UNITS, "yes (newest)")}

        said = operator.ok("versions", "set-default", "--data-source", "Iaso", "--version", "1")
        assert f"{IASO_UNITS} units withdrawn" in said and f"{IASO_UNITS} restored" in said, said
        assert synced(client, mirror) == first  # exactly what was withdrawn is back
        restored = client.get("/fhir/Location/2049004")
        assert restored.status_code == 200 and restored.json()["meta"]["versionId"] == "3"  # v2 was the withdrawal
        assert client.get("/fhir/Location/3049004").status_code == 410

        since = mirror.since
        operator.ok("versions", "set-default", "--data-source", "Iaso", "--version", "newest")
        assert synced(client, mirror) == second
        found = export(client, _since=since)
        assert len(deleted_ids(client, found)) == IASO_UNITS  # the withdrawals, in Bulk Data too
        said = operator.ok("versions", "set-default", "--data-source", "Iaso", "--version", "newest")
        assert "now serves its newest version; it already served it: nothing changed" in said


def test_delete_missing_under_a_new_version_publishes_its_deletions(operator: Operator, tmp_path: Path) -> None:
    """Issue 37 item 3: DHIS2 keeps ids by UID: version 2 without two facilities moves 30 units to version 2; the two
    left out are deleted, and consumers see it (410, DELETE in _history and in $export?_since)."""
    operator.ok("load", "dhis2", str(DHIS2_SAMPLE))
    smaller, gone = without_two(tmp_path)
    with operator.consumer() as client:
        mirror = Mirror(Api(in_process(client)), count=10)
        before = synced(client, mirror)
        since = mirror.since
        said = operator.ok("load", "dhis2", str(smaller), "--version", "2", "--delete-missing")
        assert "2 deleted (first: " in said and "30 updated" in said, said
        after = synced(client, mirror)
        assert len(before - after) == 2 and after < before
        removed = sorted(before - after)
        for rid in removed:
            assert client.get(f"/fhir/Location/{rid}").status_code == 410
        history = client.get("/fhir/Location/_history", params={"_since": since, "_count": 100}).json()
        methods = {entry["fullUrl"].rsplit("/", 1)[1]: entry["request"]["method"] for entry in history["entry"]}
        assert {rid for rid, method in methods.items() if method == "DELETE"} == set(removed)
        assert deleted_ids(client, export(client, _since=since)) == {f"Location/{rid}" for rid in removed}
        assert all(f"{uid} '" in said for uid in gone)  # the report names them by their code
        # deleted by the source, not withdrawn: serving version 1 again does not bring them back
        refused = operator.run("versions", "set-default", "--data-source", "DHIS2", "--version", "1")
        assert refused[0] == 1 and "holds no units" in refused[1]


def test_ids_kept_by_source_reference_move_between_versions_and_back(operator: Operator, tmp_path: Path) -> None:
    """Without --delete-missing, the two units version 2 leaves out are withdrawn (their version is no longer
    served), not deleted: serving version 1 restores them and withdraws version 2's 30."""
    operator.ok("load", "dhis2", str(DHIS2_SAMPLE))
    smaller, _ = without_two(tmp_path)
    with operator.consumer() as client:
        mirror = Mirror(Api(in_process(client)), count=10)
        before = synced(client, mirror)
        said = operator.ok("load", "dhis2", str(smaller), "--version", "2")
        assert "2 withdrawn" in said and "(2 of them withdrawn: their version is not served)" in said, said
        assert len(synced(client, mirror)) == 30
        assert versions_listed(operator, "DHIS2") == {1: (2, ""), 2: (30, "yes (newest)")}
        said = operator.ok("versions", "set-default", "--data-source", "DHIS2", "--version", "1")
        assert "30 units withdrawn" in said and "2 restored" in said, said
        assert len(synced(client, mirror)) == 2 and synced(client, mirror) < before
        operator.ok("versions", "set-default", "--data-source", "DHIS2", "--version", "newest")
        assert len(synced(client, mirror)) == 30


def test_a_version_not_served_is_stored_unpublished_until_served(operator: Operator, tmp_path: Path) -> None:
    """Version 1 pinned: a load into version 2 stores its units withdrawn from their first version, never published
    (no entry at all), counted by `versions list`; serving version 2 publishes them, stamped at the switch."""
    operator.ok("load", "iaso-csv", str(IASO_CSV))
    operator.ok("versions", "set-default", "--data-source", "Iaso", "--version", "1")
    with operator.consumer() as client:
        mirror = Mirror(Api(in_process(client)), count=100)
        first = synced(client, mirror)
        since = mirror.since
        said = operator.ok("load", "iaso-csv", str(iaso_copy(tmp_path)), "--version", "2")
        assert f"0 inserted, 0 updated, 0 unchanged, {IASO_UNITS} held" in said, said
        assert "went into version 2 of default/Iaso, which is not served: stored, not published" in said
        assert synced(client, mirror) == first
        history = client.get("/fhir/Location/_history", params={"_since": since}).json()
        assert history["total"] == 0  # nothing published, not even a deletion
        assert client.get("/fhir/Location/3049004").status_code == 404
        assert versions_listed(operator, "Iaso") == {1: (IASO_UNITS, "yes (default)"), 2: (IASO_UNITS, "")}
        operator.ok("versions", "set-default", "--data-source", "Iaso", "--version", "2")
        assert len(synced(client, mirror) - first) == IASO_UNITS
        published = client.get("/fhir/Location/3049004").json()
        assert published["meta"]["versionId"] == "1"  # published after the sync point (as instants, not as text)
        assert datetime.fromisoformat(published["meta"]["lastUpdated"]) > datetime.fromisoformat(since)


def test_a_reload_into_the_version_served_changes_no_other_version(operator: Operator, tmp_path: Path) -> None:
    """Loading version 1 again while version 2 is served: its units stay withdrawn (stored, not published); version
    2's units are not in that file (missing, kept)."""
    operator.ok("load", "iaso-csv", str(IASO_CSV))
    operator.ok("load", "iaso-csv", str(iaso_copy(tmp_path)), "--version", "2")
    with operator.consumer() as client:
        mirror = Mirror(Api(in_process(client)), count=100)
        second = synced(client, mirror)
        said = operator.ok("load", "iaso-csv", str(IASO_CSV), "--version", "1")
        assert f"0 inserted, 0 updated, {IASO_UNITS} unchanged, {IASO_UNITS} missing" in said, said
        assert synced(client, mirror) == second


def test_a_reload_moving_published_units_into_a_version_not_served_is_held_back(operator: Operator) -> None:
    """Version 2 served (DHIS2 keeps ids by UID): a reload that forgets `--version 2` would move every unit into
    version 1, which is not served: a deletion each for every consumer. Held back, naming the version served."""
    operator.ok("load", "dhis2", str(DHIS2_SAMPLE))
    said = operator.ok("load", "dhis2", str(DHIS2_SAMPLE), "--version", "2")
    assert "default/DHIS2 now serves version 2 (it served version 1): published as versions" in said, said
    status, said = operator.run("load", "dhis2", str(DHIS2_SAMPLE))
    assert status == 1, said
    assert "this load would withdraw 32 of the 32 published units of default/DHIS2 (first: " in said
    assert "by moving them into version 1, which is not served (version 2 is)" in said
    assert "load with --version 2; pass --allow-mass-delete if it is intended" in said
    assert versions_listed(operator, "DHIS2") == {1: (0, ""), 2: (32, "yes (newest)")}  # nothing written
