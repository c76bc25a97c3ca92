"""Operations: /healthz, /readyz, /metrics, request ids, structured logs, check-config."""
from __future__ import annotations

import json
from dataclasses import replace
import logging
import shutil
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select
from sqlalchemy.engine import make_url
from starlette.requests import Request
from starlette.routing import Route
from starlette.testclient import TestClient

from server import AccessScope, Principal, Settings, hookimpl
from server.app import create_app
from server.access.mint import mint_token
from server.ops.checks import check_serving_databases
from server.cli.main import main
from server.engine.context import ServerContext
from server.errors import ConfigError
from server.extensions import load_extensions
from server.settings import parse_settings
from server.declare.instants import as_utc
from server.telemetry.logs import JsonFormatter, RequestIdFilter
from plugins.orgunits.tables import org_unit_history
from tests.support import pg
from tests.support.contexts import SECRET, make_settings
from tests.support.records import recording
from tests.support.deploy import serve
from tests.support.live import free_port
from tests.support.proxy import Forwarder

LOOPBACK = ("127.0.0.1", 40000)
METRICS_TOKEN = "metrics-token-0123456789"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def ops_client(ctx: ServerContext, client: tuple[str, int] = LOOPBACK, **kwargs: Any) -> TestClient:
    return TestClient(create_app(ctx.settings, context=ctx), client=client, **kwargs)


def samples(text: str) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def test_healthz_needs_neither_token_nor_database(tmp_path: Path) -> None:
    settings = make_settings(f"postgresql://postgres@127.0.0.1:{free_port()}/none", tmp_path, auth={"secret": SECRET})
    app = create_app(settings)
    with TestClient(app) as client:
        health = client.get("/healthz")
        ready = client.get("/readyz")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert health.headers["content-type"] == "application/json" and health.headers["cache-control"] == "no-store"
    assert ready.status_code == 503 and ready.headers["retry-after"] == "5"
    assert ready.json()["status"] == "unready"
    assert ready.json()["checks"]["database"].startswith("unreachable") and ready.json()["checks"]["plugins"] == "ok"


def test_readyz_when_database_schema_and_plugins_are_fine(small_ctx: ServerContext) -> None:
    with ops_client(small_ctx) as client:
        response = client.get("/readyz")
        head = client.head("/readyz")
    assert response.status_code == 200 and head.status_code == 200
    assert response.json() == {"status": "ready", "checks": {"plugins": "ok", "database": "ok", "schema": "ok",
                                                              "read_from": "primary", "bulk": "ok"}}


def test_readyz_refuses_a_schema_behind(database_url: str, tmp_path: Path) -> None:
    settings = make_settings(database_url, tmp_path, auth={"secret": SECRET})
    app = create_app(settings)
    try:
        response = TestClient(app).get("/readyz")
    finally:
        app.state.ctx.db.dispose()
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == "ok"
    assert "run orgunit-fhir migrate" in response.json()["checks"]["schema"]


@pytest.mark.postgres
def test_readyz_answers_within_its_timeout_when_the_database_hangs(tmp_path: Path) -> None:
    """A database that accepts but does not answer (a slowed link): /readyz says so after 3 s, not never."""
    import time

    with pg.scratch_database(migrated=True) as url:
        parsed = make_url(url)
        link = Forwarder((parsed.host or "127.0.0.1", parsed.port or 5432))
        through = parsed.set(host="127.0.0.1", port=link.port).render_as_string(hide_password=False)
        settings = make_settings(through, tmp_path, auth={"secret": SECRET})
        try:
            with TestClient(create_app(settings)) as client:
                assert client.get("/readyz").status_code == 200
                link.delay = 6.0  # every answer of the database now waits 6 s
                started = time.monotonic()
                hung = client.get("/readyz")
                waited = time.monotonic() - started
                link.delay = 0.0
        finally:
            link.close()
    assert hung.status_code == 503 and 2.5 < waited < 5
    assert hung.json()["checks"] == {"plugins": "ok", "database": "timeout", "schema": "unknown"}


@pytest.mark.postgres
def test_readyz_follows_the_database_away_and_back(tmp_path: Path) -> None:
    """The database goes away (a link cut, as when PostgreSQL stops) and returns: unready, then ready, by itself;
    meanwhile FHIR requests answer 503 with the request id in the diagnostics."""
    with pg.scratch_database(migrated=True) as url:
        parsed = make_url(url)
        link = Forwarder((parsed.host or "127.0.0.1", parsed.port or 5432))
        through = parsed.set(host="127.0.0.1", port=link.port).render_as_string(hide_password=False)
        settings = make_settings(through, tmp_path, auth={"secret": SECRET})
        token = {"Authorization": f"Bearer {mint_token(settings)}"}
        try:
            with TestClient(create_app(settings)) as client:
                assert client.get("/readyz").status_code == 200
                assert client.get("/fhir/Location", headers=token).status_code == 200
                link.cut()
                gone = [client.get("/readyz") for _ in range(3)]
                outcome = client.get("/fhir/Location", headers={**token, "X-Request-ID": "while-down-1"})
                link.restore()
                back = client.get("/readyz")
                served = client.get("/fhir/Location", headers=token)
        finally:
            link.close()
    assert [r.status_code for r in gone] == [503] * 3
    assert all(r.json()["checks"]["database"].startswith("unreachable") for r in gone)
    assert outcome.status_code == 503 and outcome.headers["x-request-id"] == "while-down-1"
    assert "(request id while-down-1)" in outcome.json()["issue"][0]["diagnostics"]
    assert back.status_code == 200 and back.json()["status"] == "ready"
    assert served.status_code == 200


@pytest.mark.parametrize("sent, echoed", [
    pytest.param("abc-123", True, id="simple"),
    pytest.param("Req.1:part_2-x", True, id="every-allowed-character"),
    pytest.param("a" * 128, True, id="128-characters"),
    pytest.param("a" * 129, False, id="too-long"),
    pytest.param("a b", False, id="space"),
    pytest.param('a"}{', False, id="json-breaking"),
    pytest.param("é", False, id="non-ascii"),
    pytest.param("", False, id="empty"),
    pytest.param(None, False, id="absent"),
])
@pytest.mark.parametrize("path, status", [
    pytest.param("/fhir/Location/30", 200, id="read"),
    pytest.param("/fhir/Location/0", 404, id="not-found"),
    pytest.param("/nowhere", 404, id="no-route"),
    pytest.param("/healthz", 200, id="healthz"),
])
def test_request_id_honoured_when_valid_else_made(client: TestClient, path: str, status: int, sent: str | None,
                                                  echoed: bool) -> None:
    response = client.get(path, headers={} if sent is None else {"X-Request-ID": sent.encode()})  # type: ignore[dict-item]
    assert response.status_code == status
    rid = response.headers["x-request-id"]
    if echoed:
        assert rid == sent
    else:
        assert rid != sent and len(rid) == 32 and int(rid, 16) >= 0


def test_an_escaping_exception_is_an_outcome_with_the_request_id(small_ctx: ServerContext,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    async def boom(request: Request) -> None:
        logging.getLogger("orgunit_fhir.test").warning("about to fail")
        raise RuntimeError("boom")

    app = create_app(small_ctx.settings, context=small_ctx)
    app.router.routes.append(Route("/boom", boom))
    caplog.handler.addFilter(RequestIdFilter())
    with caplog.at_level(logging.INFO), recording(app) as recorded:
        response = TestClient(app).get("/boom", headers={"X-Request-ID": "boom-7"})
    assert response.status_code == 500 and response.headers["x-request-id"] == "boom-7"
    assert response.json()["resourceType"] == "OperationOutcome"
    assert response.json()["issue"][0]["diagnostics"] == "internal server error (request id boom-7)"
    lines = [json.loads(JsonFormatter().format(r)) for r in caplog.records if r.name.startswith("orgunit_fhir")]
    by_logger = {line["logger"]: line for line in lines}
    assert by_logger["orgunit_fhir.test"]["request_id"] == "boom-7"  # an application line, written meanwhile
    assert by_logger["orgunit_fhir"]["request_id"] == "boom-7" and "RuntimeError: boom" in by_logger["orgunit_fhir"]["exception"]
    assert recorded.of("orgunit_fhir.access")[0]["status"] == 500


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_access_log_line_per_request(small_ctx: ServerContext, log_format: str) -> None:
    settings = replace(small_ctx.settings, server=replace(small_ctx.settings.server, log_format=log_format))
    with TestClient(create_app(settings, context=replace(small_ctx, settings=settings))) as client, \
            recording(client.app) as recorded:  # type: ignore[arg-type]
        client.get("/fhir/Location/30?_elements=name", headers={"X-Request-ID": "log-1", "User-Agent": "ops-test",
                                                                "Authorization": f"Bearer {mint_token(settings)}"})
    if log_format == "text":  # as the other lines in the text format: time level logger [request id] message
        [line] = [raw for raw in recorded.raw() if " orgunit_fhir.access " in raw]
        assert line.endswith(" INFO orgunit_fhir.access [log-1] GET /fhir/Location/30 200")
        return
    [line] = recorded.of("orgunit_fhir.access")
    assert "query" not in line  # it may carry secrets: the audit line has it, masked
    assert {k: line[k] for k in ("request_id", "method", "path", "status", "interaction", "resource_type",
                                 "user_agent", "level", "message")} == {
        "request_id": "log-1", "method": "GET", "path": "/fhir/Location/30", "status": 200,
        "interaction": "read", "resource_type": "Location", "user_agent": "ops-test", "level": "info",
        "message": "GET /fhir/Location/30 200"}
    assert line["duration_ms"] > 0 and line["bytes"] > 0


class RegionScope:
    """An IdP whose tokens name a region, which this plugin maps to an account and subtree roots."""

    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    def access_scope(self, principal: Principal, settings: Settings) -> AccessScope | None:
        self.calls += 1
        return AccessScope(account="default", roots=("Location/20",)) if principal.claims.get("region") else None


@pytest.mark.parametrize("claims, public, path, expected", [
    pytest.param({"account": "default", "org_unit_roots": ["10"]}, False, "/fhir/Location",
                 {"account": "default", "roots": ["10"], "subject": "orgunit-fhir-cli"}, id="from-the-claims"),
    pytest.param({"account": "elsewhere", "region": "north"}, False, "/fhir/Location",
                 {"account": "default", "roots": ["Location/20"], "subject": "orgunit-fhir-cli"},
                 id="from-a-plugin-hook-not-the-raw-claim"),
    pytest.param({}, False, "/fhir/Location", {"account": None, "roots": None, "subject": "orgunit-fhir-cli"},
                 id="no-account-no-roots"),
    pytest.param({"account": "default"}, True, "/fhir/metadata", {"account": None, "roots": None, "subject": None},
                 id="public-metadata-admits-no-one"),
])
def test_one_record_per_request_with_the_applied_scope(small_ctx: ServerContext, tmp_path: Path,
                                                        claims: dict[str, Any],
                                                        public: bool, path: str, expected: dict[str, Any]) -> None:
    """The access line, the audit line and the metrics are written once, together; the audit line names the
    scope the access_scope hook gave (computed once per token), not the token's raw account claim."""
    settings = make_settings(small_ctx.settings.database_url, tmp_path, auth={"secret": SECRET,
                                                                             "public_metadata": public})
    region = RegionScope()
    token = {"Authorization": f"Bearer {mint_token(settings, extra=claims)}"}
    with TestClient(create_app(settings, extra_plugins=[("region", region)], db=small_ctx.db),
                    client=LOOPBACK) as client, recording(client.app) as recorded:  # type: ignore[arg-type]
        for _ in range(3):
            assert client.get(path, headers=token).status_code == 200
        found = samples(client.get("/metrics").text)
    audit, access = recorded.of("orgunit_fhir.audit"), recorded.of("orgunit_fhir.access")
    assert len(audit) == 3 and len(access) == 4  # /metrics has an access line, no audit line
    assert [a["request_id"] for a in audit] == [a["request_id"] for a in access[:3]]
    assert {k: audit[0].get(k) for k in expected} == expected
    assert region.calls == (0 if public else 1)  # once per token, not per request
    interaction = "capabilities" if public else "search-type"
    assert sample(found, "orgunit_fhir_http_requests_total", interaction=interaction,
                  resource_type="none" if public else "Location", status="200") == 3


@pytest.mark.parametrize("minted, per_minute, status, account", [
    pytest.param({"permissions": []}, 0, 403, "default", id="authorize-hook-denies"),
    pytest.param({"extra": {"account": 5}}, 0, 403, None, id="access-scope-hook-refuses-the-claim"),
    pytest.param({}, 1, 429, "default", id="rate-limited"),
])
def test_a_refused_request_is_recorded_with_its_subject(small_ctx: ServerContext, tmp_path: Path,
                                                         minted: dict[str, Any],
                                                         per_minute: int, status: int, account: str | None) -> None:
    settings = make_settings(small_ctx.settings.database_url, tmp_path, auth={"secret": SECRET},
                             server={"rate_limit_per_minute": per_minute})
    token = {"Authorization": f"Bearer {mint_token(settings, **{'extra': {'account': 'default'}, **minted})}"}
    with TestClient(create_app(settings, db=small_ctx.db)) as client, \
            recording(client.app) as recorded:  # type: ignore[arg-type]
        statuses = [client.get("/fhir/Location/30", headers=token).status_code for _ in range(2)]
    assert statuses[-1] == status
    line = recorded.of("orgunit_fhir.audit")[-1]
    assert line["status"] == status and line["subject"] == "orgunit-fhir-cli" and line.get("account") == account


@pytest.mark.parametrize("token, peer, headers, status", [
    pytest.param(None, "127.0.0.1", {}, 200, id="loopback"),
    pytest.param(None, "::1", {}, 200, id="loopback-v6"),
    pytest.param(None, "10.1.2.3", {}, 403, id="remote"),
    pytest.param(None, "127.0.0.1", {"X-Forwarded-For": "203.0.113.9"}, 403, id="through-a-proxy"),
    pytest.param(None, "127.0.0.1", {"Forwarded": "for=203.0.113.9"}, 403, id="through-a-proxy-rfc7239"),
    pytest.param(METRICS_TOKEN, "10.1.2.3", {"Authorization": f"Bearer {METRICS_TOKEN}"}, 200, id="token"),
    pytest.param(METRICS_TOKEN, "10.1.2.3", {"Authorization": "Bearer nope"}, 401, id="wrong-token"),
    pytest.param(METRICS_TOKEN, "10.1.2.3", {}, 401, id="no-token"),
    pytest.param(METRICS_TOKEN, "127.0.0.1", {}, 401, id="token-needed-from-loopback-too"),
    pytest.param(METRICS_TOKEN, "10.1.2.3", {"Authorization": f"Basic {METRICS_TOKEN}"}, 401, id="not-bearer"),
])
def test_metrics_guard(migrated_url: str, tmp_path: Path, token: str | None, peer: str, headers: dict[str, str],
                       status: int) -> None:
    settings = make_settings(migrated_url, tmp_path, auth={"secret": SECRET}, server={"metrics_token": token})
    app = create_app(settings)
    try:
        response = TestClient(app, client=(peer, 40000)).get("/metrics", headers=headers)
    finally:
        app.state.ctx.db.dispose()
    assert response.status_code == status, response.text
    if status == 200:
        assert response.headers["content-type"].startswith("text/plain; version=")
        assert "orgunit_fhir_http_requests_in_flight" in response.text
    else:
        assert response.json()["error"] and "orgunit_fhir" not in response.text
    if status == 401:
        assert response.headers["www-authenticate"].startswith("Bearer")


def test_metrics_count_the_requests(small_ctx: ServerContext) -> None:
    token = {"Authorization": f"Bearer {mint_token(small_ctx.settings)}"}
    with ops_client(small_ctx) as client:
        for path, status in (("/fhir/Location/30", 200), ("/fhir/Location/31", 200), ("/fhir/Location/30", 200),
                             ("/fhir/Location/0", 404), ("/fhir/Location?name=ds", 200), ("/fhir/Nope", 404),
                             ("/fhir/Location/30/_history/1", 200), ("/fhir/metadata", 200), ("/elsewhere", 404)):
            assert client.get(path, headers=token).status_code == status, path
        assert client.get("/fhir/Location/30").status_code == 401
        found = samples(client.get("/metrics").text)
        with small_ctx.db.connect():  # one connection in use meanwhile
            holding = samples(client.get("/metrics").text)
    requests = "orgunit_fhir_http_requests_total"
    assert sample(found, requests, interaction="read", resource_type="Location", status="200") == 3
    assert sample(found, requests, interaction="read", resource_type="Location", status="404") == 1
    assert sample(found, requests, interaction="read", resource_type="Location", status="401") == 1
    assert sample(found, requests, interaction="search-type", resource_type="Location", status="200") == 1
    assert sample(found, requests, interaction="search-type", resource_type="unknown", status="404") == 1
    assert sample(found, requests, interaction="vread", resource_type="Location", status="200") == 1
    assert sample(found, requests, interaction="capabilities", resource_type="none", status="200") == 1
    assert sample(found, requests, interaction="other", resource_type="none", status="404") == 1
    assert sample(found, "orgunit_fhir_http_request_duration_seconds_count", interaction="read",
                  resource_type="Location") == 5
    assert sample(found, "orgunit_fhir_http_request_duration_seconds_bucket", interaction="read",
                  resource_type="Location", le="+Inf") == 5
    assert sample(found, "orgunit_fhir_http_requests_in_flight") == 1  # this scrape
    assert sample(found, "orgunit_fhir_db_pool_size") == small_ctx.settings.database.pool_size
    # reads and searches of stored bodies use the event loop's own connection (server.storage.hot), the vread the pool
    assert sample(found, "orgunit_fhir_db_checkouts_total", database="primary") >= 1
    assert sample(found, "orgunit_fhir_db_connections_checked_out", database="primary") == 0
    assert sample(holding, "orgunit_fhir_db_connections_checked_out", database="primary") == 1
    with small_ctx.db.connect() as conn:
        newest = conn.execute(select(func.max(org_unit_history.c.updated_at))).scalar_one()
    assert sample(found, "orgunit_fhir_data_generation_timestamp_seconds", resource_type="Location") == \
        as_utc(newest).timestamp()


CHECK_CASES = [
    pytest.param("", "sqlite", 0, ["ok    settings:", "ok    plugins: serving", "database primary",
                                   "schema current (each chain at its head)"], id="embedded"),
    pytest.param("", "sqlite-missing", 1, ["does not exist (a typo in the path?); create it with `orgunit-fhir "
                                           "migrate`"], id="embedded-not-created"),  # issue 23: a typo is a FAIL
    pytest.param("server:\n  log_format: xml\n", "sqlite", 1,
                 ["FAIL  server.log_format: expected one of json, text, got 'xml'"], id="log-format"),
    pytest.param("server:\n  metrics_token: short\n", "sqlite", 1, ["FAIL  server.metrics_token: use at least 16"],
                 id="weak-metrics-token"),
    pytest.param("database:\n  read_urls: [postgresql://u@127.0.0.1/db]\n", "sqlite", 1,
                 ["FAIL  database.read_urls: replicas need a PostgreSQL primary"], id="replicas-of-sqlite"),
    pytest.param("auth:\n  algorithms: [RS256]\n", "sqlite", 1, ["FAIL  plugins and auth: auth"], id="auth-without-keys"),
    pytest.param("auth:\n  algorithms: [RS256]\n  jwks_url: http://127.0.0.1:{closed}/jwks.json\n", "sqlite", 1,
                 ["FAIL  auth.jwks_url http://127.0.0.1:"], id="jwks-unreachable"),
    pytest.param("", "postgresql", 0, ["ok    database primary (postgresql+psycopg://postgres@",
                                       "schema current (each chain at its head)"],
                 id="postgresql", marks=pytest.mark.postgres),
    pytest.param("", "postgresql-empty", 1, ["FAIL  database primary", "holds no schema of this server", "create it with `orgunit-fhir migrate`"],
                 id="postgresql-behind", marks=pytest.mark.postgres),
    pytest.param("database:\n  read_urls: ['{primary}', 'postgresql://postgres@127.0.0.1:{closed}/gone']\n",
                 "postgresql", 1, ["ok    database replica1", "FAIL  database replica2", "unreachable",
                                   "ok    database primary"], id="replica-down", marks=pytest.mark.postgres),
    pytest.param("database:\n  read_urls: ['mysql://u@h/db']\n", "postgresql", 1,
                 ["FAIL  database.read_urls[1]: expected postgresql://"], id="replica-not-postgresql",
                 marks=pytest.mark.postgres),
]


@pytest.fixture
def check_database(request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path) -> Iterator[str]:
    kind = request.param
    if kind.startswith("sqlite"):
        if kind == "sqlite":
            shutil.copyfile(sqlite_template, tmp_path / "db.sqlite")
        yield f"sqlite:///{tmp_path / 'db.sqlite'}"
    else:
        with pg.scratch_database(migrated=kind == "postgresql") as url:
            yield url


@pytest.mark.parametrize("settings_text, check_database, code, expected", CHECK_CASES, indirect=["check_database"])
def test_check_config(settings_text: str, check_database: str, code: int, expected: list[str], tmp_path: Path,
                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\n" + settings_text.replace("server:\n", "")
                    .format(primary=check_database, closed=free_port()), encoding="utf-8")
    assert main(["check-config", "--settings", str(path), "--database", check_database]) == code
    out = capsys.readouterr().out
    for fragment in expected:
        assert fragment in out, out
    assert all(line.startswith(("ok    ", "FAIL  ")) for line in out.splitlines())
    assert ("FAIL" in out) == (code != 0)


@pytest.mark.parametrize("settings_text, message", [
    pytest.param("server:\n  colour: blue\n", "server: unknown setting(s) colour", id="unknown-key"),
    pytest.param("server:\n  log_format: xml\n", "server.log_format: expected one of json, text", id="log-format"),
    pytest.param("server:\n  workers: 0\n", "server.workers: must be at least 1", id="no-workers"),
    pytest.param("server:\n  shutdown_grace_seconds: soon\n", "server.shutdown_grace_seconds: expected a non-negative",
                 id="grace-not-a-number"),
    pytest.param("server:\n  max_connections: 0\n", "server.max_connections: must be at least 1", id="no-connections"),
    pytest.param("server:\n  header_timeout_seconds: 0\n", "server.header_timeout_seconds: must be at least 1",
                 id="no-header-time"),
    pytest.param("database:\n  connect_timeout_seconds: 0\n", "database.connect_timeout_seconds: must be at least 1",
                 id="no-connect-time"),
])
def test_serve_refuses_bad_settings_with_a_clear_message(settings_text: str, message: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(settings_text, encoding="utf-8")
    assert main(["serve", "--settings", str(path), "--database", f"sqlite:///{tmp_path / 'db.sqlite'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1  # one log line, in the default (JSON) format
    assert json.loads(err)["message"].startswith("orgunit-fhir serve: configuration error: ") and message in err
    assert not (tmp_path / "db.sqlite").exists()  # refused before anything was written


@pytest.mark.postgres
def test_serve_refuses_a_replica_behind_and_starts_without_one_that_is_down(tmp_path: Path) -> None:
    schema = load_extensions(parse_settings({})).schema
    with pg.scratch_database(migrated=True) as primary, pg.scratch_database() as behind:
        down = f"postgresql://postgres@127.0.0.1:{free_port()}/gone"
        fine = check_serving_databases(make_settings(primary, tmp_path, database={"read_urls": [down, primary]}),
                                       schema)
        assert [(c.name, c.reachable, c.current) for c in fine] == [
            ("replica1", False, False), ("replica2", True, True), ("primary", True, True)]
        with pytest.raises(ConfigError, match="database replica1 .* holds no schema of this server"):
            check_serving_databases(make_settings(primary, tmp_path, database={"read_urls": [behind]}), schema)
        with pytest.raises(ConfigError, match="database primary .*: unreachable"):
            check_serving_databases(make_settings(down, tmp_path), schema)


def test_serve_one_worker_stops_on_sigterm_with_exit_0_and_json_logs(tmp_path: Path, sqlite_template: Path) -> None:
    shutil.copyfile(sqlite_template, tmp_path / "db.sqlite")
    with serve(tmp_path, f"sqlite:///{tmp_path / 'db.sqlite'}", "", workers=1) as server:
        assert urllib.request.urlopen(f"{server.origin}/healthz", timeout=5).status == 200
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=30) == 0
    lines = server.log.read_text().splitlines()
    assert any(line.startswith("FHIR base: http://127.0.0.1:") for line in lines)  # start-up output, then logs:
    serving = next(i for i, line in enumerate(lines) if "Started server process" in line)
    logged = [json.loads(line) for line in lines[serving:]]
    messages = [line["message"] for line in logged]
    assert "Application shutdown complete." in messages and messages[-1] == "serve: stopped"
    assert any(line["logger"] == "orgunit_fhir.access" and line["path"] == "/healthz" for line in logged)


def test_a_worker_killed_without_shutdown_leaves_no_live_gauges(tmp_path: Path) -> None:
    """SIGKILL or the OOM killer skip the lifespan shutdown: the next scrape drops that worker's live gauges.
    (Workers are processes with $PROMETHEUS_MULTIPROC_DIR set before prometheus_client is imported.)"""
    import os
    import subprocess
    import sys

    def worker(code: str) -> str:
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
        return subprocess.run([sys.executable, "-c", "from server.telemetry.metrics import Metrics\n"
                               f"m = Metrics.create({str(tmp_path)!r}); m.pool_size.set(4)\n" + code],
                              check=True, cwd=Path(__file__).resolve().parents[2], env=env,
                              capture_output=True, text=True).stdout

    worker("")  # exits without process_exit, as a killed worker does
    scraped = worker("print(m.exposition().decode())")
    assert [line for line in scraped.splitlines() if line.startswith("orgunit_fhir_db_pool_size")] == \
        ["orgunit_fhir_db_pool_size 4.0"]


def test_text_logs_escape_control_characters_from_requests() -> None:
    from server.telemetry.logs import TextFormatter

    record = logging.LogRecord("orgunit_fhir.access", logging.INFO, __file__, 1,
                               "GET /fhir/a\nERROR orgunit_fhir.audit forged 200", None, None)
    line = TextFormatter("%(levelname)s %(name)s %(message)s").format(record)
    assert "\n" not in line and line.endswith("/fhir/a\\nERROR orgunit_fhir.audit forged 200")
