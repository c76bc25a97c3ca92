"""A database that goes silent (the network black-holed: a proxy that takes the bytes and passes none, as one
stopped with SIGSTOP) answers 503 `transient` with Retry-After within about statement timeout + connect timeout, on
the hot path's own connections and on the pooled ones alike; /readyz reports it; the dead connections are dropped
and the server recovers when the network does. PostgreSQL only: SQLite is a file of the process, no network lies
between them (its statements are bounded by the statement timeout: tests/access/test_limits.py)."""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url
from starlette.testclient import TestClient

from server.access.mint import mint_token
from server.app import create_app
from server.errors import StorageUnavailable
from server.storage.db import wait_bound_s
from server.storage.hot import PostgresOnLoop, hot_database
from tests.support import pg
from tests.support.bulk import ASYNC, kick_off, manifest
from tests.support.contexts import SECRET, make_settings, pyramid_context
from tests.support.proxy import Forwarder

pytestmark = pytest.mark.postgres
CLIENTS = [  # 8 at once: reads and searches on the hot path, history in worker threads, the probe
    "/fhir/Location/30", "/fhir/Location/31", "/fhir/Location?name=ds", "/fhir/Location?name=ds&_count=1",
    "/fhir/Location/30/_history", "/fhir/Location/_history", "/fhir/Location?_include=Location:partof", "/readyz",
]


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[Forwarder, str]]:
    with pg.scratch_database() as url:
        pyramid_context(url, tmp_path / "setup").db.dispose()  # migrated, the small pyramid loaded
        parsed = make_url(url)
        forwarder = Forwarder((parsed.host or "127.0.0.1", parsed.port or 5432))
        try:
            yield forwarder, parsed.set(port=forwarder.port).render_as_string(hide_password=False)
        finally:
            forwarder.close()


Answer = tuple[int, str | None, str | None, float]  # status, issue code (or probe status), Retry-After, seconds


def _ask(client: TestClient, path: str, headers: dict[str, str], answers: dict[str, Answer]) -> None:
    started = time.monotonic()
    answer = client.get(path, headers=headers)
    body = answer.json()
    code = body["issue"][0]["code"] if body.get("resourceType") == "OperationOutcome" else body.get("status")
    answers[path] = (answer.status_code, code, answer.headers.get("retry-after"), time.monotonic() - started)


def _all_at_once(client: TestClient, asks: dict[str, dict[str, str]], forwarder: Forwarder,
                 bound: float) -> dict[str, Answer]:
    """Every path asked at once while the database is silent; each must have answered within 4 bounds."""
    answers: dict[str, Answer] = {}
    threads = [threading.Thread(target=_ask, args=(client, path, headers, answers), daemon=True)
               for path, headers in asks.items()]
    forwarder.pause()
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(4 * bound)
    finally:
        forwarder.resume()
    assert sorted(answers) == sorted(asks), "unanswered"
    return answers


def _silent_client(url: str, tmp_path: Path, closing_client: Any) -> tuple[TestClient, float]:
    settings = make_settings(url, tmp_path, auth={"secret": SECRET},
                             database={"statement_timeout_ms": 1000, "connect_timeout_seconds": 1})
    client = closing_client(create_app(settings))
    client.headers["Authorization"] = f"Bearer {mint_token(settings)}"
    return client, wait_bound_s(settings)


def test_a_silent_database_answers_503_within_the_bound_and_recovers(proxied: tuple[Forwarder, str], tmp_path: Path,
                                                                     closing_client: Any) -> None:
    forwarder, url = proxied
    client, bound = _silent_client(url, tmp_path, closing_client)
    for path in CLIENTS:  # every kind of connection open and pooled
        assert client.get(path).status_code == 200, path
    answers = _all_at_once(client, {path: {} for path in CLIENTS}, forwarder, bound)
    for path, (status, code, retry_after, took) in answers.items():
        assert status == 503 and retry_after, (path, status, code)
        assert code == ("unready" if path == "/readyz" else "transient"), path
        assert took < 2 * bound, (path, took)  # the statement's bound, then a connection's (or a turn's)
    for path in CLIENTS:  # the dead connections were dropped: fresh ones answer
        answer = client.get(path)
        assert answer.status_code == 200, (path, answer.text[:500])  # why, when it fails (once in a loaded run)


def test_the_hot_paths_own_connections_give_up_on_a_silent_database(proxied: tuple[Forwarder, str],
                                                                    tmp_path: Path) -> None:
    """server.storage.hot's connections, on their own: a statement in flight when the network goes silent, and one
    waiting for a connection, both fail (503 as StorageUnavailable) within the bound, and the next works again."""
    forwarder, url = proxied
    settings = make_settings(url, tmp_path, database={"statement_timeout_ms": 1000, "connect_timeout_seconds": 1,
                                                      "pool_size": 1})
    hot = hot_database(settings, url)
    assert isinstance(hot, PostgresOnLoop)

    async def scenario() -> list[float]:
        assert await hot.rows("SELECT 1", ()) == [(1,)]
        forwarder.pause()
        took: list[float] = []

        async def one() -> None:
            started = time.monotonic()
            with pytest.raises(StorageUnavailable):
                await hot.rows("SELECT 2", ())
            took.append(time.monotonic() - started)

        try:
            await asyncio.wait_for(asyncio.gather(one(), one()), 6 * wait_bound_s(settings))
        finally:
            forwarder.resume()
        assert await hot.rows("SELECT 3", ()) == [(3,)]
        await hot.close()
        return took

    took = asyncio.run(scenario())
    assert len(took) == 2 and max(took) < 2 * wait_bound_s(settings), took


def test_bulk_kick_off_and_status_answer_503_on_a_silent_database(proxied: tuple[Forwarder, str], tmp_path: Path,
                                                                   closing_client: Any) -> None:
    """The requests of Bulk Data (kick-off, status poll) wait on the primary's job table: bounded as reads are (the
    exports' own long statements keep their engine without a statement timeout)."""
    forwarder, url = proxied
    client, bound = _silent_client(url, tmp_path, closing_client)
    status = kick_off(client)
    manifest(client, status)  # done: its status is a read of the job table
    status_path = "/fhir/" + status.split("/fhir/", 1)[1]
    answers = _all_at_once(client, {"/fhir/$export": ASYNC, status_path: {}}, forwarder, bound)
    for path, (code, issue, retry_after, took) in answers.items():
        assert (code, issue) == (503, "transient") and retry_after, (path, code, issue)
        assert took < 2 * bound, (path, took)
    assert client.get(status_path).status_code == 200  # the dead connections dropped: fresh ones answer
