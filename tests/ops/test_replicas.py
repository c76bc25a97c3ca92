"""Read replicas: two PostgreSQL databases holding the same data stand in for the replicas, a third (empty)
for the primary, so a read that reached the primary would answer 404."""
from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, func, select, text
from starlette.testclient import TestClient

from server.app import create_app
from server.access.mint import mint_token
from server.plugins import get_plugin_manager
from server.storage.prerender import refresh
from server.declare.registry import Registry
from server.settings import Settings
from server.storage.db import create_db_engine
from plugins.orgunits.tables import org_unit
from server.storage.replicas import read_router
from tests.support import pg
from tests.support.contexts import SECRET, make_settings
from tests.support.data import UNITS, load_small_pyramid
from tests.support.live import free_port
from tests.support.commands import run_cli

pytestmark = pytest.mark.postgres


@dataclass(frozen=True)
class Cluster:
    primary: str
    replicas: tuple[str, str]


def _populate(url: str, tmp: Path) -> None:
    settings = make_settings(url, tmp)
    engine = create_db_engine(settings, writing=True)
    try:
        load_small_pyramid(engine)
        refresh(engine, Registry.collect(get_plugin_manager(settings), settings))
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("cluster")
    with pg.scratch_database(migrated=True) as primary, pg.scratch_database(migrated=True) as one, \
            pg.scratch_database(migrated=True) as two:
        for url in (one, two):
            _populate(url, tmp)
        yield Cluster(primary, (one, two))


def name_of(url: str) -> str:
    return url.rsplit("/", 1)[1]


def replica_settings(cluster: Cluster, tmp: Path, read_urls: list[str], **database: object) -> Settings:
    return make_settings(cluster.primary, tmp, auth={"secret": SECRET},
                         database={"read_urls": read_urls, "pool_size": 4, **database})


def closed() -> str:
    return f"postgresql://postgres@127.0.0.1:{free_port()}/gone"


def checkouts(client: TestClient) -> dict[str, float]:
    text_ = client.get("/metrics").text
    return {s.labels["database"]: s.value for f in text_string_to_metric_families(text_) for s in f.samples
            if s.name == "orgunit_fhir_db_checkouts_total"}


def hold(engine: Engine, n: int) -> list[str]:
    """Open n connections at once (so the pool makes n) and name the database each reached."""
    conns = [engine.connect() for _ in range(n)]
    try:
        return [c.execute(text("SELECT current_database()")).scalar_one() for c in conns]
    finally:
        for c in conns:
            c.close()


def test_connections_go_round_robin_over_the_replicas(cluster: Cluster, tmp_path: Path) -> None:
    engine = create_db_engine(replica_settings(cluster, tmp_path, list(cluster.replicas)))
    try:
        reached = hold(engine, 4)
    finally:
        engine.dispose()
    assert Counter(reached) == {name_of(cluster.replicas[0]): 2, name_of(cluster.replicas[1]): 2}


def test_reads_are_served_by_the_replicas_never_the_primary(cluster: Cluster, tmp_path: Path) -> None:
    settings = replica_settings(cluster, tmp_path, list(cluster.replicas))
    token = {"Authorization": f"Bearer {mint_token(settings)}"}
    with TestClient(create_app(settings), client=("127.0.0.1", 40000)) as client:
        hold(client.app.state.ctx.db, 4)  # the pool now holds connections to both replicas
        statuses: list[int] = []

        def read(unit: int) -> None:
            statuses.append(client.get(f"/fhir/Location/{unit}", headers=token).status_code)

        threads = [threading.Thread(target=read, args=(u.id,)) for u in UNITS for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        search = client.get("/fhir/Location", headers=token).json()
        ready = client.get("/readyz").json()
        used = checkouts(client)
    assert statuses == [200] * len(threads)  # the primary holds no unit: a read there would be 404
    assert search["total"] == len(UNITS)
    assert set(used) == {"replica1", "replica2"} and min(used.values()) >= 2
    assert ready["status"] == "ready" and ready["checks"]["read_from"] in ("replica1", "replica2")
    assert ready["checks"]["replicas"] == {"replica1": "in rotation", "replica2": "in rotation"}


@pytest.mark.parametrize("bad", [
    pytest.param(lambda: closed(), id="closed-port"),
    pytest.param(lambda: pg.ADMIN_URL.rsplit("/", 1)[0] + "/oft_no_such_database", id="no-such-database"),
])
def test_a_failed_replica_is_skipped_without_failed_requests(cluster: Cluster, tmp_path: Path, bad: object) -> None:
    settings = replica_settings(cluster, tmp_path, [cluster.replicas[0], bad(), cluster.replicas[1]])  # type: ignore[operator]
    token = {"Authorization": f"Bearer {mint_token(settings)}"}
    with TestClient(create_app(settings), client=("127.0.0.1", 40000)) as client:
        reached = hold(client.app.state.ctx.db, 4)
        statuses = [client.get(f"/fhir/Location/{u.id}", headers=token).status_code for u in UNITS]
        ready = client.get("/readyz").json()
        metrics = client.get("/metrics").text
    assert set(reached) == {name_of(u) for u in cluster.replicas}
    assert statuses == [200] * len(UNITS)
    assert ready["status"] == "ready" and ready["checks"]["replicas"]["replica2"] == "skipped"
    assert 'orgunit_fhir_db_connects_total{database="replica2",outcome="failed"} 1.0' in metrics


def test_a_replica_dropped_while_serving_loses_no_request(cluster: Cluster, tmp_path: Path) -> None:
    with pg.scratch_database(migrated=True) as doomed:
        _populate(doomed, tmp_path)
        settings = replica_settings(cluster, tmp_path, [cluster.replicas[0], doomed])
        token = {"Authorization": f"Bearer {mint_token(settings)}"}
        with TestClient(create_app(settings)) as client:
            engine = client.app.state.ctx.db
            assert Counter(hold(engine, 2)) == {name_of(cluster.replicas[0]): 1, name_of(doomed): 1}
            with psycopg.connect(pg.ADMIN_URL, autocommit=True) as admin:  # its pooled connection dies with it
                admin.execute(f'DROP DATABASE "{name_of(doomed)}" WITH (FORCE)')
            statuses = [client.get(f"/fhir/Location/{u.id}", headers=token).status_code for u in UNITS * 2]
            after = hold(engine, 3)
            status = read_router(engine).status()  # type: ignore[union-attr]
    assert statuses == [200] * len(UNITS) * 2
    assert set(after) == {name_of(cluster.replicas[0])}
    assert status == {"replica1": "in rotation", "replica2": "skipped"}


def test_the_primary_serves_when_every_replica_is_down(cluster: Cluster, tmp_path: Path) -> None:
    settings = make_settings(cluster.replicas[0], tmp_path, auth={"secret": SECRET},
                             database={"read_urls": [closed(), closed()]})  # a primary that holds the data
    token = {"Authorization": f"Bearer {mint_token(settings)}"}
    with TestClient(create_app(settings)) as client:
        statuses = [client.get(f"/fhir/Location/{u.id}", headers=token).status_code for u in UNITS]
        ready = client.get("/readyz").json()
    assert statuses == [200] * len(UNITS)
    assert ready["checks"]["read_from"] == "primary"
    assert ready["checks"]["replicas"] == {"replica1": "skipped", "replica2": "skipped"}


def test_load_and_migrate_write_to_the_primary(cluster: Cluster, tmp_path: Path) -> None:
    with pg.scratch_database() as primary:
        settings_file = tmp_path / "settings.yaml"
        settings_file.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\ndatabase:\n  read_urls:\n"
                                 + "".join(f"    - {url}\n" for url in cluster.replicas))
        run_cli("migrate", settings=settings_file, database=primary)
        run_cli("demo", "--size", "25", settings=settings_file, database=primary)
        counts = {}
        for url in (primary, *cluster.replicas):
            engine = create_db_engine(make_settings(url, tmp_path), writing=True)
            try:
                with engine.connect() as conn:
                    counts[url] = conn.execute(select(func.count()).select_from(org_unit)).scalar_one()
            finally:
                engine.dispose()
    assert counts == {primary: 25, cluster.replicas[0]: len(UNITS), cluster.replicas[1]: len(UNITS)}


def test_a_lagging_replica_answers_consistently_from_its_own_data(tmp_path: Path) -> None:
    """One replica has a unit the other has not received yet: every page's total matches its own entries,
    whichever replica answered (counts and snapshots are kept per database)."""
    from tests.support.data import NOW
    from plugins.orgunits.writer import ensure_data_source, ensure_source_version, write_units
    from plugins.orgunits.records import UnitRecord

    with pg.scratch_database(migrated=True) as primary, pg.scratch_database(migrated=True) as ahead, \
            pg.scratch_database(migrated=True) as behind:
        for url in (ahead, behind):
            _populate(url, tmp_path)
        engine = create_db_engine(make_settings(ahead, tmp_path), writing=True)
        with engine.begin() as conn:
            version = ensure_source_version(conn, ensure_data_source(conn, "Ministère de la Santé"), 3)
            write_units(conn, [UnitRecord(40, "CSPS Nouveau", "CSPS", parent_id=20)], version, NOW)
        refresh(engine, Registry.collect(get_plugin_manager(make_settings(ahead, tmp_path)),
                                         make_settings(ahead, tmp_path)))
        engine.dispose()
        settings = make_settings(primary, tmp_path, auth={"secret": SECRET},
                                 database={"read_urls": [ahead, behind], "pool_size": 2})
        token = {"Authorization": f"Bearer {mint_token(settings)}"}
        with TestClient(create_app(settings), client=("127.0.0.1", 40000)) as client:
            hold(client.app.state.ctx.db, 2)  # one pooled connection to each replica
            pages = [client.get("/fhir/Location?_count=50", headers=token).json() for _ in range(12)]
            client.app.state.ctx.db.dispose()
    answers = {(page["total"], len(page["entry"])) for page in pages}
    assert answers == {(len(UNITS) + 1, len(UNITS) + 1), (len(UNITS), len(UNITS))}
