"""Issue 37: every consumer converges. Played through the command line in process (tests/support/operator.py) with
consumers following the sync loop (`_history?_since`, `$export?_since`), on both backends:

1. an export's row set and its transactionTime come from one snapshot: a data source loaded while the server's
   snapshot is still the older one is in the next `_since` export (it was in neither);
2. removing an account's last data source publishes its deletions to the account's tokens (410, DELETE entries);
6. what leaves a query-scoped token's view is an entry it can act on: a unit retyped out of `type=dispensary` is a
   DELETE in its `_history?_since` and in its `$export?_since` `deleted`."""
from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from server.engine import export_reader

from tests.support.bulk import export, lines
from tests.support.clock import hold
from tests.support.sync import Api, Mirror, compare, in_process, readable
from tests.support.operator import LAKELAND_CSV, LAKELAND_UNITS, Operator, operator, settings_path

__all__ = ["operator", "settings_path"]  # fixtures

DEMO_UNITS = 20
RETYPED = "10231"  # St. Anne Dispensary, retyped a Medical Clinic


def _ids(client: TestClient, found: dict[str, Any], kind: str = "output") -> set[str]:
    got = lines(client, found[kind]).get("Location" if kind == "output" else "Bundle", [])
    if kind == "output":
        return {orjson.loads(line)["id"] for line in got}
    urls = [orjson.loads(line)["entry"][0]["request"]["url"] for line in got]
    return {url.rsplit("/", 1)[1] for url in urls if url.startswith("Location/")}


def test_a_data_source_loaded_before_a_kick_off_is_in_that_export_or_the_next(operator: Operator) -> None:
    operator.ok("demo", "--size", str(DEMO_UNITS))
    with operator.consumer() as client:
        hold(client.app.state.ctx.freshness)  # the snapshot the server holds stays the older one
        first = export(client)  # the snapshot is taken here
        assert len(_ids(client, first)) == DEMO_UNITS
        operator.load_lakeland("--data-source", "Lakeland MFL")  # a second data source, committed now
        second = export(client, _since=first["transactionTime"])  # the server still holds the older snapshot
        client.app.state.ctx.freshness.expire()  # it looks again (a server does within a second)
        third = export(client, _since=second["transactionTime"])
        chained = _ids(client, second) | _ids(client, third)
        assert len(chained) == LAKELAND_UNITS  # in one of the two, never lost between them
        # as instants: a FHIR instant's text has no fixed precision ("...:42Z" is before "...:42.275Z")
        assert datetime.fromisoformat(second["transactionTime"]) <= datetime.fromisoformat(third["transactionTime"])


def test_removing_an_accounts_last_data_source_publishes_its_deletions(operator: Operator) -> None:
    operator.ok("demo", "--size", str(DEMO_UNITS))
    operator.load_lakeland("--account", "acme")
    with operator.consumer(account="acme") as client:
        synced = client.get("/fhir/Location/_history", params={"_count": 1}).json()["meta"]["lastUpdated"]
        before = export(client)
        operator.ok("data-sources", "remove", "Lakeland MFL", "--account", "acme", "--force")
        client.app.state.ctx.freshness.expire()
        history = client.get("/fhir/Location/_history", params={"_since": synced, "_count": 100}).json()
        assert {e["request"]["method"] for e in history["entry"]} == {"DELETE"}
        assert len(history["entry"]) == LAKELAND_UNITS
        rid = history["entry"][0]["request"]["url"].rsplit("/", 1)[1]
        assert client.get(f"/fhir/Location/{rid}").status_code == 410
        organizations = client.get("/fhir/Organization/_history", params={"_since": synced}).json()
        assert [e["request"]["method"] for e in organizations["entry"]] == ["DELETE"]
        after = export(client, _since=before["transactionTime"])
        assert _ids(client, after, "deleted") == _ids(client, before)


def _retyped(tmp_path: Path) -> Path:
    text = LAKELAND_CSV.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith(f"{RETYPED},"))
    assert ",Dispensary," in row
    path = tmp_path / "retyped.csv"
    path.write_text(text.replace(row, row.replace(",Dispensary,", ",Medical Clinic,")), encoding="utf-8")
    return path


def test_a_unit_retyped_out_of_a_query_scope_is_a_departure(operator: Operator, tmp_path: Path) -> None:
    operator.load_lakeland()
    scope = "system/Location.rs?type=dispensary"
    with operator.consumer(extra={"scope": scope}) as client:
        ids = {e["resource"]["id"] for e in client.get("/fhir/Location", params={"_count": 100}).json()["entry"]}
        unit = client.get("/fhir/Location", params={"identifier": RETYPED}).json()["entry"][0]["resource"]["id"]
        assert unit in ids
        synced = client.get("/fhir/Location/_history", params={"_count": 1}).json()["meta"]["lastUpdated"]
        before = export(client)
        operator.load_lakeland(csv=_retyped(tmp_path))
        client.app.state.ctx.freshness.expire()
        history = client.get("/fhir/Location/_history", params={"_since": synced, "_count": 100}).json()
        assert [(e["request"]["method"], e["request"]["url"]) for e in history["entry"]] == \
            [("DELETE", f"Location/{unit}")]
        assert client.get(f"/fhir/Location/{unit}").status_code == 404  # not its content: it left the scope
        after = export(client, _since=before["transactionTime"])
        assert _ids(client, after, "deleted") == {unit} and not _ids(client, after)


def test_a_unit_retyped_out_of_a_type_filter_is_listed_deleted_and_no_unit_that_never_matched_is(
        operator: Operator, tmp_path: Path) -> None:
    """A sync filtered by `_typeFilter` drops what left its filter, and is never told of a unit whose one version
    never matched it (an attacker's walk: a `_since` of 1970 listed every other unit of the account as deleted)."""
    operator.load_lakeland()
    filtered = "Location?type=dispensary"
    with operator.consumer() as client:
        unit = client.get("/fhir/Location", params={"identifier": RETYPED}).json()["entry"][0]["resource"]["id"]
        before = export(client, _since="1970-01-01T00:00:00Z", _typeFilter=filtered)
        assert unit in _ids(client, before) and not _ids(client, before, "deleted")
        operator.load_lakeland(csv=_retyped(tmp_path))
        client.app.state.ctx.freshness.expire()
        after = export(client, _since=before["transactionTime"], _typeFilter=filtered)
        assert _ids(client, after, "deleted") == {unit} and not _ids(client, after)
        again = export(client, _since="1970-01-01T00:00:00Z", _typeFilter=filtered)
        assert _ids(client, again, "deleted") == {unit} and unit not in _ids(client, again)


def test_a_write_committed_between_an_exports_reads_names_no_resource_twice(
        operator: Operator, monkeypatch: pytest.MonkeyPatch) -> None:
    """An export reads a type by several queries (the resources whose current version was stamped at or before T,
    then those changed since, by their version at T; their deletions likewise): they read one snapshot. A write
    committed between two of them (here: a rename giving every unit a new version) made each unit it changed
    current after T to the second query while the first had read it as unchanged: written twice in the files (the
    sync torture, bench/sync.py, saw 75 duplicates in one export on PostgreSQL, and on SQLite)."""
    operator.load_lakeland()
    real, renamed = export_reader._stream, threading.Event()

    def stream(conn: Any, query: Any) -> Any:
        if "at_t" in str(query) and not renamed.is_set():  # the resources changed since T: a write commits first
            renamed.set()
            operator.ok("data-sources", "rename", "Lakeland MFL", "Lakeland")
        return real(conn, query)

    monkeypatch.setattr(export_reader, "_stream", stream)
    with operator.consumer() as client:
        found = export(client)
        assert renamed.is_set()
        ids = [orjson.loads(line)["id"] for line in lines(client, found["output"])["Location"]]
        assert len(ids) == len(set(ids)) == LAKELAND_UNITS
        versions = {orjson.loads(line)["meta"]["versionId"] for line in lines(client, found["output"])["Location"]}
        assert versions == {"1"}  # each as it was at transactionTime


def test_a_query_scoped_walk_shows_current_versions_and_the_next_walk_their_successors(operator: Operator) -> None:
    """To a token whose scope holds a query (proven on the current row only) a history walk shows current versions: a
    write after the walk's sync point supersedes the versions its later pages would have served (the first page's
    total counted them), and the next walk, `_since` that sync point, serves their successors: the copy equals what
    the token reads (README: Sync; bench/sync.py counts these as `superseded`)."""
    operator.load_lakeland()
    with operator.consumer(extra={"scope": "system/Location.rs?type=dispensary"}) as client:
        mirror = Mirror(Api(in_process(client)), count=1)
        first = client.get("/fhir/Location/_history", params={"_count": 1}).json()
        total = first["total"]
        assert total > 1 and len(first["entry"]) == 1
        operator.ok("data-sources", "rename", "Lakeland MFL", "Lakeland")  # every unit: a new version
        client.app.state.ctx.freshness.expire()
        rest = client.get(next(link["url"] for link in first["link"] if link["relation"] == "next")).json()
        assert rest["total"] == 0 and "entry" not in rest  # superseded after the walk's sync point: not counted
        mirror.sync()
        assert compare(mirror.copy, readable(mirror.api)) == {} and len(mirror.copy) == total
        assert {version for version, _ in mirror.copy.values()} == {2}  # the successors
