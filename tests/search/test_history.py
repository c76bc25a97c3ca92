"""Versions and history: re-imports, vread, _history (instance and type), deletions, _lastUpdated."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

from server.app import create_app
from server.access.mint import mint_token
from server.storage.db import create_db_engine
from plugins.orgunits.writer import ensure_types, ensure_data_source, ensure_source_version, write_units
from plugins.orgunits.records import TypeRecord
from plugins.orgunits.history import delete_missing
from tests.support.contexts import SECRET, make_settings
from tests.support.data import NOW, UNITS, load_small_pyramid
from tests.support.validators import assert_valid

T1 = NOW + timedelta(days=30)
T2 = NOW + timedelta(days=60)


def reload(engine: Engine, units: tuple[Any, ...], now: datetime, *, missing: bool = False) -> None:
    with engine.begin() as conn:
        ds = ensure_data_source(conn, "Ministère de la Santé")
        version = ensure_source_version(conn, ds, 3)
        write_units(conn, units, version, now)
        if missing:
            delete_missing(conn, data_source_id=ds, seen_ids={u.id for u in units}, now=now)


@pytest.fixture
def client(migrated_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, Engine]]:
    settings = make_settings(migrated_url, tmp_path, auth={"secret": SECRET})
    engine = create_db_engine(settings)
    load_small_pyramid(engine)
    with TestClient(create_app(settings, db=engine)) as c:
        c.headers["Authorization"] = f"Bearer {mint_token(settings)}"
        yield c, engine


def changed(units: tuple[Any, ...], **changes: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(replace(u, **changes[str(u.id)]) if str(u.id) in changes else u for u in units)


def history_ids(bundle: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(e["fullUrl"].rsplit("/", 1)[1], e["response"]["etag"], e["request"]["method"])
            for e in bundle.get("entry", [])]


def test_reimporting_identical_data_changes_nothing(client: tuple[TestClient, Engine]) -> None:
    http, engine = client
    before = http.get("/fhir/Location?_count=100").json()
    reload(engine, UNITS, T1)
    after = http.get("/fhir/Location?_count=100").json()
    assert [e["resource"]["meta"] for e in after["entry"]] == [e["resource"]["meta"] for e in before["entry"]]
    assert http.get("/fhir/Location/_history", params={"_since": T1.isoformat()}).json()["total"] == 0
    assert http.get("/fhir/Location/_history").json()["total"] == len(UNITS)


@pytest.mark.parametrize("change", ["type-renamed", "type-renamed-and-unit-changed", "source-identifier-system"])
def test_a_changed_type_or_source_gives_its_units_one_new_version(client: tuple[TestClient, Engine],
                                                                  change: str) -> None:
    http, engine = client
    units = changed(UNITS, **{"30": {"name": "CSPS Ségou-Centre"}}) if change.endswith("unit-changed") else UNITS
    with engine.begin() as conn:
        if change.startswith("type"):
            ensure_types(conn, [TypeRecord("Centre de santé (CSPS)", "CSPS", "HF", 5)], now=T1)
            expected = {"30", "32"}  # the CSPS units
        else:
            ensure_data_source(conn, "Ministère de la Santé", identifier_system="https://ms.example.org/ou", now=T1)
            expected = {str(u.id) for u in UNITS}
        write_units(conn, units, ensure_source_version(conn, 1, 3), T1)
    since = T1.strftime("%Y-%m-%dT%H:%M:%SZ")
    bundle = http.get(f"/fhir/Location/_history?_since={since}&_count=100").json()
    assert {(rid, etag) for rid, etag, _ in history_ids(bundle)} == {(rid, 'W/"2"') for rid in expected}
    read = http.get("/fhir/Location/30").json()
    assert read["meta"]["versionId"] == "2"
    if change.startswith("type"):
        assert read["type"][0]["text"] == "Centre de santé (CSPS)"
    else:
        assert read["identifier"][0]["system"] == "https://ms.example.org/ou"


def test_rename_and_move_then_history_since(client: tuple[TestClient, Engine]) -> None:
    http, engine = client
    # rename district 10 (children 20 and 32 change partOf.display) and move facility 31 to district 11
    reload(engine, changed(UNITS, **{"10": {"name": "DS Boromo-Centre"}, "31": {"parent_id": 11}}), T1)
    since = (T1 - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    bundle = http.get(f"/fhir/Location/_history?_since={since}&_count=100").json()
    assert_valid(bundle)
    assert bundle["type"] == "history" and bundle["total"] == 4
    assert sorted(history_ids(bundle)) == [("10", 'W/"2"', "PUT"), ("20", 'W/"2"', "PUT"),
                                           ("31", 'W/"2"', "PUT"), ("32", 'W/"2"', "PUT")]
    by_id = {e["resource"]["id"]: e for e in bundle["entry"]}
    assert by_id["20"]["resource"]["partOf"] == {"reference": "Location/10", "display": "DS Boromo-Centre"}
    assert by_id["31"]["resource"]["partOf"]["reference"] == "Location/11"
    assert by_id["10"]["response"]["lastModified"] == T1.strftime("%Y-%m-%dT%H:%M:%SZ")
    # vread: the old version still renders as it was published, the new one as it is now
    old = http.get("/fhir/Location/10/_history/1").json()
    assert old["name"] == "DS Boromo" and old["meta"]["versionId"] == "1"
    assert http.get("/fhir/Location/20/_history/1").json()["partOf"]["display"] == "DS Boromo"
    assert http.get("/fhir/Location/10/_history/2").json() == http.get("/fhir/Location/10").json()
    assert http.get("/fhir/Location/10").json()["meta"] == {"versionId": "2", "lastUpdated": "2025-04-03T10:20:30Z"}
    # instance history, newest first
    instance = http.get("/fhir/Location/10/_history").json()
    assert_valid(instance)
    assert [(e["resource"]["meta"]["versionId"], e["request"]["method"]) for e in instance["entry"]] == \
        [("2", "PUT"), ("1", "POST")]
    assert [e["response"]["status"] for e in instance["entry"]] == ["200 OK", "201 Created"]
    # _lastUpdated search sees the same change set
    found = http.get(f"/fhir/Location?_lastUpdated=ge{since}&_count=100").json()
    assert sorted(int(e["resource"]["id"]) for e in found["entry"]) == [10, 20, 31, 32]


def test_delete_missing_gives_410_and_a_delete_entry(client: tuple[TestClient, Engine]) -> None:
    http, engine = client
    kept = tuple(u for u in UNITS if u.id != 32)
    reload(engine, kept, T1, missing=True)
    gone = http.get("/fhir/Location/32")
    assert gone.status_code == 410 and gone.json()["issue"][0]["code"] == "deleted"
    assert_valid(gone.json())
    assert http.get("/fhir/Location/32/_history/2").status_code == 410
    assert http.get("/fhir/Location/32/_history/1").json()["name"] == "Dispensaire Kéré"
    assert http.get("/fhir/Location/32/$children").status_code == 410
    entries = http.get("/fhir/Location/32/_history").json()["entry"]
    assert entries[0] == {"fullUrl": "http://testserver/fhir/Location/32",
                          "request": {"method": "DELETE", "url": "Location/32"},
                          "response": {"status": "204 No Content", "etag": 'W/"2"',
                                       "lastModified": "2025-04-03T10:20:30Z"}}
    assert 32 not in [int(e["resource"]["id"]) for e in http.get("/fhir/Location?_count=100").json()["entry"]]
    assert http.get("/fhir/Location?name=dispensaire").json()["total"] == 0
    assert http.get("/fhir/Location/10/$children").json()["total"] == 1
    # it comes back with the next load that has it
    reload(engine, UNITS, T2, missing=True)
    back = http.get("/fhir/Location/32").json()
    assert back["meta"]["versionId"] == "3"


def test_delete_missing_refuses_to_orphan_a_kept_unit(client: tuple[TestClient, Engine]) -> None:
    from server.errors import LoadError

    http, engine = client
    with pytest.raises(LoadError, match="parent 10 is not"):
        reload(engine, tuple(u for u in UNITS if u.id != 10), T1, missing=True)
    assert http.get("/fhir/Location/10").status_code == 200


@pytest.mark.parametrize("path, status, code", [
    pytest.param("/fhir/Location/10/_history/9", 404, "not-found", id="unknown-version"),
    pytest.param("/fhir/Location/10/_history/x", 404, "not-found", id="non-numeric-version"),
    pytest.param("/fhir/Location/999/_history/1", 404, "not-found", id="unknown-id-vread"),
    pytest.param("/fhir/Location/999/_history", 404, "not-found", id="unknown-id-history"),
    pytest.param("/fhir/Location/_history?_since=yesterday", 400, "value", id="bad-since"),
    pytest.param("/fhir/Location/_history?_at=2025-13", 400, "value", id="bad-at"),
    pytest.param("/fhir/Location/_history?_count=-1", 400, "value", id="bad-count"),
    pytest.param("/fhir/Location?_lastUpdated=xx2025", 400, "value", id="bad-prefix"),
    pytest.param("/fhir/Location?_lastUpdated=ap2025", 400, "value", id="unsupported-prefix"),
    pytest.param("/fhir/Location?_lastUpdated=2025-02-30", 400, "value", id="impossible-date"),
])
def test_history_errors(client: tuple[TestClient, Engine], path: str, status: int, code: str) -> None:
    http, _ = client
    response = http.get(path)
    assert response.status_code == status and response.json()["issue"][0]["code"] == code


def test_history_paging_and_at(client: tuple[TestClient, Engine]) -> None:
    http, engine = client
    reload(engine, changed(UNITS, **{"30": {"name": "CSPS Ségou 2"}}), T1)
    reload(engine, changed(UNITS, **{"30": {"name": "CSPS Ségou 3"}}), T2)
    seen, url = [], "/fhir/Location/_history?_count=4"
    while url:
        page = http.get(url).json()
        seen += history_ids(page)
        url = next((l["url"] for l in page["link"] if l["relation"] == "next"), None)
    assert len(seen) == len(set(seen)) == len(UNITS) + 2
    assert seen[:2] == [("30", 'W/"3"', "PUT"), ("30", 'W/"2"', "PUT")]
    at = http.get(f"/fhir/Location/30/_history?_at={(T1 + timedelta(days=1)).date().isoformat()}").json()
    assert [e["resource"]["name"] for e in at["entry"]] == ["CSPS Ségou 2"]
    first = http.get("/fhir/Location/30/_history?_at=2025").json()
    assert [e["resource"]["name"] for e in first["entry"]] == ["CSPS Ségou 3", "CSPS Ségou 2", "CSPS Ségou"]
    page = http.get("/fhir/Location/_history?_since=2025-01-01T00:00:00Z&_count=2&colour=x",
                    headers={"Prefer": "handling=lenient"}).json()  # the unknown parameter left out of the links
    assert parse_qsl(urlsplit(page["link"][0]["url"]).query) == [  # the page as read: up to its sync point
        ("_since", "2025-01-01T00:00:00Z"), ("_till", page["meta"]["lastUpdated"]), ("_count", "2")]


LAST_UPDATED = [  # NOW is 2025-03-04T10:20:30Z; every unit has it
    ("eq-year", "2025", True), ("eq-other-year", "2024", False), ("eq-month", "2025-03", True),
    ("eq-day", "2025-03-04", True), ("eq-day-before", "2025-03-03", False), ("eq-instant", "2025-03-04T10:20:30Z", True),
    ("eq-instant-offset", "2025-03-04T11:20:30+01:00", True), ("eq-minute", "2025-03-04T10:20Z", True),
    ("ne-day", "ne2025-03-04", False), ("ne-other", "ne2024", True),
    ("gt-day-before", "gt2025-03-03", True), ("gt-same-day", "gt2025-03-04", False),
    ("ge-same-day", "ge2025-03-04", True), ("lt-next-day", "lt2025-03-05", True), ("lt-same-day", "lt2025-03-04", False),
    ("le-same-day", "le2025-03-04", True), ("le-day-before", "le2025-03-03", False),
    ("sa-year-before", "sa2024", True), ("eb-year-after", "eb2026", True), ("eb-same-year", "eb2025", False),
]


@pytest.mark.parametrize("value, matches", [pytest.param(v, m, id=i) for i, v, m in LAST_UPDATED])
def test_last_updated_prefixes_and_precision(client: tuple[TestClient, Engine], value: str, matches: bool) -> None:
    http, _ = client
    bundle = http.get("/fhir/Location", params={"_lastUpdated": value}).json()
    assert bundle["total"] == (len(UNITS) if matches else 0)
    assert dict(parse_qsl(urlsplit(bundle["link"][0]["url"]).query))["_lastUpdated"] == value


def test_instants_in_history_are_utc_with_seconds() -> None:
    from server.declare.instants import instant

    assert instant(datetime(2025, 3, 4, 10, 20, 30, tzinfo=timezone(timedelta(hours=2)))) == "2025-03-04T08:20:30Z"
    assert instant("2025-03-04T10:20:30.123456+00:00") == "2025-03-04T10:20:30.123Z"
    assert instant(datetime(2025, 3, 4, 10, 20, 30)) == "2025-03-04T10:20:30Z"
