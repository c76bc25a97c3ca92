"""A live server checked by the shared independent checker and driven by real FHIR clients."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import pg
from tests.conftest import IASO_CSV, REAL_DATA
from tests.live import LiveServer, live_server, run_cli

FHIRCHECK = REAL_DATA.parents[1] / "conformance" / "fhircheck.py"


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('live') / 'live.db'}"
    else:
        with pg.scratch_database() as url:
            yield url


@pytest.fixture(scope="module")
def demo_server(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("demo")
    if database.startswith("postgresql"):
        (tmp / "settings.yaml").write_text("")
        run_cli("demo", "--size", "1500", settings=tmp / "settings.yaml", database=database)
    with live_server(tmp, database) as server:  # SQLite: serve creates the demo itself
        yield server


def fhircheck(server: LiveServer, *extra: str) -> str:
    done = subprocess.run([sys.executable, str(FHIRCHECK), "live", "--base", server.base, "--token", server.token,
                           *extra], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.rstrip().endswith(" 0 failed"), done.stdout[-4000:]
    return done.stdout


def test_shared_checker_passes_on_demo_data(demo_server: LiveServer) -> None:
    fhircheck(demo_server, "--pages", "30", "--sample", "15")


def test_shared_checker_passes_with_iaso_csv(database_url: str, tmp_path: Path) -> None:
    (tmp_path / "settings.yaml").write_text("")
    run_cli("load", "iaso-csv", str(IASO_CSV), settings=tmp_path / "settings.yaml", database=database_url)
    with live_server(tmp_path, database_url) as server:
        out = fhircheck(server, "--pages", "10", "--sample", "30")
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
