"""A version's snapshot held as JSON text (a `Text` or binary `history_snapshot` column holding `json.dumps(...)`)
reaches `to_resource` decoded, as a `JSON` column's does: vread, `_history` and pre-rendering (trial of issue 41,
finding 6: a `Text` snapshot reached `to_resource` as a str, and `_history` answered 500). Both backends."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import JSON, Boolean, Column, DateTime, Integer, LargeBinary, MetaData, String, Table, Text
from sqlalchemy.types import TypeEngine
from starlette.testclient import TestClient

from server import Prerendered, ResourceProvider, Versioning, hookimpl, instant
from server.app import create_app
from server.access.mint import mint_token
from server.declare.provider import snapshot_of
from server.declare.registry import Registry
from server.engine.context import ServerContext
from server.plugins import get_plugin_manager
from server.settings import Settings
from server.storage.prerender import refresh
from tests.support import bulk
from tests.support.contexts import SECRET, make_settings

T1 = datetime(2026, 1, 1, tzinfo=timezone.utc)
T2 = datetime(2026, 2, 1, tzinfo=timezone.utc)


def _to_binary(snapshot: dict[str, Any]) -> bytes:
    return json.dumps(snapshot).encode("utf-8")


# the snapshot column's type, and how a plugin writes a snapshot into it
KINDS = {
    "json": (JSON(), lambda snapshot: snapshot),
    "text": (Text(), json.dumps),
    "binary": (LargeBinary(), _to_binary),
}


class Endpoints:
    """A versioned Endpoint provider whose snapshots are held in a column of the given type."""

    def __init__(self, kind: str, prerender: bool) -> None:
        column_type: TypeEngine[Any] = KINDS[kind][0]
        metadata = MetaData()
        self.table = Table(f"snap_{kind}_endpoint", metadata, Column("id", Integer, primary_key=True),
                           Column("address", String), Column("version_id", Integer),
                           Column("updated_at", DateTime(timezone=True)), Column("deleted", Boolean))
        self.history = Table(f"snap_{kind}_endpoint_history", metadata, Column("endpoint_id", Integer, primary_key=True),
                             Column("version_id", Integer, primary_key=True),
                             Column("updated_at", DateTime(timezone=True)), Column("deleted", Boolean),
                             Column("snapshot", column_type), Column("body", LargeBinary))
        self.metadata, self.prerender = metadata, prerender

    @staticmethod
    def to_resource(row: Any) -> dict[str, Any]:
        return {"resourceType": "Endpoint", "id": str(row["id"]), "address": row["address"], "status": "active",
                "meta": {"versionId": str(row["version_id"]), "lastUpdated": instant(row["updated_at"])}}

    @hookimpl
    def register_resource_providers(self, settings: Settings) -> list[ResourceProvider]:
        t, h = self.table, self.history
        return [ResourceProvider(
            "Endpoint", t, t.c.id, tuple(t.c), self.to_resource,
            versioning=Versioning(t.c.version_id, t.c.updated_at, t.c.deleted, h, h.c.endpoint_id, h.c.version_id,
                                  h.c.updated_at, h.c.deleted, h.c.snapshot),
            prerendered=Prerendered(h.c.body, "snapshots-1") if self.prerender else None)]


def _write(ctx: ServerContext, plugin: Endpoints, kind: str) -> None:
    encode: Callable[[dict[str, Any]], Any] = KINDS[kind][1]
    versions = [(1, T1, "https://old.example.org/fhir"), (2, T2, "https://new.example.org/fhir")]
    with ctx.db.begin() as conn:
        plugin.metadata.drop_all(conn)
        plugin.metadata.create_all(conn)
        for version, at, address in versions:
            conn.execute(plugin.history.insert(), {
                "endpoint_id": 7, "version_id": version, "updated_at": at, "deleted": False,
                "snapshot": encode({"id": 7, "address": address, "version_id": version, "updated_at": at.isoformat()})})
        conn.execute(plugin.table.insert(), {"id": 7, "address": versions[-1][2], "version_id": 2, "updated_at": T2,
                                             "deleted": False})


@pytest.fixture
def served(small_ctx: ServerContext, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[TestClient]:
    kind, prerender = request.param
    plugin = Endpoints(kind, prerender)
    _write(small_ctx, plugin, kind)
    settings = make_settings(small_ctx.settings.database_url, tmp_path, auth={"secret": SECRET})
    if prerender:
        assert refresh(small_ctx.db, Registry.collect(get_plugin_manager(settings, [("snap", plugin)]), settings)) == 2
    with TestClient(create_app(settings, extra_plugins=[("snap", plugin)], db=small_ctx.db)) as client:
        client.headers["Authorization"] = f"Bearer {mint_token(settings)}"
        yield client
    with small_ctx.db.begin() as conn:
        plugin.metadata.drop_all(conn)


CASES = [pytest.param((kind, prerender), id=f"{kind}{'-prerendered' if prerender else ''}")
         for kind in KINDS for prerender in (False, True)]


@pytest.mark.parametrize("served", CASES, indirect=True)
def test_an_old_version_renders_whatever_column_holds_its_snapshot(served: TestClient) -> None:
    vread = served.get("/fhir/Endpoint/7/_history/1")
    assert vread.status_code == 200, vread.text
    assert (vread.json()["address"], vread.json()["meta"]["versionId"]) == ("https://old.example.org/fhir", "1")
    history = served.get("/fhir/Endpoint/7/_history")
    assert history.status_code == 200, history.text
    assert [e["resource"]["address"] for e in history.json()["entry"]] == ["https://new.example.org/fhir",
                                                                          "https://old.example.org/fhir"]
    assert served.get("/fhir/Endpoint/_history").json()["total"] == 2


@pytest.mark.parametrize("stored, decoded", [
    pytest.param({"id": 7}, {"id": 7}, id="json-column-value-as-it-comes"),
    pytest.param('{"id": 7}', {"id": 7}, id="json-text"),
    pytest.param(b'{"id": 7}', {"id": 7}, id="json-bytes"),
    pytest.param(memoryview(b'{"id": 7}'), {"id": 7}, id="json-memoryview"),
    pytest.param(None, None, id="none-a-deletion"),
])
def test_snapshot_of_decodes_json_text(stored: Any, decoded: Any) -> None:
    assert snapshot_of(stored) == decoded


def test_a_snapshot_text_that_is_not_json_is_named() -> None:
    with pytest.raises(ValueError, match="a version's snapshot is text that is not JSON \\('id=7'"):
        snapshot_of("id=7")


@pytest.mark.parametrize("served", [case for case in CASES if "prerendered" not in case.id], indirect=True)
def test_a_bulk_export_renders_the_snapshots(served: TestClient) -> None:
    """Bulk Data reads each resource's version at its transactionTime from the history table: its snapshot."""
    found = bulk.lines(served, bulk.export(served, "/fhir/Endpoint/$export")["output"])
    assert [json.loads(line)["address"] for line in found["Endpoint"]] == ["https://new.example.org/fhir"]
