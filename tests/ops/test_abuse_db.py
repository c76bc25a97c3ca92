"""Issue 39 where the database is involved, against a real `serve` on each backend: a costly search that times out
answers 503 `too-costly`, logged as a warning without a traceback, and on PostgreSQL its backend does not outlive the
answer (JIT off: the statement timeout is the database's own and it is heeded)."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from server.errors import StatementTimedOut
from server.storage.budget import database_budget
from server.storage.db import create_db_engine
from tests.support import pg
from tests.support.contexts import make_settings
from tests.support.live import LiveServer, live_server
from tests.support.commands import run_cli

STATEMENT_LIMITS = "  max_url_length: 60000\ndatabase:\n  statement_timeout_ms: 300\n"
REQUEST_LIMITS = "  max_url_length: 60000\n  request_timeout_seconds: 1\ndatabase:\n  statement_timeout_ms: 30000\n"


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The demo on each backend (SQLite: `serve --demo` creates it)."""
    tmp = tmp_path_factory.mktemp("abuse-db")
    if request.param == "sqlite":
        yield f"sqlite:///{tmp / 'abuse.db'}"
        return
    with pg.scratch_database() as url:
        (tmp / "settings.yaml").write_text("")
        run_cli("migrate", settings=tmp / "settings.yaml", database=url)
        run_cli("demo", "--size", "2000", settings=tmp / "settings.yaml", database=url)
        yield url


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


def test_a_timed_out_search_is_too_costly_a_warning_and_leaves_no_backend(database: str, tmp_path: Path) -> None:
    """Item 6, the issue's shape scaled down: 38 x `name:contains=<100 values>&_total=accurate` past a 300 ms
    statement timeout."""
    with live_server(tmp_path, database, STATEMENT_LIMITS) as server:
        _too_costly_and_gone(server, database, 15)  # else the request's default time (15 s) would stop it


def test_a_request_s_statements_together_are_bounded_by_its_timeout(database: str, tmp_path: Path) -> None:
    """Item 5: a 30 s statement timeout, a 1 s request timeout: the same search answers 503 within about 1 s."""
    with live_server(tmp_path, database, REQUEST_LIMITS) as server:
        _too_costly_and_gone(server, database, 30)  # else the 30 s statement timeout would stop it


def _too_costly_and_gone(server: LiveServer, database: str, other_s: float) -> None:
    """The limit under test stopped the search, not `other_s`, the one that would have without it (well before it:
    how long parsing and compiling the 3,800 values takes depends on the machine, and is no concern here)."""
    url = "" if database.startswith("sqlite") else database
    status, body, elapsed = _get(server, f"Location?{_contains(38, 100)}&_total=accurate")
    assert status == 503 and body["issue"][0]["code"] == "too-costly", body
    assert "timed out" in body["issue"][0]["diagnostics"] or "longer than" in body["issue"][0]["diagnostics"]
    assert elapsed < other_s / 2, elapsed
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


LONG = {"sqlite": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000000000) "
                  "SELECT count(*) FROM n",
        "postgresql": "SELECT pg_sleep(60)"}  # uncut, each runs its 30 s statement timeout


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_the_budget_cuts_a_statement_on_a_worker_thread_s_connection(backend: str, tmp_path: Path) -> None:
    """The pooled engine (worker threads: read replicas, Bulk Data, a database in memory): a statement within its
    own timeout (30 s) is stopped when its request's budget (0.5 s) runs out, and the connection's next statement is
    not hit by that cancel."""
    with (pg.scratch_database() if backend == "postgresql" else _sqlite(tmp_path)) as url:
        engine = create_db_engine(make_settings(url, tmp_path, database={"statement_timeout_ms": 30_000}))
        try:
            with engine.connect() as conn:
                started = time.monotonic()
                with database_budget(0.5), pytest.raises(StatementTimedOut):
                    conn.execute(text(LONG[backend])).all()
                elapsed = time.monotonic() - started
                conn.rollback()
                assert conn.execute(text("SELECT 1")).scalar() == 1
        finally:
            engine.dispose()
    assert elapsed < 10, elapsed  # uncut, 30 s


@contextmanager
def _sqlite(tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'budget.db'}"
