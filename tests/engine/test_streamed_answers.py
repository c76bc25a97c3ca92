"""An operation's streamed Answer (server.declare.answer.Answer.stream): its body is made as it is sent, with the
call's read-only connection held until the stream ends, is closed unread (HEAD) or fails; an error before the
stream starts is an OperationOutcome. And `Lookup.condition`: what a search matches, as one SQL condition a handler
reads itself, scoped by the caller as the search is."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select
from starlette.testclient import TestClient

from plugins.orgunits.tables import org_unit
from server import Answer, InvalidRequest, Operation, OperationCall, hookimpl
from server.app import create_app
from server.engine.context import ServerContext
from server.settings import Settings
from tests.support.contexts import SECRET, bearer, make_settings

DEFINITION = "https://example.org/OperationDefinition/"


class Streams:
    """$ids streams the ids of the Locations a search matches (`call.lookup.condition`), one chunk per id, each read
    with the call's connection; `fail=<n>` fails after n chunks; `early=1` fails before the stream."""

    def __init__(self) -> None:
        self.closed: list[str] = []
        self.started: list[str] = []

    def ids(self, call: OperationCall) -> Answer:
        params = dict(call.parameters)
        if params.pop("early", None):
            raise InvalidRequest("refused before any byte")
        fail = int(params.pop("fail", "-1"))
        assert call.lookup is not None
        where = call.lookup.condition("Location", list(params.items()), connection=call.connection)
        count = call.connection.execute(select(func.count()).select_from(org_unit).where(where)).scalar_one()
        label = call.url

        def chunks() -> Iterator[bytes]:
            self.started.append(label)
            try:
                yield f"{count}:".encode()
                last = 0
                for sent in range(count):
                    if sent == fail:
                        raise RuntimeError("the database went away")
                    last = call.connection.execute(select(func.min(org_unit.c.id)).where(where, org_unit.c.id > last)
                                                   ).scalar_one()
                    yield f"{last},".encode()
            finally:
                self.closed.append(label)

        return Answer(200, {"Content-Type": "text/plain; charset=utf-8"}, stream=chunks())

    @hookimpl
    def register_operations(self, settings: Settings) -> list[Operation]:
        return [Operation("ids", None, "the ids a search matches, streamed", DEFINITION + "ids", handler=self.ids,
                          levels=frozenset({"system"}), media_types=frozenset({"text/plain"}))]


@pytest.fixture(scope="module")
def settings(small_ctx: ServerContext, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return make_settings(small_ctx.settings.database_url, tmp_path_factory.mktemp("var"), auth={"secret": SECRET})


@pytest.fixture(scope="module")
def streams() -> Streams:
    return Streams()


@pytest.fixture(scope="module")
def api(small_ctx: ServerContext, settings: Settings, streams: Streams) -> Iterator[TestClient]:
    app = create_app(settings, extra_plugins=[("streams", streams)], db=small_ctx.db)
    with TestClient(app, base_url="http://testserver", raise_server_exceptions=False) as client:
        client.headers["Authorization"] = bearer(settings)["Authorization"]
        yield client


def _checked_out(small_ctx: ServerContext) -> int:
    return int(small_ctx.db.pool.checkedout())


@pytest.mark.parametrize(("query", "claims", "body"), [
    pytest.param("type=CSPS", {}, "2:30,32,", id="a-search"),
    pytest.param("", {"org_unit_roots": ["Location/20"]}, "3:20,30,31,", id="a-subtree-token-everything"),
    pytest.param("partof:below=10", {"scope": "system/Location.rs?status=active"}, "2:20,30,", id="a-query-scoped-token"),
    pytest.param("partof:below=2", {"org_unit_roots": ["Location/10"]}, "0:", id="below-what-it-cannot-see"),
])
def test_a_stream_reads_the_callers_matches_with_the_calls_connection(
        api: TestClient, small_ctx: ServerContext, settings: Settings, query: str, claims: dict[str, Any],
        body: str) -> None:
    before = _checked_out(small_ctx)
    answer = api.get(f"/fhir/$ids?{query}", headers=bearer(settings, **claims))
    assert (answer.status_code, answer.text) == (200, body)
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"
    assert _checked_out(small_ctx) == before  # the connection went back with the stream's end


def test_head_closes_the_stream_unread(api: TestClient, small_ctx: ServerContext, streams: Streams) -> None:
    before = _checked_out(small_ctx)
    answer = api.head("/fhir/$ids?type=CHR")
    assert answer.status_code == 200 and answer.content == b""
    assert "http://testserver/fhir/$ids?type=CHR" not in streams.started
    assert _checked_out(small_ctx) == before


def test_an_error_before_the_stream_is_an_operation_outcome(api: TestClient, small_ctx: ServerContext) -> None:
    before = _checked_out(small_ctx)
    for url, says in (("/fhir/$ids?early=1", "refused before any byte"), ("/fhir/$ids?nme=x", "nme")):
        answer = api.get(url)
        assert answer.status_code == 400 and says in answer.json()["issue"][0]["diagnostics"], answer.text
    assert _checked_out(small_ctx) == before


def test_an_error_in_the_stream_cuts_the_body_short(api: TestClient, small_ctx: ServerContext,
                                                    streams: Streams) -> None:
    before = _checked_out(small_ctx)
    try:
        answer = api.get("/fhir/$ids?fail=1")
        cut = answer.text
    except Exception:  # the transfer broke off: no complete-looking body
        cut = None
    assert cut is None or cut == "9:1,"  # never the whole list
    assert "http://testserver/fhir/$ids?fail=1" in streams.closed
    assert _checked_out(small_ctx) == before
