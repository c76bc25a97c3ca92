"""Issue 39 item 5 for Bulk Data, on both backends: one account cannot take every export slot
(bulk.max_running_per_account), and a job's database time is bounded (bulk.job_timeout_seconds): a statement of the
job still running past it is stopped by the database and the job fails, saying so."""
from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import text
from starlette.testclient import TestClient

from server.app import create_app
from server.bulk import runner as bulk_runner
from server.engine.context import ServerContext
from server.settings import BulkSettings
from tests.support.costly import counted_turns
from tests.support.bulk import ASYNC, held, kick_off, manifest
from tests.support.contexts import bearer, pyramid_context
from tests.support.fixtures import context_fixture
from tests.support.scoping import load_alpha, load_beta

LONG = {"sqlite": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000000) "
                  "SELECT count(*) FROM n",
        "postgresql": "SELECT pg_sleep(20)"}


def exporting(url: str, var: Any) -> ServerContext:
    context = pyramid_context(url, var, load_alpha, load_beta)
    return replace(context, settings=replace(context.settings, bulk=BulkSettings(file_resources=4, max_running=2)))


ctx = context_fixture(exporting)


def test_one_account_cannot_take_every_export_slot(ctx: ServerContext, monkeypatch: pytest.MonkeyPatch) -> None:
    """bulk.max_running 2: alpha's second job waits (429, naming the account's limit); beta still gets the other
    slot."""
    release = threading.Event()
    monkeypatch.setattr(bulk_runner, "resources", held(release))
    alpha, beta = bearer(ctx.settings, account="alpha"), bearer(ctx.settings, account="beta")
    with TestClient(create_app(ctx.settings, context=ctx)) as client:
        first = kick_off(client, headers=alpha)
        refused = client.get("/fhir/$export", headers={**ASYNC, **alpha})
        assert refused.status_code == 429 and "of this account" in refused.text, refused.text
        assert refused.headers["retry-after"] == "10"
        other = kick_off(client, headers=beta)
        third = client.get("/fhir/$export", headers={**ASYNC, **bearer(ctx.settings, account="alpha", sub="b")})
        assert third.status_code == 429  # another subject of the same account: the same account's slot
        release.set()
        manifest(client, first, alpha)
        manifest(client, other, beta)


@pytest.mark.parametrize("limits, params", [
    pytest.param({"bulk": {"job_timeout_seconds": 1}}, {}, id="job-timeout"),
    pytest.param({"server": {"request_timeout_seconds": 1}}, {"_typeFilter": "Location?name:contains=a"},
                 id="costly-type-filter-has-a-search-s-time"),
])
def test_a_job_past_its_time_budget_fails_and_says_so(ctx: ServerContext, monkeypatch: pytest.MonkeyPatch,
                                                      limits: dict[str, dict[str, int]], params: dict[str, str]
                                                      ) -> None:
    """A statement of the job still running past its budget is stopped by the database; the job fails at once,
    its status saying why. A `_typeFilter` costly by the search's estimate (a `:contains` value: 20) has the time of
    a search (server.request_timeout_seconds), not of a job (bulk.job_timeout_seconds, 600 s here)."""
    backend = ctx.db.dialect.name

    def slow(conn: Any, provider: Any, view: Any) -> Any:  # a filter no index helps, on the job's connection
        conn.execute(text(LONG["postgresql" if backend == "postgresql" else "sqlite"])).all()
        yield from ()

    monkeypatch.setattr(bulk_runner, "resources", slow)
    settings = replace(ctx.settings, **{section: replace(getattr(ctx.settings, section), **values)
                                        for section, values in limits.items()})
    headers = bearer(settings, account="alpha")
    with TestClient(create_app(settings, context=replace(ctx, settings=settings))) as client:
        started = time.monotonic()
        status = kick_off(client, headers=headers, **params)
        while (answer := client.get(status, headers=headers)).status_code == 202:
            assert time.monotonic() - started < 10, "the job ran on past its budget"
            time.sleep(0.05)
        elapsed = time.monotonic() - started
    assert answer.status_code == 500 and "longer than the server allows" in answer.text, answer.text
    assert elapsed < 4, elapsed


@pytest.mark.parametrize("params, costly", [
    pytest.param({"_type": "Location"}, False, id="plain-kick-off"),
    pytest.param({"_typeFilter": "Location?status=active"}, False, id="a-cheap-type-filter"),
    pytest.param({"_typeFilter": "Location?name:contains=a"}, True, id="a-costly-type-filter"),
])
def test_a_kick_off_with_a_costly_type_filter_takes_a_costly_turn(ctx: ServerContext, monkeypatch: pytest.MonkeyPatch,
                                                                   params: dict[str, str], costly: bool) -> None:
    """The kick-off compiles each `_typeFilter` as the search it is: estimated alike (server.search.cost), a costly
    one waits for a costly search's turn like the same query as a search would."""
    turns = counted_turns(monkeypatch)
    headers = bearer(ctx.settings, account="alpha")
    with TestClient(create_app(ctx.settings, context=ctx)) as client:
        manifest(client, kick_off(client, headers=headers, **params), headers)
    assert bool(turns) is costly
