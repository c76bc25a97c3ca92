"""Issue 36 item 4: a kept version is shown only to whoever could read it while it was current, on both backends.
A unit moved from one district to another shows each district the versions it held there; a unit whose id passed
to another account (its data source removed, its file loaded into the right account) never shows that account the
first one's versions. (Both were scoped by the current row: the new district read the versions of before the move,
the old one lost its own, and the second account read the first one's.)"""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from starlette.testclient import TestClient

from plugins.orgunits.admin import remove_source
from plugins.orgunits.writer import ensure_data_source, ensure_source_version, ensure_types, write_units
from server.engine.context import ServerContext
from tests.support.contexts import bearer
from tests.support.data import NOW, TYPES, UNITS

MOVED = 32  # Dispensaire Kéré: under district 10, then under district 11


@pytest.fixture
def api(pyramid_api: tuple[TestClient, ServerContext]) -> tuple[TestClient, ServerContext]:
    return pyramid_api


def _versions(client: TestClient, rid: int, headers: dict[str, str]) -> list[str] | int:
    """Its history as the caller is shown it: `2` a version, `2-` a deletion (or a departure)."""
    answer = client.get(f"/fhir/Location/{rid}/_history", headers=headers)
    if answer.status_code != 200:
        return answer.status_code
    return [e["response"]["etag"][3:-1] + ("-" if e["request"]["method"] == "DELETE" else "")
            for e in answer.json()["entry"]]


def _move(ctx: ServerContext) -> None:
    with ctx.db.begin() as conn:
        version = ensure_source_version(conn, ensure_data_source(conn, "Ministère de la Santé"), 3)
        write_units(conn, tuple(replace(u, parent_id=11) if u.id == MOVED else u for u in UNITS), version,
                    NOW + timedelta(days=1))
    ctx.freshness.expire()


# the district it left keeps its versions and is told it left: version 2 is a deletion in its view (issue 37 item
# 6: a departure, so its sync copy drops the unit); the one it entered sees the new version only
@pytest.mark.parametrize(("roots", "read", "history", "vreads"), [
    pytest.param(["Location/10"], 404, ["2-", "1"], {1: 200, 2: 410}, id="the-district-it-left-keeps-its-versions"),
    pytest.param(["Location/11"], 200, ["2"], {1: 404, 2: 200}, id="the-district-it-entered-sees-the-new-one"),
    pytest.param(["Location/2"], 200, ["2", "1"], {1: 200, 2: 200}, id="the-region-above-both-sees-both"),
    pytest.param(None, 200, ["2", "1"], {1: 200, 2: 200}, id="the-whole-account-sees-both"),
    pytest.param(["Location/3"], 404, 404, {1: 404, 2: 404}, id="another-region-sees-none"),
])
def test_a_moved_unit_shows_each_subtree_the_versions_it_held_there(api: tuple[TestClient, ServerContext],
                                                                    roots: list[str] | None, read: int,
                                                                    history: Any, vreads: dict[int, int]) -> None:
    client, ctx = api
    _move(ctx)
    headers = bearer(ctx.settings, **({"org_unit_roots": roots} if roots is not None else {}))
    assert client.get(f"/fhir/Location/{MOVED}", headers=headers).status_code == read
    assert _versions(client, MOVED, headers) == history
    for vid, status in vreads.items():
        assert client.get(f"/fhir/Location/{MOVED}/_history/{vid}", headers=headers).status_code == status, vid
    walked = client.get("/fhir/Location/_history", params={"_count": 100}, headers=headers).json()
    kept = [e["response"]["etag"][3:-1] + ("-" if e["request"]["method"] == "DELETE" else "")
            for e in walked.get("entry", ()) if e["fullUrl"].endswith(f"/Location/{MOVED}")]
    assert kept == (history if isinstance(history, list) else [])


def _loaded_into_another_account(ctx: ServerContext) -> None:
    """The pyramid's data source removed from the default account and its file loaded into account "bf"."""
    with ctx.db.begin() as conn:
        remove_source(conn, "default", "Ministère de la Santé", force=True, now=NOW + timedelta(days=1))
        source = ensure_data_source(conn, "Ministère de la Santé", now=NOW, account="bf")
        ensure_types(conn, TYPES, account="bf")
        write_units(conn, UNITS, ensure_source_version(conn, source, 1), NOW + timedelta(days=2))
    ctx.freshness.expire()


def test_a_unit_of_another_account_shows_none_of_its_versions_of_before(api: tuple[TestClient, ServerContext]) -> None:
    """The file was loaded into the wrong account: removed there, loaded into the right one (README "Undoing a
    mistake"): the same ids, new versions. The right account's token sees its own versions only."""
    client, ctx = api
    _loaded_into_another_account(ctx)
    headers = bearer(ctx.settings, account="bf")
    for unit in UNITS:
        assert client.get(f"/fhir/Location/{unit.id}", headers=headers).json()["meta"]["versionId"] == "3"
        assert _versions(client, unit.id, headers) == ["3"]
        for vid in (1, 2):
            assert client.get(f"/fhir/Location/{unit.id}/_history/{vid}", headers=headers).status_code == 404
    walked = client.get("/fhir/Location/_history", params={"_count": 100}, headers=headers).json()
    assert {e["response"]["etag"] for e in walked["entry"]} == {'W/"3"'}
    assert walked["total"] == len(UNITS)


def test_versions_published_before_a_newer_source_version_stay_shown(api: tuple[TestClient, ServerContext]) -> None:
    """Loaded again under a newer source version (DHIS2, a FHIR Bundle: ids kept by source reference), the units move
    to it: their versions of the version no longer served were read while it was, and stay in their history."""
    client, ctx = api
    with ctx.db.begin() as conn:
        version = ensure_source_version(conn, ensure_data_source(conn, "Ministère de la Santé"), 4)
        write_units(conn, UNITS, version, NOW + timedelta(days=1))
    ctx.freshness.expire()
    for headers in (bearer(ctx.settings), bearer(ctx.settings, org_unit_roots=["Location/10"])):
        assert _versions(client, MOVED, headers) == ["2", "1"]
        assert client.get(f"/fhir/Location/{MOVED}/_history/1", headers=headers).status_code == 200

AREA = 20  # Aire de Ségou, with facilities 30 and 31 below it: under district 10, then under district 11


def _move_area(ctx: ServerContext) -> None:
    with ctx.db.begin() as conn:
        version = ensure_source_version(conn, ensure_data_source(conn, "Ministère de la Santé"), 3)
        write_units(conn, tuple(replace(u, parent_id=11) if u.id == AREA else u for u in UNITS), version,
                    NOW + timedelta(days=1))
    ctx.freshness.expire()


# the units below a moved one move with it: each gets a version at the move (issue 36 review: they had none, so the
# district they left saw them vanish without an entry and kept them in its copy for ever, and the district they
# entered never received them in its `_since` walk, and read their versions of before the move)
@pytest.mark.parametrize(("roots", "read", "entries", "vreads"), [
    pytest.param(["Location/10"], 404, {"20": "2-", "30": "2-", "31": "2-"}, {1: 200, 2: 410},
                 id="the-district-they-left-is-told-each-left"),
    pytest.param(["Location/11"], 200, {"20": "2", "30": "2", "31": "2"}, {1: 404, 2: 200},
                 id="the-district-they-entered-receives-each"),
    pytest.param(["Location/2"], 200, {"20": "2", "30": "2", "31": "2"}, {1: 200, 2: 200},
                 id="the-region-above-both-sees-both"),
    pytest.param(None, 200, {"20": "2", "30": "2", "31": "2"}, {1: 200, 2: 200}, id="the-whole-account"),
    pytest.param(["Location/3"], 404, {}, {1: 404, 2: 404}, id="another-region-sees-none"),
])
def test_the_units_below_a_moved_one_leave_and_enter_with_it(api: tuple[TestClient, ServerContext],
                                                             roots: list[str] | None, read: int,
                                                             entries: dict[str, str], vreads: dict[int, int]) -> None:
    client, ctx = api
    headers = bearer(ctx.settings, **({"org_unit_roots": roots} if roots is not None else {}))
    _move_area(ctx)
    walked = client.get("/fhir/Location/_history", params={"_since": "2025-03-05T00:00:00Z", "_count": 100},
                        headers=headers).json()
    assert {e["fullUrl"].rsplit("/", 1)[1]: e["response"]["etag"][3:-1] +
            ("-" if e["request"]["method"] == "DELETE" else "") for e in walked.get("entry", ())} == entries
    for rid in (AREA, 30, 31):
        assert client.get(f"/fhir/Location/{rid}", headers=headers).status_code == read, rid
        for vid, status in vreads.items():
            assert client.get(f"/fhir/Location/{rid}/_history/{vid}", headers=headers).status_code == status, \
                (rid, vid)


# a token of subtree roots AND a scope query is told the departures of its roots too (an attacker's walk of
# 2026-12-01: it was told none, so its copy kept a unit moved out of its district for ever, which it could no longer
# read); a departure names no content, and the query is proven on the current row only, so every unit that left
# is told, as a roots-only token is
@pytest.mark.parametrize(("scope", "entries", "read"), [
    pytest.param("system/Location.rs?type=CSPS", {"20": "2-", "30": "2-", "31": "2-"}, {"32": 200},
                 id="left-the-roots"),
    pytest.param("system/Location.rs?_id=20,31", {"20": "2-", "30": "2-", "31": "2-"}, {},
                 id="left-the-roots-matching-or-not"),
])
def test_a_query_scoped_token_with_roots_is_told_what_left_its_roots(api: tuple[TestClient, ServerContext],
                                                                    scope: str, entries: dict[str, str],
                                                                    read: dict[str, int]) -> None:
    client, ctx = api
    headers = bearer(ctx.settings, org_unit_roots=["Location/10"], scope=scope)
    _move_area(ctx)
    walked = client.get("/fhir/Location/_history", params={"_since": "2025-03-05T00:00:00Z", "_count": 100},
                        headers=headers).json()
    assert {e["fullUrl"].rsplit("/", 1)[1]: e["response"]["etag"][3:-1] +
            ("-" if e["request"]["method"] == "DELETE" else "") for e in walked.get("entry", ())} == entries
    for rid in (AREA, 30, 31, 32):
        assert client.get(f"/fhir/Location/{rid}", headers=headers).status_code == read.get(str(rid), 404), rid


# -- a root names its places of before too (an attacker's walk of 2026-12-01): a token rooted at a unit that moved
# lost what was below it before the move, and a token of an account whose data source was removed and loaded into
# another account lost its roots' subtree altogether (404, an empty history: its copy was never told how it ended)


def test_a_root_that_moved_still_names_what_was_below_it_before(api: tuple[TestClient, ServerContext]) -> None:
    client, ctx = api
    _move_area(ctx)
    headers = bearer(ctx.settings, org_unit_roots=[f"Location/{AREA}"])
    for rid in (AREA, 30, 31):
        assert _versions(client, rid, headers) == ["2", "1"], rid
        assert client.get(f"/fhir/Location/{rid}/_history/1", headers=headers).status_code == 200, rid
        assert client.get(f"/fhir/Location/{rid}", headers=headers).status_code == 200, rid
    for rid in (10, 11, 32):  # never below it
        assert client.get(f"/fhir/Location/{rid}", headers=headers).status_code == 404, rid
        assert _versions(client, rid, headers) == 404, rid


def test_a_root_loaded_into_another_account_still_tells_the_first_how_it_ended(
        api: tuple[TestClient, ServerContext]) -> None:
    client, ctx = api
    _loaded_into_another_account(ctx)
    first = bearer(ctx.settings, account="default", org_unit_roots=["Location/10"])
    for rid in (10, 20, 30, 31, 32):
        assert _versions(client, rid, first) == ["2-", "1"], rid
        assert client.get(f"/fhir/Location/{rid}/_history/1", headers=first).status_code == 200, rid
        assert client.get(f"/fhir/Location/{rid}/_history/3", headers=first).status_code == 404, rid  # bf's
    walked = client.get("/fhir/Location/_history", params={"_since": "2025-03-05T00:00:00Z", "_count": 100},
                        headers=first).json()
    assert sorted(e["fullUrl"].rsplit("/", 1)[1] for e in walked["entry"] if e["request"]["method"] == "DELETE") == \
        ["10", "20", "30", "31", "32"]
    assert all(e["request"]["method"] == "DELETE" for e in walked["entry"])
    for rid in (2, 3, 11):  # never below it
        assert _versions(client, rid, first) == 404, rid
