"""Operations with their own handler: levels, the instance checked first, the caller's scope, a connection that
cannot write, declaration checks. (The proof package's $summary: tests/proof.)"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select
from starlette.testclient import TestClient

from plugins.orgunits.tables import data_source
from server import ConfigError, Operation, OperationCall, ResourceProvider, hookimpl
from server.engine.context import ServerContext
from tests.support.clients import plugin_api
from tests.support.contexts import SECRET, make_settings

DEFINITION = "https://example.org/OperationDefinition/"


def echo(call: OperationCall) -> dict[str, Any]:
    return {"resourceType": "Parameters", "parameter": [
        {"name": "id", "valueString": str(call.id)}, {"name": "stored", "valueString": repr(call.stored_id)},
        *({"name": k, "valueString": v} for k, v in call.parameters),
        {"name": "base", "valueString": call.base}, {"name": "strict", "valueBoolean": call.strict}]}


def write(call: OperationCall) -> dict[str, Any]:
    call.connection.execute(data_source.update().values(name="overwritten"))
    return {"resourceType": "Parameters"}


def answer_nothing(call: OperationCall) -> dict[str, Any]:
    return {"not": "a resource"}


def provider(*operations: Operation) -> ResourceProvider:
    return ResourceProvider("Basic", data_source, data_source.c.id, (data_source.c.id,),
                            lambda row: {"resourceType": "Basic", "id": str(row["id"])}, operations=operations)


OPERATIONS = (
    Operation("echo", None, "both levels", DEFINITION + "echo", handler=echo, levels=frozenset({"instance", "type"})),
    Operation("write", None, "tries to write", DEFINITION + "write", handler=write, levels=frozenset({"type"})),
    Operation("nothing", None, "answers no resource", DEFINITION + "nothing", handler=answer_nothing),
)


class BasicPlugin:
    @hookimpl
    def register_resource_providers(self, settings: Any) -> list[ResourceProvider]:
        return [provider(*OPERATIONS)]


@pytest.fixture(scope="module")
def api(small_ctx: ServerContext, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(small_ctx.settings.database_url, tmp_path_factory.mktemp("var"), auth={"secret": SECRET})
    with plugin_api(settings, small_ctx.db, "basic", BasicPlugin()) as client:
        yield client


def _parameters(answer: Any) -> dict[str, Any]:
    assert answer.status_code == 200, answer.text
    return {p["name"]: next(v for k, v in p.items() if k.startswith("value")) for p in answer.json()["parameter"]}


def test_type_level_call(api: TestClient) -> None:
    got = _parameters(api.get("/fhir/Basic/$echo", params={"a": "1", "_format": "json"}))
    assert (got["id"], got["stored"], got["a"], got["base"]) == ("None", "None", "1", "http://testserver/fhir")
    assert "_format" not in got and got["strict"] is True  # fhir.unknown_parameters: refuse (the default)
    lenient = _parameters(api.get("/fhir/Basic/$echo", params={"a": "1"}, headers={"Prefer": "handling=lenient"}))
    assert lenient["strict"] is False


def test_instance_level_call(api: TestClient) -> None:
    got = _parameters(api.get("/fhir/Basic/1/$echo", headers={"Prefer": "handling=strict"}))
    assert (got["id"], got["stored"], got["strict"]) == ("1", "1", True)


@pytest.mark.parametrize(("url", "status"), [
    pytest.param("/fhir/Basic/999/$echo", 404, id="unknown-instance"),
    pytest.param("/fhir/Basic/1/$write", 404, id="type-level-only"),
    pytest.param("/fhir/Basic/$nothing", 404, id="instance-level-only"),
    pytest.param("/fhir/Basic/1/$nothing", 500, id="no-resource-answered"),
])
def test_refusals(api: TestClient, url: str, status: int) -> None:
    answer = api.get(url)
    assert answer.status_code == status and answer.json()["resourceType"] == "OperationOutcome", answer.text


def test_a_handler_cannot_write(api: TestClient, small_ctx: ServerContext) -> None:
    with small_ctx.db.connect() as conn:
        before = conn.execute(select(data_source.c.name)).scalars().all()
    assert api.get("/fhir/Basic/$write").status_code in (500, 503)
    with small_ctx.db.connect() as conn:
        assert conn.execute(select(data_source.c.name)).scalars().all() == before
    assert _parameters(api.get("/fhir/Basic/$echo"))["id"] == "None"  # the connection went back to the pool whole


def test_capabilities_list_every_operation(api: TestClient) -> None:
    entry = next(r for r in api.get("/fhir/metadata").json()["rest"][0]["resource"] if r["type"] == "Basic")
    assert [o["name"] for o in entry["operation"]] == ["echo", "write", "nothing", "export"]  # + Bulk Data's


@pytest.mark.parametrize(("operation", "message"), [
    pytest.param(Operation("x", None, "", DEFINITION), "a search .param. or has a handler", id="neither"),
    pytest.param(Operation("x", "_id", "", DEFINITION, handler=echo), "not both", id="both"),
    pytest.param(Operation("x", None, "", DEFINITION, handler=echo, levels=frozenset()), "levels", id="no-level"),
    pytest.param(Operation("x", None, "", DEFINITION, handler=echo, levels=frozenset({"system"})),  # type: ignore[arg-type]
                 "levels", id="bad-level"),
])
def test_declaration_checks(operation: Operation, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        provider(operation).check()


def test_a_search_operation_stays_at_the_instance_level() -> None:
    with pytest.raises(ConfigError, match="levels"):
        ResourceProvider("Basic", data_source, data_source.c.id, (data_source.c.id,), dict,
                         operations=(Operation("x", "_id", "", DEFINITION, levels=frozenset({"type"})),)).check()
