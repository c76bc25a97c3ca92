"""What the engine gives a provider with `last_updated=` and no `Versioning` (plugins/README.md section 1, issue 41
second platform-team trial, finding 4d): `_lastUpdated` searches on its column, but no sync point in its Bundles, no
`_history` and no vread; a versioned type (the org units' Organization) has all three. On both backends."""
from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select
from starlette.testclient import TestClient

from plugins.orgunits.tables import data_source
from server import ResourceProvider, as_utc, hookimpl, instant
from server.engine.context import ServerContext
from tests.support.clients import plugin_api
from tests.support.contexts import SECRET, make_settings


class UnversionedPlugin:
    @hookimpl
    def register_resource_providers(self, settings: Any) -> list[ResourceProvider]:
        return [ResourceProvider("Basic", data_source, data_source.c.id, (data_source.c.id, data_source.c.updated_at),
                                 lambda row: {"resourceType": "Basic", "id": str(row["id"])},
                                 last_updated=data_source.c.updated_at)]


@pytest.fixture(scope="module")
def api(small_ctx: ServerContext, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(small_ctx.settings.database_url, tmp_path_factory.mktemp("var"), auth={"secret": SECRET})
    with plugin_api(settings, small_ctx.db, "unversioned", UnversionedPlugin()) as client:
        yield client


@pytest.fixture(scope="module")
def stamped(small_ctx: ServerContext) -> str:
    with small_ctx.db.connect() as conn:
        return instant(as_utc(conn.execute(select(data_source.c.updated_at).where(data_source.c.id == 1)).scalar_one()))


@pytest.mark.parametrize("resource_type, versioned", [
    pytest.param("Basic", False, id="last-updated-only"),
    pytest.param("Organization", True, id="versioned"),
])
def test_what_a_type_with_instants_gets(api: TestClient, stamped: str, resource_type: str, versioned: bool) -> None:
    at = as_utc(stamped)
    found = api.get(f"/fhir/{resource_type}", params={"_lastUpdated": f"ge{stamped}", "_id": "1"}).json()
    assert [e["resource"]["id"] for e in found["entry"]] == ["1"]  # _lastUpdated searches its column
    later = instant(at + timedelta(seconds=1))
    assert api.get(f"/fhir/{resource_type}", params={"_lastUpdated": f"ge{later}", "_id": "1"}).json()["total"] == 0
    assert ("meta" in found and "lastUpdated" in found["meta"]) is versioned  # a sync point: versioned types only
    assert (api.get(f"/fhir/{resource_type}/1/_history").status_code == 200) is versioned
    assert (api.get(f"/fhir/{resource_type}/1/_history/1").status_code == 200) is versioned


@pytest.mark.parametrize("resource_type, versioned", [
    pytest.param("Basic", False, id="last-updated-only"),
    pytest.param("Organization", True, id="versioned"),
])
def test_the_capability_statement_promises_410_for_a_versioned_type_only(api: TestClient, resource_type: str,
                                                                        versioned: bool) -> None:
    """A deletion is known from the versions kept: a type without them answers 404 for a removed row."""
    entry = next(r for r in api.get("/fhir/metadata").json()["rest"][0]["resource"] if r["type"] == resource_type)
    read = next(i for i in entry["interaction"] if i["code"] == "read")
    assert ("410 if deleted" in read["documentation"]) is versioned
