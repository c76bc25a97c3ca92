"""Issue 39 where the database is involved, against a real `serve` on each backend: a costly search that times out
answers 503 `too-costly`, logged as a warning without a traceback, and on PostgreSQL its backend does not outlive the
answer (JIT off: the statement timeout is the database's own and it is heeded)."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from server.storage.db import create_db_engine
from tests.support import pg
from tests.support.contexts import make_settings
from tests.support.live import LiveServer, live_server, run_cli

TIMEOUT_MS = 300
LIMITS = f"database:\n  statement_timeout_ms: {TIMEOUT_MS}\n"


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, LiveServer]]:
    tmp = tmp_path_factory.mktemp("abuse-db")
    if request.param == "sqlite":
        with live_server(tmp, f"sqlite:///{tmp / 'abuse.db'}", "  max_url_length: 60000\n" + LIMITS) as server:
            yield "", server
        return
    with pg.scratch_database() as url:
        (tmp / "settings.yaml").write_text("")
        run_cli("migrate", settings=tmp / "settings.yaml", database=url)
        run_cli("demo", "--size", "2000", settings=tmp / "settings.yaml", database=url)
        with live_server(tmp, url, "  max_url_length: 60000\n" + LIMITS) as server:
            yield url, server


def _get(server: LiveServer, query: str, timeout: float = 60) -> tuple[int, dict[str, Any], float]:
    request = urllib.request.Request(f"{server.base}/{query}", headers={"Authorization": f"Bearer {server.token}"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read()), time.monotonic() - started
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), time.monotonic() - started


def _contains(params: int, values: int) -> str:
    """`params` x `name:contains` with `values` values each, only the last of which (`a`) matches: every value of
    every parameter is tried on most rows."""
    return "&".join("name:contains=" + ",".join([*(f"q{p}x{v}" for v in range(values - 1)), "a"])
                    for p in range(params))


def test_the_server_sessions_have_no_jit_and_the_statement_timeout(tmp_path: Path) -> None:
    pg.ensure_running()
    with pg.scratch_database() as url:
        engine = create_db_engine(make_settings(url, tmp_path, database={"statement_timeout_ms": 1234}))
        try:
            with engine.connect() as conn:
                found = [conn.execute(text(f"SHOW {name}")).scalar()
                         for name in ("jit", "statement_timeout", "client_connection_check_interval")]
        finally:
            engine.dispose()
    assert found == ["off", "1234ms", "1s"]


def test_a_timed_out_search_is_too_costly_a_warning_and_leaves_no_backend(served: tuple[str, LiveServer]) -> None:
    """The issue's shape, scaled down: 38 x `name:contains=<100 values>&_total=accurate`."""
    url, server = served
    status, body, elapsed = _get(server, f"Location?{_contains(38, 100)}&_total=accurate")
    assert status == 503 and body["issue"][0]["code"] == "too-costly", body
    assert "timed out" in body["issue"][0]["diagnostics"] or "longer than" in body["issue"][0]["diagnostics"]
    assert elapsed < 10, elapsed
    log = server.log.read_text()
    assert "answered 503 too-costly" in log and "Traceback" not in log, log[-3000:]
    if url:  # no backend of the server's still running 2 s after the answer
        deadline = time.monotonic() + 2
        with psycopg.connect(pg.ADMIN_URL, autocommit=True) as admin:
            while True:
                active = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND "
                                       "state = 'active' AND pid <> pg_backend_pid()",
                                       (make_url(url).database,)).fetchone()
                if active == (0,) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        assert active == (0,)
