"""A real Bulk Data client (SMART Health IT's smart-fetch, from PyPI: tests/support/bulkclient.py) against a live
`orgunit-fhir serve`, on both backends: it exports everything (line counts equal the search totals), and an export
`_since` the first one's transactionTime returns exactly what a load then changed, deletions included."""
from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any


from tests.support.bulkclient import deleted, run_export
from tests.support.commands import run_cli
from tests.support.live import live_server
from tests.support.waiting import eventually

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dhis2_sierra_leone_sample.json"
TYPES = ["Location", "Organization"]


def _get(base: str, token: str, path: str, **params: Any) -> dict[str, Any]:
    url = f"{base}/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})) as answer:
        return json.loads(answer.read())  # type: ignore[no-any-return]


def _transaction_time(folder: Path) -> str:
    events = [json.loads(line) for line in (folder / "log.ndjson").read_text().splitlines()]
    return str(next(e["eventDetail"]["transactionTime"] for e in events if e["eventId"] == "status_complete"))


def _sync_point(base: str, token: str) -> str:
    return str(_get(base, token, "Location", _count=0)["meta"]["lastUpdated"])


def _seen_beyond(base: str, token: str, before: str) -> None:
    """Until the server's snapshot holds a write made since its sync point was `before`: a load shows within a
    second (README, Sync), and an export reads the snapshot of its kick-off."""
    eventually(lambda: True if _sync_point(base, token) != before else None,
               lambda: f"the server's sync point is still {before}")


def _ids(lines: list[str]) -> set[str]:
    return {json.loads(line)["id"] for line in lines}


def _changed_since(base: str, token: str, rtype: str, since: str) -> set[str]:
    bundle = _get(base, token, rtype, _lastUpdated=f"gt{since}", _count=100)
    return {e["resource"]["id"] for e in bundle.get("entry", [])}


def test_a_real_bulk_client_exports_everything_then_exactly_what_changed(migrated_url: str, tmp_path: Path) -> None:
    settings = tmp_path / "cli.yaml"
    settings.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\n", encoding="utf-8")
    run_cli("demo", "--size", "300", settings=settings, database=migrated_url)
    with live_server(tmp_path, migrated_url, "bulk:\n  file_resources: 120\n") as server:
        first = run_export(server.base, server.token, tmp_path / "first", TYPES)
        for rtype in TYPES:
            assert len(first[rtype]) == _get(server.base, server.token, rtype, _count=0)["total"], rtype
        assert len(list((tmp_path / "first").glob("Location.*.ndjson"))) == 3  # 300 split at 120
        since = _transaction_time(tmp_path / "first")

        before = _sync_point(server.base, server.token)
        run_cli("load", "dhis2", str(FIXTURE), "--data-source", "SL sample", settings=settings, database=migrated_url)
        _seen_beyond(server.base, server.token, before)
        second = run_export(server.base, server.token, tmp_path / "second", TYPES, since)
        for rtype in TYPES:
            assert _ids(second.get(rtype, [])) == _changed_since(server.base, server.token, rtype, since), rtype
        assert len(second["Location"]) == 32 and len(second["Organization"]) == 1  # the units and data source loaded

        units = json.loads(FIXTURE.read_text(encoding="utf-8"))
        parents = {u.get("parent", {}).get("id") for u in units["organisationUnits"]}
        leaves = [u for u in units["organisationUnits"] if u["id"] not in parents][:2]
        gone = {f"Location/{_get(server.base, server.token, 'Location', identifier=u['id'])['entry'][0]['resource']['id']}"
                for u in leaves}
        units["organisationUnits"] = [u for u in units["organisationUnits"] if u not in leaves]
        smaller = tmp_path / "smaller.json"
        smaller.write_text(json.dumps(units), encoding="utf-8")
        since, before = _transaction_time(tmp_path / "second"), _sync_point(server.base, server.token)
        run_cli("load", "dhis2", str(smaller), "--data-source", "SL sample", "--delete-missing", settings=settings,
                database=migrated_url)
        _seen_beyond(server.base, server.token, before)
        third = run_export(server.base, server.token, tmp_path / "third", TYPES, since)
        assert deleted(tmp_path / "third") == gone
        for rtype in TYPES:
            assert _ids(third.get(rtype, [])) == _changed_since(server.base, server.token, rtype, since), rtype


def _search_ids(base: str, token: str, rtype: str, **params: Any) -> set[str]:
    """Every match of the search (its pages followed)."""
    found: set[str] = set()
    bundle = _get(base, token, rtype, _count=1000, **params)
    while True:
        found |= {e["resource"]["id"] for e in bundle.get("entry", []) if e["search"]["mode"] == "match"}
        following = next((link["url"] for link in bundle.get("link", []) if link["relation"] == "next"), None)
        if following is None:
            return found
        with urllib.request.urlopen(urllib.request.Request(following, headers={"Authorization": f"Bearer {token}"})) \
                as answer:
            bundle = json.loads(answer.read())


def test_a_real_bulk_client_exports_the_facilities_its_type_filters_select(migrated_url: str, tmp_path: Path) -> None:
    """smart-fetch sending `_typeFilter` (two queries for Location, one with a comma between values, which it quotes):
    the Location files hold exactly what the searches match together, Organization (no filter) every one."""
    settings = tmp_path / "cli.yaml"
    settings.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\n", encoding="utf-8")
    run_cli("demo", "--size", "300", settings=settings, database=migrated_url)
    with live_server(tmp_path, migrated_url) as server:
        queries = ["Location?type=CSPS&status=active", "Location?type=CHR,CMA"]
        got = run_export(server.base, server.token, tmp_path / "filtered", TYPES, type_filters=queries)
        facilities = _search_ids(server.base, server.token, "Location", type="CSPS", status="active") | \
            _search_ids(server.base, server.token, "Location", type="CHR,CMA")
        assert facilities and _ids(got["Location"]) == facilities
        assert len(got["Location"]) == len(facilities)  # each once, though both queries could match it
        assert _ids(got["Organization"]) == _search_ids(server.base, server.token, "Organization")
        kickoff = next(json.loads(line) for line in (tmp_path / "filtered" / "log.ndjson").read_text().splitlines()
                       if json.loads(line)["eventId"] == "kickoff")
        sent = urllib.parse.parse_qs(urllib.parse.urlsplit(kickoff["eventDetail"]["exportUrl"]).query)
        assert sent["_typeFilter"] == ["Location?type=CHR%2CCMA,Location?type=CSPS&status=active"]
