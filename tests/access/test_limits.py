"""Limits: request-target length (414), query parameters (400), statement timeout (503 too-costly) on both
backends, per-subject rate limit (429 throttled with Retry-After); and the audit line of each request."""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from sqlalchemy import text
from starlette.testclient import TestClient

from server.engine import searches
from server.storage.steps import Blocking, rows
from server.engine.caller import TRUSTED
from server.app import create_app
from server.access.mint import mint_token
from server.engine.context import ServerContext, create_context
from server.access.ratelimit import RateLimiter
from server.errors import TooManyRequests
from tests.support.contexts import SECRET, make_settings
from tests.support.records import Recorded, recording

SLOW_SQL = {
    "sqlite": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
    "postgresql": "SELECT pg_sleep(5)",
}


def outcome(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["resourceType"] == "OperationOutcome" and body["issue"][0]["code"] == code
    return body


@pytest.mark.parametrize("url, status, code", [
    pytest.param("/fhir/Location?name=" + "a" * 9000, 414, "too-long", id="long-query"),
    pytest.param("/fhir/Location/" + "1" * 9000, 414, "too-long", id="long-path"),
    pytest.param("/fhir/Location?" + "&".join(f"x{i}=1" for i in range(101)), 400, "invalid", id="101-parameters"),
    pytest.param("/fhir/Location?" + "&".join(f"name=a{i}" for i in range(41)), 400, "invalid", id="41-clauses"),
    pytest.param("/fhir/Location?name=" + ",".join(["a"] * 101), 400, "invalid", id="101-values"),
    pytest.param("/fhir/Location?name=a%00b", 400, "invalid", id="nul-in-value"),
    pytest.param("/fhir/Location?identifier=%00", 400, "invalid", id="nul-in-token"),
])
def test_request_size_limits(client: TestClient, url: str, status: int, code: str) -> None:
    outcome(client.get(url), status, code)


def test_count_above_the_maximum_is_clamped(client: TestClient) -> None:
    body = client.get("/fhir/Location?_count=100000").json()
    assert body["link"][0]["url"].endswith("_count=100")


def test_a_url_within_the_limit_is_served(client: TestClient) -> None:
    assert client.get("/fhir/Location?name=" + "a" * 4000).status_code == 200


@pytest.fixture
def timeout_ctx(migrated_url: str, tmp_path: Path) -> Iterator[ServerContext]:
    settings = make_settings(migrated_url, tmp_path, auth={"secret": SECRET}, database={"statement_timeout_ms": 200})
    ctx = create_context(settings)
    yield ctx
    ctx.db.dispose()


@pytest.mark.parametrize("on", ["a-statement-step", "blocking-work"])
def test_a_query_past_the_statement_timeout_answers_503_too_costly(timeout_ctx: ServerContext, on: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Whichever driver runs it: a statement of the interaction's own (on the loop's connection, or in a thread
    past its time budget), or blocking work in a thread on a pooled connection."""
    slow = text(SLOW_SQL[timeout_ctx.db.dialect.name])

    def costly(ctx: ServerContext, *args: Any, **kwargs: Any) -> Any:
        if on == "a-statement-step":
            yield from rows(slow, bounded=False)
        else:
            yield Blocking(lambda conn: conn.execute(slow).all())
        raise AssertionError("the statement timeout did not interrupt the query")

    monkeypatch.setattr(searches, "search_type_steps", costly)
    with TestClient(create_app(timeout_ctx.settings, context=timeout_ctx)) as c:
        response = c.get("/fhir/Location", headers={"Authorization": f"Bearer {mint_token(timeout_ctx.settings)}"})
    outcome(response, 503, "too-costly")
    assert response.headers["Retry-After"]
    # the pool is still usable afterwards
    with timeout_ctx.db.connect() as conn:
        assert conn.execute(text("SELECT 1")).scalar() == 1


def test_rate_limit_buckets_refill() -> None:
    now = [0.0]
    limiter = RateLimiter(60, clock=lambda: now[0])
    for _ in range(60):
        limiter.take("a")
    with pytest.raises(TooManyRequests) as caught:
        limiter.take("a")
    assert caught.value.headers["Retry-After"] == "1"
    limiter.take("b")  # another subject has its own bucket
    now[0] += 1.0
    limiter.take("a")


def test_rate_limited_subject_gets_429_throttled(small_ctx: ServerContext, tmp_path: Path) -> None:
    settings = make_settings(small_ctx.settings.database_url, tmp_path, auth={"secret": SECRET},
                             server={"rate_limit_per_minute": 3})
    ctx = create_context(settings)
    try:
        with TestClient(create_app(settings, context=ctx)) as c:
            first = {"Authorization": f"Bearer {mint_token(settings, subject='first')}"}
            second = {"Authorization": f"Bearer {mint_token(settings, subject='second')}"}
            assert [c.get("/fhir/Location/1", headers=first).status_code for _ in range(3)] == [200] * 3
            response = c.get("/fhir/Location/1", headers=first)
            outcome(response, 429, "throttled")
            assert int(response.headers["Retry-After"]) >= 1
            assert c.get("/fhir/Location/1", headers=second).status_code == 200
            # the same subject in another account, and tokens without a subject, are counted apart
            other_account = {"Authorization": f"Bearer {mint_token(settings, subject='first', extra={'account': 'x'})}"}
            assert c.get("/fhir/Location/1", headers=other_account).status_code == 404  # its account is empty
            anonymous = [{"Authorization": "Bearer " + jwt.encode(
                {"exp": int(time.time()) + 60, "permissions": ["service_org_units"], "n": i}, SECRET, "HS256")}
                for i in range(2)]
            for headers in anonymous:
                assert [c.get("/fhir/Location/1", headers=headers).status_code for _ in range(3)] == [200] * 3
    finally:
        ctx.db.dispose()


@pytest.fixture
def audit_lines(client: TestClient) -> Iterator[Recorded]:
    with recording(client.app) as recorded:  # type: ignore[arg-type]
        yield recorded


@pytest.mark.parametrize("path, status, expected", [
    pytest.param("/fhir/Location/30", 200, {"interaction": "read", "resource_type": "Location", "ids": ["30"]},
                 id="read"),
    pytest.param("/fhir/Location?status=active&_count=2", 200,
                 {"interaction": "search-type", "returned": 2, "query": "status=active&_count=2"}, id="search"),
    pytest.param("/fhir/Location/20/$children", 200, {"interaction": "operation", "operation": "children",
                                                      "ids": ["20"], "returned": 2}, id="children"),
    pytest.param("/fhir/Location/999", 404, {"interaction": "read", "ids": ["999"]}, id="not-found"),
    pytest.param("/fhir/Nope", 404, {"interaction": "search-type", "resource_type": "Nope"}, id="unknown-type"),
    pytest.param("/fhir/Location?access_token=abc.def.ghi", 400,  # unknown: refused, and logged masked
                 {"query": "access_token=%2A%2A%2A"},
                 id="token-in-query-masked"),
])
def test_one_audit_line_per_request(client: TestClient, audit_lines: Recorded, path: str, status: int,
                                    expected: dict[str, Any]) -> None:
    response = client.get(path)
    assert response.status_code == status
    [raw] = [raw for raw in audit_lines.raw() if '"orgunit_fhir.audit"' in raw]
    line = json.loads(raw)
    assert line["logger"] == "orgunit_fhir.audit" and line["status"] == status
    assert line["request_id"] == response.headers["X-Request-ID"]
    assert line["subject"] == "orgunit-fhir-cli" and line["method"] == "GET"
    assert isinstance(line["duration_ms"], float) and line["time"].endswith("+00:00")
    assert {k: line.get(k) for k in expected} == expected
    token = client.headers["Authorization"].split()[1]
    assert token not in raw and "abc.def.ghi" not in raw


def test_audit_line_of_an_unauthenticated_request(client: TestClient, audit_lines: Recorded) -> None:
    response = client.get("/fhir/Location", headers={"Authorization": "Bearer not-a-jwt"})
    assert response.status_code == 401
    [line] = audit_lines.of("orgunit_fhir.audit")
    assert line["status"] == 401 and "subject" not in line and "not-a-jwt" not in "".join(audit_lines.raw())


def test_audit_line_names_the_account(small_ctx: ServerContext, tmp_path: Path) -> None:
    with TestClient(create_app(small_ctx.settings, context=small_ctx)) as c, \
            recording(c.app) as recorded:  # type: ignore[arg-type]
        token = mint_token(small_ctx.settings, extra={"account": "default", "org_unit_roots": ["10"]})
        assert c.get("/fhir/Location?_count=50", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    line = recorded.of("orgunit_fhir.audit")[-1]
    assert line["account"] == "default" and line["returned"] == 5


def test_include_iterate_stops_after_ten_levels_with_an_outcome(migrated_url: str, tmp_path: Path) -> None:
    from plugins.orgunits.writer import ensure_data_source, ensure_source_version, ensure_types, write_units
    from plugins.orgunits.records import TypeRecord, UnitRecord
    from tests.support.data import NOW

    settings = make_settings(migrated_url, tmp_path, auth={"secret": SECRET})
    ctx = create_context(settings)
    try:
        with ctx.db.begin() as conn:
            version = ensure_source_version(conn, ensure_data_source(conn, "Deep", now=NOW), 1, now=NOW)
            ensure_types(conn, [TypeRecord("Level", "LVL", "AREA")])
            write_units(conn, [UnitRecord(i, f"Level {i}", "LVL", parent_id=i - 1 if i > 1 else None)
                               for i in range(1, 14)], version, NOW)
        body = searches.search_type(ctx, TRUSTED, "http://x/fhir", "Location",
                                    [("_id", "13"), ("_include:iterate", "Location:partof")])
        included = [e["resource"]["id"] for e in body["entry"] if e["search"]["mode"] == "include"]
        assert included == [str(i) for i in range(12, 2, -1)]  # ten levels up
        outcomes = [e["resource"] for e in body["entry"] if e["search"]["mode"] == "outcome"]
        assert outcomes and "10 levels" in outcomes[0]["issue"][0]["diagnostics"]
        shallow = searches.search_type(ctx, TRUSTED, "http://x/fhir", "Location",
                                       [("_id", "5"), ("_include:iterate", "Location:partof")])
        assert not [e for e in shallow["entry"] if e["search"]["mode"] == "outcome"]
    finally:
        ctx.db.dispose()


def test_too_many_includes_is_400(client: TestClient) -> None:
    outcome(client.get("/fhir/Location?" + "&".join(["_include=Location:partof"] * 11)), 400, "invalid")


def test_answers_are_private_to_the_caller(client: TestClient) -> None:
    response = client.get("/fhir/Location/30")
    assert response.headers["Cache-Control"] == "private"
    assert response.headers["Vary"] == "Accept, Authorization"
    assert client.get("/fhir/Location/30", headers={"If-None-Match": response.headers["ETag"]}).status_code == 304
