"""One execution path, two drivers (server.engine.drivers): an interaction run on the event loop (the driver's own
connection, statements compiled once) answers exactly what the same interaction answers in a worker thread on a
SQLAlchemy connection (a server without the loop's driver), byte for byte; once warm (visibilities and chains'
conditions built, compiled statements kept) it runs no SQLAlchemy statement; what blocks (a static provider's
load, an operation's own handler) runs in a thread."""
from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.engine import drivers
from server.engine.context import ServerContext
from server.storage.hot import OverBudget, SqliteOnLoop
from tests.support.clock import held
from tests.support.contexts import bearer
from tests.support.plans import Statement, captured

SAME = [
    pytest.param("/fhir/Location/30", True, id="read"),
    pytest.param("/fhir/Location/30?_elements=name", True, id="read-elements"),
    pytest.param("/fhir/Location/30?_format=xml", True, id="read-xml"),
    pytest.param("/fhir/Location/999", True, id="read-unknown"),
    pytest.param("/fhir/Location/x_y", True, id="read-not-an-id"),  # refused before any statement
    pytest.param("/fhir/metadata", True, id="metadata"),
    pytest.param("/fhir/Location?status=active", True, id="search"),
    pytest.param("/fhir/Location?status=active&_count=2&_after=10", True, id="search-after"),
    pytest.param("/fhir/Location?status=active&_summary=count", True, id="search-count-only"),
    pytest.param("/fhir/Location?status=active&_total=none&_count=1", True, id="search-no-total"),
    pytest.param("/fhir/Location?name=seg", True, id="name-prefix"),
    pytest.param("/fhir/Location?name=aire&_count=1&_after=20", True, id="name-prefix-after"),
    pytest.param("/fhir/Location?identifier=KvNOePwHFyH", True, id="identifier"),
    pytest.param("/fhir/Location?partof:below=20", True, id="partof-below"),
    pytest.param("/fhir/Location?partof:below=2", True, id="a-body-rendered-per-request"),  # unit 32 closes later
    pytest.param("/fhir/Location/32", True, id="read-rendered-per-request"),
    pytest.param("/fhir/Location?near=11.7|-3.3|20", True, id="near-ranked"),
    pytest.param("/fhir/Location/20/$children", True, id="children"),
    pytest.param("/fhir/Location/20/$children?_count=1", True, id="children-page"),
    pytest.param("/fhir/Location/999/$children", True, id="children-of-unknown"),
    pytest.param("/fhir/Location?status=active&_include=Location:partof", True, id="include"),
    pytest.param("/fhir/Location?_id=20&_revinclude=Location:partof", True, id="revinclude"),
    pytest.param("/fhir/Location?_id=30&_include:iterate=Location:partof", True, id="include-iterate"),
    pytest.param("/fhir/Location?partof.name=seg", True, id="chain"),
    pytest.param("/fhir/Location?_has:Location:partof:name=seg", True, id="has"),
    pytest.param("/fhir/Location/30/_history", True, id="history-instance"),
    pytest.param("/fhir/Location/_history?_count=2", True, id="history-type"),
    pytest.param("/fhir/Location/30/_history/1", True, id="vread"),
    pytest.param("/fhir/Location/30/_history/99", True, id="vread-unknown"),
    pytest.param("/fhir/Location/999/_history", True, id="history-of-unknown"),
    pytest.param("/fhir/OperationDefinition", True, id="static-provider"),  # in a thread, its resources in memory
]


@pytest.fixture(scope="module")
def hot(small_ctx: ServerContext) -> Iterator[TestClient]:
    with TestClient(create_app(small_ctx.settings, context=small_ctx), base_url="http://testserver") as client:
        client.headers.update(bearer(small_ctx.settings))
        yield client


def _sql(statements: list[Statement]) -> list[str]:
    return [s.sql for s in statements]


@pytest.fixture(autouse=True)
def still(small_ctx: ServerContext, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The once-a-second re-read of what the database holds happens at a test's first request, never in the middle
    of what it captures; and no statement leaves the loop for being slow (past the loop's budget, which a loaded
    machine can reach on any statement: that move is tested apart, below), however slow the machine."""
    monkeypatch.setattr(drivers, "LOOP_BUDGET_S", None)
    with held(small_ctx.freshness):
        yield


@pytest.fixture(scope="module")
def threaded(small_ctx: ServerContext) -> Iterator[TestClient]:
    """The same server without the hot path: every interaction in a worker thread, through SQLAlchemy."""
    ctx = replace(small_ctx, hot=None)
    with TestClient(create_app(ctx.settings, context=ctx), base_url="http://testserver") as client:
        client.headers.update(bearer(small_ctx.settings))
        yield client


@pytest.mark.parametrize("path, on_loop", SAME)
def test_the_hot_path_answers_what_the_thread_answers(small_ctx: ServerContext, hot: TestClient,
                                                      threaded: TestClient, path: str, on_loop: bool) -> None:
    assert small_ctx.hot is not None
    expected = threaded.get(path)
    hot.get(path)  # builds what was missing (visibility, compiled statements)
    with captured(small_ctx.db) as statements:
        answer = hot.get(path)
    assert (answer.status_code, answer.headers.get("etag"), answer.headers["content-type"]) == \
        (expected.status_code, expected.headers.get("etag"), expected.headers["content-type"])
    assert answer.content == expected.content
    assert (_sql(statements) == []) == on_loop, _sql(statements)


def test_another_position_of_a_kept_search_runs_on_the_loop(small_ctx: ServerContext, hot: TestClient) -> None:
    hot.get("/fhir/Location?status=active&_count=1&_after=1")
    with captured(small_ctx.db) as statements:
        page = hot.get("/fhir/Location?status=active&_count=1&_after=20").json()
    assert _sql(statements) == []
    assert [e["resource"]["id"] for e in page["entry"]] == ["30"] and page["total"] == 6


def test_a_scope_is_applied_on_the_loop(small_ctx: ServerContext, hot: TestClient) -> None:
    """A token limited to the subtree of district 10: a unit outside it is unknown, on the loop as in a thread."""
    scoped = bearer(small_ctx.settings, org_unit_roots=["Location/10"])
    for _ in range(2):  # the second time, on the loop
        assert hot.get("/fhir/Location/30", headers=scoped).status_code == 200
        assert hot.get("/fhir/Location/3", headers=scoped).status_code == 404
        assert [e["resource"]["id"] for e in hot.get("/fhir/Location?status=active", headers=scoped).json()["entry"]] \
            == ["10", "20", "30"]


def test_a_conditional_read_is_answered_on_the_loop(small_ctx: ServerContext, hot: TestClient) -> None:
    etag = hot.get("/fhir/Location/30").headers["etag"]
    with captured(small_ctx.db) as statements:
        assert hot.get("/fhir/Location/30", headers={"If-None-Match": etag}).status_code == 304
    assert _sql(statements) == []


def test_a_long_statement_leaves_the_loop_of_a_blocking_driver(tmp_path: Path) -> None:
    """SQLite runs on the loop itself: past its budget a statement gives up (the search then goes to a worker
    thread); without a budget, only the statement timeout stops it."""
    slow = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000000) SELECT count(*) FROM n"
    database = SqliteOnLoop(str(tmp_path / "empty.db"), timeout_ms=60_000)
    with pytest.raises(OverBudget):
        asyncio.run(database.rows(slow, (), budget_s=0.001))
    assert asyncio.run(database.rows(slow, ())) == [(3_000_000,)]
    asyncio.run(database.close())


def test_past_the_loops_budget_a_statement_runs_in_a_thread_and_answers_the_same(
        small_ctx: ServerContext, hot: TestClient, threaded: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """A statement the loop's driver gives up past its budget (OverBudget: SQLite's, tested above) runs in a worker
    thread, through SQLAlchemy, and the answer is the same; one with no budget (a bounded statement) stays."""
    path = "/fhir/Location?status=active"
    expected = threaded.get(path)
    hot.get(path)
    rows = small_ctx.hot.rows  # type: ignore[union-attr]
    budgets: list[float | None] = []

    async def over(sql: str, params: Any, budget_s: float | None = None) -> Any:
        budgets.append(budget_s)
        if budget_s is not None:
            raise OverBudget(sql)
        return await rows(sql, params, budget_s)

    monkeypatch.setattr(drivers, "LOOP_BUDGET_S", 0.02)
    monkeypatch.setattr(small_ctx.hot, "rows", over)
    with captured(small_ctx.db) as statements:
        answer = hot.get(path)
    assert (answer.status_code, answer.content) == (expected.status_code, expected.content)
    assert 0.02 in budgets and len(_sql(statements)) == budgets.count(0.02), (budgets, _sql(statements))


@pytest.mark.parametrize("path", ["/fhir/Location?partof:below=20&_summary=count", "/fhir/Location?type=CSPS&_count=0"])
def test_a_counted_search_again_runs_no_statement(small_ctx: ServerContext, hot: TestClient,
                                                  monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """Its total is kept: neither its look-ups (the path of the unit below, the type's keys) nor its count run."""
    hot.get(path)
    ran: list[str] = []
    rows = small_ctx.hot.rows  # type: ignore[union-attr]

    async def counting(sql: str, *args: Any) -> Any:
        ran.append(sql)
        return await rows(sql, *args)

    monkeypatch.setattr(small_ctx.hot, "rows", counting)
    with captured(small_ctx.db) as statements:
        again = hot.get(path)
    assert again.status_code == 200 and "total" in again.json()
    assert ran == [] and _sql(statements) == []
