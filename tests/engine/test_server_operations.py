"""Server-wide operations (the `register_operations` hook): the system level with its path segments, the type
level on every type, the SMART scope each declares (checked by the pipeline at the type level, answered per type
at the system level), plain Answers, paged results; `stop_worker` at the end of a worker; the `bulk` core plugin
blocked by name. (Bulk Data itself: tests/bulk; the proof package's $service-count: tests/proof.)"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from server import ConfigError, Operation, OperationCall, hookimpl
from server.access.mint import mint_token
from server.app import create_app
from server.declare.answer import Answer, Page
from server.engine.context import ServerContext
from server.extensions import Extensions
from server.plugins import get_plugin_manager
from server.settings import Settings
from tests.support.clients import plugin_api
from tests.support.contexts import SECRET, make_settings

DEFINITION = "https://example.org/OperationDefinition/"
NUMBERS = 7


def numbers(call: OperationCall) -> Page:
    """A paged operation: `call.count` numbers from `call.skip`, of NUMBERS."""
    assert call.count is not None
    shown = range(call.skip, min(call.skip + call.count, NUMBERS))
    return Page([{"resourceType": "Basic", "id": str(i)} for i in shown], total=NUMBERS)


def where(call: OperationCall) -> dict[str, Any]:
    return {"resourceType": "Parameters", "parameter": [
        {"name": "level", "valueString": call.level}, {"name": "type", "valueString": str(call.resource_type)},
        {"name": "provider", "valueBoolean": call.provider is not None},
        {"name": "reads-location", "valueBoolean": call.permitted("Location")},
        {"name": "denial", "valueString": str(call.denial("Location"))},
        {"name": "url", "valueString": call.url}]}


def accepted(call: OperationCall) -> Answer:
    return Answer(202, {"Content-Location": f"{call.base}/$accepted/{call.segments['a']}/{call.segments['b']}",
                        "X-Prefer": call.headers.get("prefer", "")}, json={"a": call.segments["a"]})


class Numbers:
    def __init__(self) -> None:
        self.stopped: list[ServerContext] = []

    @hookimpl
    def register_operations(self, settings: Settings) -> list[Operation]:
        return [
            Operation("numbers", None, "seven numbers, paged", DEFINITION + "numbers", handler=numbers,
                      levels=frozenset({"system"}), paged=True),
            Operation("where", None, "where it was called", DEFINITION + "where", handler=where,
                      levels=frozenset({"system", "type"}), scope="r"),
            Operation("accepted", None, "a plain answer", DEFINITION + "accepted", handler=accepted,
                      levels=frozenset({"system"}), path=("a", "b")),
        ]

    @hookimpl
    def stop_worker(self, server: ServerContext) -> None:
        self.stopped.append(server)


@pytest.fixture(scope="module")
def settings(small_ctx: ServerContext, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return make_settings(small_ctx.settings.database_url, tmp_path_factory.mktemp("var"), auth={"secret": SECRET})


@pytest.fixture(scope="module")
def api(small_ctx: ServerContext, settings: Settings) -> Iterator[TestClient]:
    with plugin_api(settings, small_ctx.db, "numbers", Numbers()) as client:
        yield client


def _token(settings: Settings, scope: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(settings, extra={'scope': f'{scope} service_org_units'})}"}


def _parameters(answer: Any) -> dict[str, Any]:
    assert answer.status_code == 200, answer.text
    return {p["name"]: next(v for k, v in p.items() if k.startswith("value")) for p in answer.json()["parameter"]}


@pytest.mark.parametrize(("query", "ids", "links"), [
    pytest.param("", ["0", "1", "2", "3", "4", "5", "6"], {"self", "first", "last"}, id="one-page"),
    pytest.param("?_count=3", ["0", "1", "2"], {"self", "first", "next", "last"}, id="first-of-three"),
    pytest.param("?_count=3&_skip=6", ["6"], {"self", "first", "previous", "last"}, id="last-page"),
    pytest.param("?_count=1000&_skip=5", ["5", "6"], {"self", "first", "previous", "last"}, id="count-clamped"),
])
def test_a_paged_operation_answers_a_searchset(api: TestClient, query: str, ids: list[str], links: set[str]) -> None:
    bundle = api.get(f"/fhir/$numbers{query}").json()
    assert bundle["type"] == "searchset" and bundle["total"] == NUMBERS
    assert [e["resource"]["id"] for e in bundle["entry"]] == ids
    assert {link["relation"] for link in bundle["link"]} == links
    assert all(link["url"].startswith("http://testserver/fhir/$numbers?_count=") for link in bundle["link"])


def test_the_system_level(api: TestClient) -> None:
    got = _parameters(api.get("/fhir/$where?x=1"))
    assert (got["level"], got["type"], got["provider"], got["reads-location"]) == ("system", "None", False, True)
    assert got["url"] == "http://testserver/fhir/$where?x=1"


def test_the_type_level_on_any_type(api: TestClient) -> None:
    got = _parameters(api.get("/fhir/Location/$where"))
    assert (got["level"], got["type"]) == ("type", "Location")


@pytest.mark.parametrize(("scope", "status"), [
    pytest.param("system/Location.r", 200, id="read"),
    pytest.param("system/Location.s", 403, id="search-only"),
    pytest.param("system/Organization.rs", 403, id="another-type"),
])
def test_the_declared_scope_is_checked_at_the_type_level(api: TestClient, settings: Settings, scope: str,
                                                         status: int) -> None:
    answer = api.get("/fhir/Location/$where", headers=_token(settings, scope))
    assert answer.status_code == status, answer.text
    if status == 403:
        assert "system/Location.r" in answer.json()["issue"][0]["diagnostics"]


@pytest.mark.parametrize(("scope", "reads", "denial"), [
    pytest.param("system/*.read", True, "None", id="granted"),
    pytest.param("system/Location.s", False, "system/Location.r", id="denied"),
])
def test_the_declared_scope_is_answered_per_type_at_the_system_level(api: TestClient, settings: Settings, scope: str,
                                                                    reads: bool, denial: str) -> None:
    got = _parameters(api.get("/fhir/$where", headers=_token(settings, scope)))
    assert got["reads-location"] is reads and denial in got["denial"]


def test_a_plain_answer_with_path_segments(api: TestClient) -> None:
    answer = api.get("/fhir/$accepted/one/two/", headers={"Prefer": "respond-async"})
    assert answer.status_code == 202 and answer.json() == {"a": "one"}
    assert answer.headers["content-location"] == "http://testserver/fhir/$accepted/one/two"
    assert answer.headers["x-prefer"] == "respond-async"


@pytest.mark.parametrize("url", [
    pytest.param("/fhir/$nothing-here", id="unknown"),
    pytest.param("/fhir/$accepted/one", id="too-few-segments"),
    pytest.param("/fhir/$accepted/one/two/three", id="too-many-segments"),
    pytest.param("/fhir/$numbers/one", id="segments-not-declared"),
    pytest.param("/fhir/Location/$numbers", id="not-at-the-type-level"),
    pytest.param("/fhir/Location/1/$where", id="not-at-the-instance-level"),
])
def test_refusals(api: TestClient, url: str) -> None:
    answer = api.get(url)
    assert answer.status_code == 404 and answer.json()["resourceType"] == "OperationOutcome", answer.text


def test_capabilities_list_the_system_operations(api: TestClient) -> None:
    listed = [o["name"] for o in api.get("/fhir/metadata").json()["rest"][0]["operation"]]
    assert listed == ["export", "numbers", "where"]  # not $accepted (path segments); the core plugin first


def test_the_worker_stopping_is_told(small_ctx: ServerContext, settings: Settings) -> None:
    plugin = Numbers()
    app = create_app(settings, extra_plugins=[("numbers", plugin)], db=small_ctx.db)
    with TestClient(app):
        assert plugin.stopped == []
    assert plugin.stopped == [app.state.ctx]


class Instance:
    @hookimpl
    def register_operations(self, settings: Settings) -> list[Operation]:
        return [Operation("x", None, "", DEFINITION, handler=where, levels=frozenset({"instance"}))]


def test_a_server_wide_operation_has_no_instance_level(settings: Settings) -> None:
    with pytest.raises(ConfigError, match="system and/or the type level"):
        Extensions.collect(get_plugin_manager(settings, [("instance", Instance())]), settings)


def test_the_bulk_core_plugin_is_blocked_by_name(small_ctx: ServerContext, tmp_path: Any) -> None:
    settings = make_settings(small_ctx.settings.database_url, tmp_path, auth={"secret": SECRET},
                             plugins={"bulk": False})
    with TestClient(create_app(settings, db=small_ctx.db)) as client:
        client.headers["Authorization"] = f"Bearer {mint_token(settings)}"
        statement = client.get("/fhir/metadata").json()
        assert "operation" not in statement["rest"][0]
        assert "http://hl7.org/fhir/uv/bulkdata/CapabilityStatement/bulk-data" not in statement.get("instantiates", [])
        assert client.get("/fhir/$export", headers={"Prefer": "respond-async"}).status_code == 404
        assert client.get("/fhir/Location/$export", headers={"Prefer": "respond-async"}).status_code == 404
