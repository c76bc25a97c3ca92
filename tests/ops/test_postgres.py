"""PostgreSQL in production: outages and timeouts as 503, recovery, and serving under a read-only role."""
from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from server.app import create_app
from server.access.mint import mint_token
from server.defaults import translate_exception
from server.errors import ServiceUnavailable
from server.storage.db import create_db_engine
from tests.support import pg
from tests.support.bulk import export
from tests.support.contexts import SECRET, make_settings, migrate
from tests.support.data import load_small_pyramid
from tests.support.live import CLI, _env, live_server
from tests.support.commands import run_cli
from tests.support.proxy import Forwarder

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_url() -> Iterator[str]:
    with pg.scratch_database() as url:
        yield url


def test_outage_is_503_and_the_server_recovers(pg_url: str, tmp_path: Path, closing_client: Any) -> None:
    setup = create_db_engine(make_settings(pg_url, tmp_path))
    migrate(setup)
    load_small_pyramid(setup)
    setup.dispose()
    url = make_url(pg_url)
    forwarder = Forwarder((url.host or "127.0.0.1", url.port or 5432))
    proxied = url.set(port=forwarder.port).render_as_string(hide_password=False)
    settings = make_settings(proxied, tmp_path, auth={"secret": SECRET})
    try:
        client = closing_client(create_app(settings))
        client.headers["Authorization"] = f"Bearer {mint_token(settings)}"
        assert client.get("/fhir/Location/30").status_code == 200
        forwarder.cut()
        for _ in range(3):
            down = client.get("/fhir/Location/30")
            assert down.status_code == 503 and down.json()["issue"][0]["code"] == "transient"
            assert down.headers["retry-after"]
        forwarder.restore()
        assert client.get("/fhir/Location/30").status_code == 200
        assert client.get("/fhir/Location?name=ds").json()["total"] == 2
    finally:
        forwarder.close()


def test_a_connection_dropped_while_idle_costs_no_request(pg_url: str, tmp_path: Path, closing_client: Any) -> None:
    """Pooled connections are not pinged at checkout: a dead one fails once and the read is repeated."""
    setup = create_db_engine(make_settings(pg_url, tmp_path))
    migrate(setup)
    load_small_pyramid(setup)
    setup.dispose()
    settings = make_settings(pg_url, tmp_path, auth={"secret": SECRET})
    client = closing_client(create_app(settings))
    client.headers["Authorization"] = f"Bearer {mint_token(settings)}"
    assert client.get("/fhir/Location/30").status_code == 200
    name = make_url(pg_url).database
    with psycopg.connect(pg.ADMIN_URL, autocommit=True) as admin:  # a restart, a proxy's idle timeout...
        killed = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                               "WHERE datname = %s AND pid <> pg_backend_pid()", (name,)).fetchone()
    assert killed and killed[0] >= 1
    assert client.get("/fhir/Location/30").status_code == 200
    assert client.get("/fhir/Location?name=ds").json()["total"] == 2


def test_statement_timeout_is_503(pg_url: str, tmp_path: Path) -> None:
    engine = create_db_engine(make_settings(pg_url, tmp_path, database={"statement_timeout_ms": 50}))
    try:
        with pytest.raises(Exception) as info, engine.connect() as conn:
            conn.execute(text("SELECT pg_sleep(2)"))
        error = translate_exception(exception=info.value, interaction=None)
        assert isinstance(error, ServiceUnavailable) and error.status == 503
    finally:
        engine.dispose()


def test_serve_runs_under_a_read_only_role(pg_url: str, tmp_path: Path) -> None:
    (tmp_path / "settings.yaml").write_text("")
    run_cli("migrate", settings=tmp_path / "settings.yaml", database=pg_url)
    run_cli("demo", "--size", "200", settings=tmp_path / "settings.yaml", database=pg_url)
    role = f"reader_{make_url(pg_url).database}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT CONNECT ON DATABASE "{make_url(pg_url).database}" TO "{role}"')
        conn.execute(f'GRANT USAGE ON SCHEMA public TO "{role}"')
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{role}"')
        conn.execute(f'GRANT INSERT, UPDATE, DELETE ON bulk_export_job TO "{role}"')  # as README says
    reader = make_url(pg_url).set(username=role).render_as_string(hide_password=False)
    try:
        with psycopg.connect(reader) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM org_unit")
        with live_server(tmp_path, reader) as server:
            request = urllib.request.Request(f"{server.base}/Location?_count=5",
                                             headers={"Authorization": f"Bearer {server.token}"})
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.status == 200
            exported = export(httpx.Client(base_url=server.base.removesuffix("/fhir")), "/fhir/Location/$export",
                              {"Authorization": f"Bearer {server.token}"})  # its job table and pg_locks: readable
            assert sum(o["count"] for o in exported["output"]) == 200
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'REVOKE ALL ON ALL TABLES IN SCHEMA public FROM "{role}"')
            conn.execute(f'REVOKE ALL ON SCHEMA public FROM "{role}"')
            conn.execute(f'REVOKE ALL ON DATABASE "{make_url(pg_url).database}" FROM "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def test_serve_refuses_a_schema_that_is_behind(pg_url: str, tmp_path: Path) -> None:
    (tmp_path / "settings.yaml").write_text(f"server:\n  data_dir: {tmp_path / 'var'}\n")
    done = subprocess.run([*CLI, "serve", "--settings", str(tmp_path / "settings.yaml"), "--database", pg_url,
                           "--port", "1"], capture_output=True, text=True, timeout=60, env=_env())
    assert done.returncode == 2 and "orgunit-fhir migrate" in done.stderr
