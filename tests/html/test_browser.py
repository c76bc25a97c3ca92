"""The explorer and the HTML pages in a real browser (Debian's chromium driven by playwright-core):
tests/html/explorer.mjs pastes a token, walks the tree to a facility, finds a unit by name without its accents,
opens its detail, history and map, follows the link to its FHIR JSON and forgets the token; screenshots go to
the test's directory (docs/ with ORGUNIT_FHIR_SCREENSHOTS=1)."""
from __future__ import annotations

import os

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import ROOT, require_browser, run_script, square_boundary
from tests.support.live import LiveServer, live_server
from tests.support.commands import run_cli

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
XSS = "<img src=x onerror=alert(1)>"
@pytest.fixture(autouse=True)
def browser() -> None:
    """A browser test that cannot run fails (`make test` installs what it needs), as the nginx tests do."""
    require_browser()


def _unit(uid: str, name: str, parent: str | None, **extra: Any) -> dict[str, Any]:
    resource = {"resourceType": "Location", "id": uid, "name": name, **extra}
    if parent:
        resource["partOf"] = {"reference": f"Location/{parent}"}
    return {"fullUrl": f"urn:x:{uid}", "resource": resource}


def explorer_bundle(peni_alias: str) -> dict[str, Any]:
    """A country, two regions, a district with a boundary and five facilities (four with a position, one named
    like an XSS attempt, one inactive)."""
    point = lambda lat, lon: {"latitude": lat, "longitude": lon}
    return {"resourceType": "Bundle", "type": "collection", "entry": [
        _unit("country", "République du Kénédougou", None, extension=[square_boundary(12.0, -2.0, 3.0)]),
        _unit("hauts-bassins", "Région des Hauts-Bassins", "country", extension=[square_boundary(11.5, -4.0, 1.0)]),
        _unit("centre", "Région du Centre", "country", extension=[square_boundary(12.4, -1.5, 0.8)]),
        _unit("dande", "District de Dandé", "hauts-bassins", extension=[square_boundary(11.4, -4.1, 0.3)]),
        _unit("peni", "CSPS Péni", "dande", position=point(11.45, -4.2), alias=[peni_alias]),
        _unit("sindou", "CSPS Sindou", "dande", position=point(11.30, -4.05)),
        _unit("karangasso", "Dispensaire de Karangasso", "dande", position=point(11.50, -3.95)),
        _unit("xss", XSS, "dande", position=point(11.35, -4.25)),
        _unit("ferme", "CSPS Fermé", "dande", status="inactive"),
    ]}


@pytest.fixture
def explorer_server(database_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    settings = tmp_path / "settings.yaml"
    settings.write_text("")
    for version, alias in ((1, "Péni village"), (2, "Péni centre")):  # two versions of CSPS Péni: a history
        path = tmp_path / f"bundle-{version}.json"
        path.write_text(json.dumps(explorer_bundle(alias)), encoding="utf-8")
        run_cli("load", "fhir-bundle", str(path), "--version", str(version), settings=settings,
                database=database_url)
    with live_server(tmp_path, database_url) as server:
        yield server


def _get(url: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["content-type"], response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["content-type"], error.read()


def test_explorer_in_a_browser(explorer_server: LiveServer, database_url: str) -> None:
    from fhirpy import SyncFHIRClient

    server = explorer_server
    client = SyncFHIRClient(server.base, authorization=f"Bearer {server.token}")
    peni = client.resources("Location").search(name="csps peni").first()
    assert peni is not None and peni["name"] == "CSPS Péni"  # fhirpy: JSON, as before
    status, media, body = _get(f"{server.base}/Location/{peni.id}", {"Accept": BROWSER,
                                                                       "Authorization": f"Bearer {server.token}"})
    assert (status, media) == (200, "text/html;charset=utf-8") and b"CSPS P\xc3\xa9ni" in body
    status, media, body = _get(f"{server.base}/Location/{peni.id}", {"Accept": "application/fhir+json",
                                                                       "Authorization": f"Bearer {server.token}"})
    assert (status, media, json.loads(body)["name"]) == (200, "application/fhir+json;charset=utf-8", "CSPS Péni")

    # the screenshots of README are refreshed on demand (ORGUNIT_FHIR_SCREENSHOTS=1 make test); else they are
    # taken (the browser draws every step) into the test's own directory
    refresh = os.environ.get("ORGUNIT_FHIR_SCREENSHOTS") == "1" and database_url.startswith("sqlite")
    shots = ROOT / "docs" if refresh else Path(server.log).parent
    result = run_script(Path(__file__).with_name("explorer.mjs"), {
        "ROOT_URL": server.base.removesuffix("/fhir"), "TOKEN": server.token, "SHOTS": str(shots),
        "PENI_ID": peni.id})
    assert result["dialogs"] == [], result  # the XSS-named unit never ran as HTML
    assert result["cspViolations"] == [], result
    assert result["childMarkers"] == 4 and result["selectedBoundaries"] == 1, result
    assert result["countryChildBoundaries"] == 2 and result["keyboardSelected"] == "District de Dandé", result
    assert result["xssShownAsText"] and result["xssImages"] == 0, result
    assert result["searchFound"] == "CSPS Péni" and result["chain"][-2:] == ["District de Dandé", "CSPS Péni"]
    assert result["historyRows"] == 2 and "Péni centre" in result["aliases"], result
    assert result["inactiveFound"] == ["CSPS Fermé"], result
    assert result["fhirPageHeading"] == f"Location/{peni.id}" and result["fhirPageHasName"], result
    assert result["rawJson"]["name"] == "CSPS Péni", result
    assert result["tokenForgotten"] and result["tokenNeverInUrl"], result
    assert result["phoneOverflow"] <= 0, result
    # the token is in no log line but the ready token `serve --demo` prints for the operator (the same bytes when
    # minted within the same second: same claims, same signature)
    lines = server.log.read_text().splitlines()
    printed = {i + 1 for i, line in enumerate(lines) if "token valid for" in line}
    assert not [line for i, line in enumerate(lines) if server.token in line and i not in printed]
