"""The explorer at national scale (issue 40), in a real browser (Debian's chromium, playwright-core, axe-core:
tests/html/explorer_scale.mjs), once per backend, on the 2,000-unit demo served with `fhir.total_threshold: 50`, so
that its searches and maps are past the threshold as the 100,000-unit demo's are past 1,000. Each test is one item of
the issue; what the page shows is checked against what the FHIR API itself answers (every unit read once here)."""
from __future__ import annotations

import json
import unicodedata
import urllib.request
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.support.browser import parts_ran, require_browser, run_script
from tests.support.live import live_server
from tests.support.commands import run_cli

THRESHOLD = 50


def fold(text: str) -> str:
    """As the server folds names (server.params.text.normalize)."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return "".join(c for c in unicodedata.normalize("NFKD", plain.casefold()) if not unicodedata.combining(c)).strip()


def _get(base: str, token: str, path: str, params: dict[str, str] | None = None) -> Any:
    url = f"{base}/{path}" + (f"?{urlencode(params)}" if params else "")
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}",
                                                   "Accept": "application/fhir+json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def _count(base: str, token: str, **params: str) -> int:
    """The server's own exact count of a search (a FHIR client's _summary=count)."""
    return int(_get(base, token, "Location", {**params, "_summary": "count"})["total"])


def _every_unit(base: str, token: str) -> dict[str, dict[str, Any]]:
    units: dict[str, dict[str, Any]] = {}
    params: dict[str, str] | None = {"_count": "100", "_total": "none"}
    path = "Location"
    while params is not None:
        bundle = _get(base, token, path, params)
        units.update({e["resource"]["id"]: e["resource"] for e in bundle.get("entry", [])})
        following = next((link["url"] for link in bundle["link"] if link["relation"] == "next"), None)
        params = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(following).query)) if following else None
    return units


def truth(base: str, token: str) -> dict[str, Any]:
    """What the page must show, from the FHIR API alone: the units below each unit, their points, levels, names."""
    units = _every_unit(base, token)
    parent = {uid: (u.get("partOf") or {}).get("reference", "").removeprefix("Location/") or None
              for uid, u in units.items()}
    below: dict[str, list[str]] = {uid: [] for uid in units}
    for uid in units:
        up = parent[uid]
        while up:
            below[up].append(uid)
            up = parent[up]
    code = lambda u: u["type"][0]["coding"][0]["code"]  # noqa: E731
    positioned = lambda ids: sum(1 for i in ids if "position" in units[i])  # noqa: E731
    regions = sorted((u for u in units.values() if code(u) == "REGION"), key=lambda u: -len(below[u["id"]]))
    region = regions[0]["id"]
    districts = [i for i in below[region] if code(units[i]) == "DISTRICT" and positioned(below[i]) > 30]
    district = districts[0]
    other = next(i for i in below[regions[1]["id"]] if code(units[i]) == "DISTRICT")
    facility = next(i for i in below[district] if "position" in units[i] and code(units[i]) == "CSPS"
                    and units[i].get("status") == "active" and "operationalStatus" not in units[i])
    # a unit whose children sort differently by bytes and by folded names (accents: "Dé" before "Do")
    by_bytes = lambda ids: sorted(ids, key=lambda i: (units[i]["name"].lower(), int(i)))  # noqa: E731
    by_fold = lambda ids: sorted(ids, key=lambda i: (fold(units[i]["name"]), int(i)))  # noqa: E731
    children = {uid: [i for i in units if parent[i] == uid] for uid in units}
    accented = next(uid for uid in sorted(units, key=int) if len(children[uid]) > 1
                    and by_bytes(children[uid]) != by_fold(children[uid]))
    official = next(i for i in units[facility]["identifier"] if i.get("use") == "official")["value"]
    uuid = next(i for i in units[facility]["identifier"] if i["system"] == "urn:ietf:rfc:3986")["value"]
    levels = {}
    for i in below[region]:
        levels[code(units[i])] = levels.get(code(units[i]), 0) + 1
    yesterday, tomorrow = (date.today() + timedelta(days=d) for d in (-1, 1))
    return {
        "country": "1", "region": region, "regionName": units[region]["name"], "district": district,
        "districtName": units[district]["name"], "other": other, "otherName": units[other]["name"],
        "facility": facility, "facilityName": units[facility]["name"], "code": official, "uuid": uuid,
        "points": {"country": positioned(below["1"]), "region": positioned(below[region]),
                   "district": positioned(below[district])},
        "below": {"region": len(below[region]), "district": len(below[district])},
        "regionLevels": levels,
        "accented": accented, "accentedName": units[accented]["name"],
        "accentedChildren": [units[i]["name"] for i in by_fold(children[accented])],
        "regionChildren": len(children[region]),
        "closed": sum(1 for u in units.values() if (u.get("operationalStatus") or {}).get("code") == "C"),
        "centre": _count(base, token, **{"name:contains": "centre"}),
        "csps": _count(base, token, type="CSPS"),
        "cspsActive": _count(base, token, type="CSPS", status="active"),
        "districtLevel": _count(base, token, type="DISTRICT"),
        "yesterday": yesterday.isoformat(), "tomorrow": tomorrow.isoformat(),
        "sinceYesterday": _count(base, token, _lastUpdated=f"ge{yesterday.isoformat()}"),
        "threshold": THRESHOLD,
    }


@pytest.fixture(scope="module")
def found(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    require_browser()
    tmp = tmp_path_factory.mktemp("scale")
    (tmp / "demo.yaml").write_text("")
    run_cli("demo", "--size", "2000", settings=tmp / "demo.yaml", database=backend_url)
    with live_server(tmp, backend_url, f"fhir:\n  total_threshold: {THRESHOLD}\n") as server:
        expected = truth(server.base, server.token)

        def token(*args: str) -> str:
            return run_cli("token", *args, settings=tmp / "settings.yaml", database=backend_url).strip().splitlines()[-1]

        result = run_script(Path(__file__).with_name("explorer_scale.mjs"), {
            "ROOT_URL": server.base.removesuffix("/fhir"), "TOKEN": server.token,
            "DISTRICT_TOKEN": token("--org-unit-root", f"Location/{expected['district']}"),
            "BELOW_TOKEN": token("--claim", f"scope=system/Location.rs?partof:below=Location/{expected['district']}"),
            "CSPS_TOKEN": token("--claim", "scope=system/Location.rs?type=CSPS&status=active"),
            "TRUTH": json.dumps(expected), "SHOTS": str(tmp)}, timeout=600)
        result["truth"] = expected
        yield result


def test_1_counts_are_counts(found: dict[str, Any]) -> None:
    parts_ran(found, "1")
    t = found["truth"]
    assert t["centre"] > THRESHOLD and t["csps"] > THRESHOLD  # past the threshold: Bundle.total is left out
    assert found["centreNote"].startswith(f"{t['centre']:,} by name"), found["centreNote"]
    assert found["centreMoreNote"].startswith(f"{t['centre']:,} by name") and "40 shown" in found["centreMoreNote"]
    assert found["cspsNote"].startswith(f"{t['csps']:,} matching the filters"), found["cspsNote"]
    assert found["pageTitles"] == {
        "estimate": "Bundle (searchset, 20 matches on this page; total not counted)",
        "accurate": f"Bundle (searchset, {t['csps']:,} matches)",
        "ignored": "Bundle (searchset, 2 matches on this page; total not counted)"}, found["pageTitles"]


def test_2_maps_show_every_point_below_a_unit_in_clusters(found: dict[str, Any]) -> None:
    parts_ran(found, "2")
    t = found["truth"]
    assert t["points"]["country"] > 1000  # more than the old map's 10 pages of 100
    assert found["countryMap"]["points"] == str(t["points"]["country"]), found["countryMap"]
    assert int(found["countryMap"]["clusters"]) > 0 and f"{t['points']['country']:,} points" in found["countryNote"]
    assert found["regionMap"]["points"] == str(t["points"]["region"]), found["regionMap"]
    assert f"units below it (points) ({t['points']['region']:,})" in found["regionLegend"], found["regionLegend"]
    assert found["clusterClickZooms"], found


def test_3_one_state_per_selected_unit(found: dict[str, Any]) -> None:
    parts_ran(found, "3")
    for case in ("outage", "outside"):
        state = found[f"stale-{case}"]
        assert state["paths"] == 0 and state["legend"] == "" and state["unit"] is None, state
        assert state["map-note"] != "" and found["truth"]["regionName"] not in state["detail"], state
    assert "503" in found["stale-outage"]["detail"] and found["stale-outage"]["retry"], found["stale-outage"]
    assert "unknown or not visible" in found["stale-outside"]["detail"], found["stale-outside"]
    assert found["afterRetry"] == found["truth"]["facilityName"], found


def test_4_forget_token_clears_the_url_the_form_and_the_history(found: dict[str, Any]) -> None:
    parts_ran(found, "4")
    assert "q=" in found["deskBefore"] and "unit=" in found["deskBefore"], found["deskBefore"]
    assert found["deskAfterForget"] == {"hash": "", "search": "", "type": "", "status": "", "closed": "",
                                        "since": "", "storage": 0}, found["deskAfterForget"]
    assert found["deskBackWithoutToken"] == "", found  # the address bar shows nothing of it either
    assert found["deskNextPerson"] == {"hash": "", "search": "", "opened": False}, found["deskNextPerson"]
    assert found["deskNextBack"] == {"hash": "", "opened": False, "search": ""}, found["deskNextBack"]


def test_5_outages_say_so_and_retry_works_after_recovery(found: dict[str, Any]) -> None:
    parts_ran(found, "5")
    start = found["outageStart"]
    assert "503 Service Unavailable" in start["text"] and "Unexpected token" not in start["text"], start
    assert start["retryDisabled"] and "as the server asked" in start["retryLabel"], start  # Retry-After honoured
    assert found["outageRecovered"] >= 1, found
    node = found["outageNode"]
    assert "could not be reached" in node["text"] and node["retry"], node
    assert found["outageNodeRecovered"] > 0, found
    assert "503 Service Unavailable" in found["outageSearch"] and "Unexpected token" not in found["outageSearch"]
    assert found["outageSearchRecovered"].startswith(f"{found['truth']['centre']:,} by name"), found


def test_6_search_does_what_it_promises(found: dict[str, Any]) -> None:
    parts_ran(found, "6")
    t = found["truth"]
    assert found["byLowerCode"] == t["facilityName"] and found["byCodePrefix"] == t["facilityName"], found
    assert found["byUrnUuid"] == t["facilityName"] and found["byBareUuid"] == t["facilityName"], found
    assert found["doubleSpaces"] == found["singleSpace"] and found["singleSpace"] > 0, found
    assert found["closedNote"].startswith(f"{t['closed']:,} matching the filters"), found["closedNote"]
    assert found["closedFlagged"], found
    assert found["accentedOrder"] == t["accentedChildren"], (found["accentedOrder"], t["accentedChildren"])


def test_7_query_scoped_tokens_get_their_types_roots_and_a_grouped_list(found: dict[str, Any]) -> None:
    parts_ran(found, "7")
    t = found["truth"]
    assert found["cspsTypes"] == ["", "CSPS"], found["cspsTypes"]
    assert found["cspsHeading"] == "Units by parent" and found["cspsGroups"] > 1, found
    assert found["cspsGroupMembers"] and set(found["cspsGroupMembers"]) == {"CSPS"}, found
    assert found["belowRoots"] == [t["districtName"]] and found["belowRootOpened"] == t["districtName"], found
    assert found["belowDetail"].startswith(f"{t['below']['district']:,} units"), found["belowDetail"]
    assert found["belowMap"] == str(t["points"]["district"]), found
    assert found["belowTypes"] != [""], found


def test_8_phone_zoom_keyboard_screen_readers_and_print(found: dict[str, Any]) -> None:
    parts_ran(found, "8-desktop", "8-phone", "8-zoom", "8-print")
    for screen in ("phone", "zoom"):
        layout = found[f"{screen}Layout"]
        assert layout["results"] >= 0.5 * layout["screen"], layout  # the list keeps half the screen
        assert layout["labelLeft"] == layout["pathLeft"], layout  # names and paths aligned
        assert min(layout["targets"]) >= 24, layout
        assert layout["overflow"] <= 0, layout
    assert found["tabsToDetail"] <= 12, found["tabsToDetail"]  # not one per map shape
    assert found["mapShapesTabbable"] == 0, found
    assert found["mapListLinks"] > 0, found
    assert found["liveRegions"] == ["status"], found["liveRegions"]
    assert found["printed"] == {"side": "none", "bar": "none", "buttons": 0, "detail": True, "map": True}, found
    screens = {"login", "tree", "detail", "search", "error", "grouped", "group-detail", "fhir-page", "fhir-401",
               "history", "phone-tree", "phone-detail", "phone-search", "phone-401", "zoom-tree", "zoom-search",
               "zoom-detail"}
    assert screens <= set(found["audited"]), sorted(screens - set(found["audited"]))
    assert found["violations"] == [], found["violations"]


def test_9_week_one_features(found: dict[str, Any]) -> None:
    parts_ran(found, "9")
    t = found["truth"]
    levels = t["regionLevels"]
    text = found["regionBelow"]
    assert text.startswith(f"{t['below']['region']:,} units: "), text
    assert f"{levels['DISTRICT']:,} District sanitaire" in text and f"{levels['HEALTH_AREA']:,} Aire de santé" in text
    assert found["regionBadge"] == f"{t['below']['region']:,}", found
    csv_lines = found["csvExport"]
    assert csv_lines["name"] == f"locations-{t['district']}.csv" and csv_lines["lines"] == t["below"]["district"] + 2
    assert csv_lines["header"].startswith("\ufeffid,name,type"), csv_lines
    assert found["exportWhileSearching"] is False  # the former filters' results are not offered for export
    geo = found["geojsonExport"]
    assert geo["name"] == "locations-search.geojson" and geo["features"] == t["cspsActive"], geo
    assert found["copied"] == {"id": t["facility"], "code": t["code"], "uuid": t["uuid"]}, found["copied"]
    assert found["sinceNote"].startswith(f"{t['sinceYesterday']:,} changed since"), found["sinceNote"]
    assert found["sinceTomorrow"].startswith("0 changed since"), found["sinceTomorrow"]
    assert found["levelNote"].startswith(f"{t['districtLevel']:,} matching the filters"), found
    assert set(found["levelTypes"]) == {"District sanitaire"}, found["levelTypes"]
