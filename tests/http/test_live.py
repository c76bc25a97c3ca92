"""A live server checked by the shared independent checker and driven by real FHIR clients."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.contexts import IASO_CSV, REAL_DATA
from tests.support.live import LiveServer, live_server
from tests.support.commands import run_cli

FHIRCHECK = REAL_DATA.parents[1] / "conformance" / "fhircheck.py"


@pytest.fixture(scope="module")
def demo_server(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("demo")
    if backend_url.startswith("postgresql"):
        (tmp / "settings.yaml").write_text("")
        run_cli("demo", "--size", "1500", settings=tmp / "settings.yaml", database=backend_url)
    with live_server(tmp, backend_url) as server:  # SQLite: serve creates the demo itself
        yield server


def fhircheck(server: LiveServer, *extra: str) -> str:
    done = subprocess.run([sys.executable, str(FHIRCHECK), "live", "--base", server.base, "--token", server.token,
                           *extra], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.rstrip().endswith(" 0 failed"), done.stdout[-4000:]
    return done.stdout


def test_shared_checker_passes_on_demo_data(demo_server: LiveServer) -> None:
    fhircheck(demo_server, "--pages", "30", "--sample", "15")


def test_shared_checker_passes_with_real_data(database_url: str, tmp_path: Path) -> None:
    """Iaso (CSV, then its GeoPackage with boundaries) and DHIS2 Sierra Leone (FHIR Bundle) in one server, which
    counts every search of them (1,468 units: past the default fhir.total_threshold, as an operator of a registry
    this size may set it): the checker's walk compares the ids of every page with Bundle.total."""
    (tmp_path / "settings.yaml").write_text("")
    for fmt, path in (("iaso-csv", IASO_CSV), ("iaso-gpkg", IASO_CSV.with_suffix(".gpkg")),
                      ("fhir-bundle", REAL_DATA / "dhis2_sierra_leone_fhir" / "orgUnits.bundle.json")):
        run_cli("load", fmt, str(path), settings=tmp_path / "settings.yaml", database=database_url)
    with live_server(tmp_path, database_url, "fhir:\n  total_threshold: 5000\n") as server:
        out = fhircheck(server, "--pages", "40", "--sample", "30")
    assert "walking every page yields Bundle.total ids" in out


def test_fhirpy_drives_the_server(demo_server: LiveServer) -> None:
    from fhirpy import SyncFHIRClient

    client = SyncFHIRClient(demo_server.base, authorization=f"Bearer {demo_server.token}")
    active = client.resources("Location").search(status="active").limit(100).fetch_all()
    assert active and all(loc["status"] == "active" for loc in active)
    assert len({loc.id for loc in active}) == len(active)
    total = client.resources("Location").search(status="active").count()
    assert total == len(active)
    first = active[0]
    assert client.reference("Location", first.id).to_resource()["name"] == first["name"]
    if first.get("partOf"):
        parent = first["partOf"]["reference"].split("/")[1]
        siblings = client.resources("Location").search(partof=parent).fetch_all()
        assert first.id in {s.id for s in siblings}
    found = client.resources("Location").search(name=first["name"][:4]).fetch_all()
    assert first.id in {f.id for f in found}


def test_fhirclient_reads_capabilities_and_locations(demo_server: LiveServer) -> None:
    from fhirclient import client as fc
    from fhirclient.models.location import Location

    smart = fc.FHIRClient(settings={"app_id": "test", "api_base": demo_server.base})
    smart.server.session.headers["Authorization"] = f"Bearer {demo_server.token}"
    smart.prepare()
    assert smart.server.capabilityStatement.fhirVersion == "4.0.1"
    bundle = Location.where(struct={"_count": "5", "status": "active"}).perform(smart.server)
    assert len(bundle.entry) == 5 and all(e.resource.status == "active" for e in bundle.entry)
    assert Location.read(bundle.entry[0].resource.id, smart.server).id == bundle.entry[0].resource.id


def test_fhirpy_drives_search_depth(demo_server: LiveServer) -> None:
    from fhirpy import SyncFHIRClient

    client = SyncFHIRClient(demo_server.base, authorization=f"Bearer {demo_server.token}")
    locations = client.resources("Location")
    total = locations.search(status="active").count()  # fhirpy asks _summary=count
    assert total == len(locations.search(status="active").limit(100).fetch_all())
    by_name = locations.search(status="active").sort("name").limit(20).fetch()
    names = [loc["name"].lower() for loc in by_name]
    assert names == sorted(names)
    newest = locations.sort("-_lastUpdated").limit(5).fetch()
    assert len(newest) == 5
    facility = next(loc for loc in locations.sort("-_id").limit(50).fetch() if loc.get("position"))
    lat, lon = facility["position"]["latitude"], facility["position"]["longitude"]
    near = locations.search(near=f"{lat}|{lon}|5|km").limit(10).fetch()
    assert near and near[0].id == facility.id
    with_parents = locations.search(_id=facility.id).include("Location", "partof").fetch_raw()
    modes = {e["search"]["mode"] for e in with_parents["entry"]}
    assert modes == {"match", "include"} and with_parents["total"] == 1
    elements = locations.search(_id=facility.id).elements("name").fetch()
    assert set(elements[0]) <= {"resourceType", "id", "meta", "name"}


def test_fhirclient_drives_sort_and_include(demo_server: LiveServer) -> None:
    from fhirclient import client as fc
    from fhirclient.models.location import Location

    smart = fc.FHIRClient(settings={"app_id": "test", "api_base": demo_server.base})
    smart.server.session.headers["Authorization"] = f"Bearer {demo_server.token}"
    bundle = Location.where(struct={"_sort": "-_id", "_count": "5", "_include": "Location:partof"}).perform(smart.server)
    matches = [e.resource.id for e in bundle.entry if e.search.mode == "match"]
    assert matches == sorted(matches, key=int, reverse=True) and len(matches) == 5
    counted = Location.where(struct={"_summary": "count"}).perform(smart.server)
    assert counted.total > 0 and not counted.entry
    located = next(e.resource for e in Location.where(struct={"_sort": "-_id", "_count": "50"}).perform(
        smart.server).entry if e.resource.position)
    near = Location.where(struct={"near": f"{located.position.latitude}|{located.position.longitude}|2|km"}).perform(
        smart.server)
    assert near.entry[0].resource.id == located.id
    assert near.entry[0].search.extension[0].valueDistance.code == "km"


def test_shared_checker_passes_with_organization_off(database_url: str, tmp_path: Path) -> None:
    (tmp_path / "settings.yaml").write_text("")
    run_cli("load", "iaso-csv", str(IASO_CSV), settings=tmp_path / "settings.yaml", database=database_url)
    with live_server(tmp_path, database_url, "plugins:\n  organization:\n    enabled: false\n") as server:
        fhircheck(server, "--pages", "3", "--sample", "10")
