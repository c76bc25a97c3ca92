"""The explorer for the people who use a registry (issue 26), in a real browser (Debian"s chromium driven by
playwright-core, tests/html/explorer_users.mjs, run once per backend): a district officer"s subtree token, a shared
desk"s "Forget token", links and Back, search inside names and by code, maps above the facilities, the detail, the
FHIR pages, and an axe-core audit of every screen."""
from __future__ import annotations

import re
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import parts_ran, require_browser, run_script, square_boundary
from tests.support.live import live_server
from tests.support.commands import run_cli

SID = "https://example.org/sid/collines"
EXT = "https://orgunit-fhir.example.org/fhir/StructureDefinition/"


def _unit(uid: str, name: str, parent: str | None, lat: float | None = None, lon: float | None = None,
          **extra: Any) -> dict[str, Any]:
    resource: dict[str, Any] = {"resourceType": "Location", "id": uid, "name": name,
                                "identifier": [{"system": SID, "value": uid}], **extra}
    if parent:
        resource["partOf"] = {"reference": f"Location/{parent}"}
    if lat is not None:
        resource["position"] = {"latitude": lat, "longitude": lon}
    return {"fullUrl": f"urn:x:{uid}", "resource": resource}


def users_bundle() -> dict[str, Any]:
    """A country; a northern region and its districts without any boundary (facilities with points, one closed
    and inactive); a southern region and district with boundaries and 25 facilities (more than a search page)."""
    return {"resourceType": "Bundle", "type": "collection", "entry": [
        _unit("pays", "Pays des Collines", None),
        _unit("nord", "Région Nord", "pays"),
        _unit("kaya", "District de Kaya", "nord"),
        _unit("diak01", "CSPS Diakaba", "kaya", 13.09, -1.08,
              extension=[{"url": EXT + "opening-date", "valueDate": "2021-03-05"}]),
        _unit("kaya-cma", "CMA de Kaya", "kaya", 13.10, -1.09),
        _unit("ferme", "CSPS Fermé", "kaya", 13.05, -1.02, status="inactive",
              extension=[{"url": EXT + "closing-date", "valueDate": "2020-01-31"}]),
        _unit("ouahi", "District de Ouahigouya", "nord"),
        _unit("ouahi-1", "CSPS Ouahigouya Secteur 1", "ouahi", 13.58, -2.42),
        _unit("sud", "Région Sud", "pays", extension=[square_boundary(11.2, -1.1, 0.6)]),
        _unit("po", "District de Pô", "sud", extension=[square_boundary(11.2, -1.1, 0.3)]),
        *(_unit(f"sud{n:02d}", f"CSPS Sud-Tiébélé {n:02d}", "po", 11.0 + n / 100, -1.2 + n / 100)
          for n in range(25, 0, -1)),
    ]}


def _ids(base: str, token: str) -> dict[str, str]:
    """Bundle id (the source reference) -> the server"s id."""
    request = urllib.request.Request(f"{base}/Location?_count=100&_elements=identifier",
                                     headers={"Authorization": f"Bearer {token}", "Accept": "application/fhir+json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        bundle = json.load(response)
    return {i["value"]: e["resource"]["id"] for e in bundle["entry"] for i in e["resource"].get("identifier", [])
            if i.get("system") == SID}


@pytest.fixture(scope="module")
def found(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    require_browser()
    tmp = tmp_path_factory.mktemp("users")
    settings = tmp / "load.yaml"
    settings.write_text("")
    bundle = tmp / "bundle.json"
    bundle.write_text(json.dumps(users_bundle()), encoding="utf-8")
    run_cli("load", "fhir-bundle", str(bundle), settings=settings, database=backend_url)
    with live_server(tmp, backend_url) as server:
        ids = _ids(server.base, server.token)
        sub = run_cli("token", "--org-unit-root", f"Location/{ids['kaya']}", settings=tmp / "settings.yaml",
                      database=backend_url).strip().splitlines()[-1]
        result = run_script(Path(__file__).with_name("explorer_users.mjs"), {
            "ROOT_URL": server.base.removesuffix("/fhir"), "TOKEN": server.token, "SUB_TOKEN": sub,
            "IDS": json.dumps(ids), "SHOTS": str(tmp)}, timeout=300)
        result["ids"] = ids
        yield result


def test_1_a_subtree_token_sees_its_subtree_and_the_visible_part_of_a_chain(found: dict[str, Any]) -> None:
    parts_ran(found, "1")
    assert found["subtreeRoots"] == ["District de Kaya"], found
    assert found["subtreeChain"] == ["…", "District de Kaya", "CSPS Diakaba"], found  # hidden parents: "…"
    assert found["subtreeSelected"] == ["CSPS Diakaba"], found
    assert found["pageErrors"] == [], found  # no uncaught 404


def test_2_forgetting_the_token_clears_every_cache_and_screen(found: dict[str, Any]) -> None:
    parts_ran(found, "2")
    assert found["fullChain"] == ["Pays des Collines", "Région Nord", "District de Kaya", "CSPS Diakaba"], found
    assert found["afterForget"] == {"tree": 0, "detail": False, "results": 0, "paths": 0, "appHidden": True}, found
    assert found["hashAfterForget"] == "" and found["openedAfterNewToken"] is False, found  # the URL forgot it too
    assert found["rootsAfterNewToken"] == ["District de Kaya"], found
    assert found["chainAfterNewToken"] == ["…", "District de Kaya", "CSPS Diakaba"], found  # not the cached chain
    assert found["readsAfterNewToken"] >= 1, found  # read again with the new token


def test_3_the_selected_unit_and_the_search_are_in_the_url(found: dict[str, Any]) -> None:
    parts_ran(found, "3")
    ids = found["ids"]
    assert found["selectedHash"] == f"#unit={ids['diak01']}", found
    assert found["backShows"] == "District de Kaya", found
    assert found["reloadSelected"] == ["CSPS Diakaba"], found  # restored and revealed in the tree
    assert found["ctrlClickHash"] == f"#unit={ids['kaya-cma']}" and found["ctrlClickShows"] == "CMA de Kaya", found
    assert found["stayedOn"] == "CSPS Diakaba", found  # the Ctrl+click opened a tab, not this one
    assert "q=diakaba" in found["searchHash"] and f"unit={ids['diak01']}" in found["searchHash"], found


def test_4_search_inside_names_sorted_paged_with_paths_codes_and_ids(found: dict[str, Any]) -> None:
    parts_ran(found, "4")
    assert found["containsFound"] == ["CSPS Diakaba"], found  # "diakaba" inside "CSPS Diakaba"
    assert found["containsPath"] == "Pays des Collines › Région Nord › District de Kaya", found
    assert found["firstPage"] == 20 and "25 by name" in found["pageNote"], found
    assert found["allPages"] == [f"CSPS Sud-Tiébélé {n:02d}" for n in range(1, 26)], found  # sorted, every page
    assert found["moreHidden"], found
    assert found["byCode"] == "CSPS Diakaba" and found["byId"] == "CMA de Kaya", found
    assert found["pickedRevealed"] and found["pickedFocused"] == "CSPS Sud-Tiébélé 17", found


def test_5_maps_above_the_facilities_with_labels_and_a_legend(found: dict[str, Any]) -> None:
    parts_ran(found, "5")
    assert found["regionPoints"] == 4, found  # a region without geometry: its facilities" points
    assert "units below it (points) (4)" in found["regionLegend"], found
    assert "CSPS Diakaba" in found["regionLabels"], found
    assert "District de Pô" in found["sudLabels"] and "areas of its children (1)" in found["sudLegend"], found
    assert "the other units of its parent (points) (2)" in found["facilityLegend"], found  # a facility's neighbours


def test_6_the_detail_and_the_tree_read_as_people_expect(found: dict[str, Any]) -> None:
    parts_ran(found, "6-tree", "3", "6-expiry")
    assert found["identifiers"] == ["collines diak01 (official)"], found  # labelled by system, not the raw URL
    assert found["openingDate"] == "5 Mar 2021", found
    assert re.fullmatch(r"1 \(\d{1,2} [A-Z][a-z]{2} \d{4}, \d\d:\d\d UTC\)", found["version"]), found  # not ISO
    assert found["historyUpdated"].endswith(" UTC"), found
    assert found["kayaChildren"].startswith("3 "), found  # children counted by type (one type here)
    assert found["leafHasArrow"] is False and found["districtHasArrow"] == "false", found
    assert found["closedFlags"] == ["inactive", "closed"], found
    assert "401" in found["expiredMessage"], found
    assert found["restored"] == {"search": "diakab", "results": ["CSPS Diakaba"], "selected": ["CSPS Diakaba"]}, found


def test_7_fhir_pages_show_warnings_first_and_a_table_of_entries(found: dict[str, Any]) -> None:
    parts_ran(found, "7")
    assert found["warningFirst"] and found["entriesRows"] == 3, found  # two matches and the warning


def test_8_every_screen_passes_axe_and_fits_a_phone(found: dict[str, Any]) -> None:
    parts_ran(found, "8-login", "3", "4", "7", "8-phone")
    assert found["audited"] == ["login", "tree", "detail", "search", "history", "fhir-page", "phone"], found
    assert found["violations"] == [], found["violations"]
    assert found["favicon"] and set(found["favicon"]) <= {200, 304}, found
    assert min(found["phoneRowHeights"]) >= 44, found
    layout = found["phoneLayout"]
    assert layout["map"] < layout["detail"] and layout["map"] < 1.2 * layout["screen"], layout
    assert layout["overflow"] <= 0, layout
