"""A provider without `tenancy` is public (every account, every subtree), but a SMART scope's query on its type
still narrows it: a query is never ignored (README, SMART scopes). A platform team's public provider once served
every row to `system/Basic.rs?status=VALID`, through read, search and $export, while the same token shape narrowed
Location (a platform-team walk of 2026-12-01). On both backends."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from sqlalchemy import select
from starlette.testclient import TestClient

from plugins.orgunits.tables import org_unit
from server import ResourceProvider, SearchParam, TokenTarget, hookimpl
from server.engine.context import ServerContext
from tests.support.bulk import export, lines
from tests.support.clients import plugin_api
from tests.support.contexts import SECRET, bearer, make_settings

STATUS = SearchParam("status", "token", (TokenTarget(org_unit.c.validation_status),), "the unit's validation status")


class PublicPlugin:
    @hookimpl
    def register_resource_providers(self, settings: Any) -> list[ResourceProvider]:
        return [ResourceProvider("Basic", org_unit, org_unit.c.id, (org_unit.c.id, org_unit.c.validation_status),
                                 lambda row: {"resourceType": "Basic", "id": str(row["id"])},
                                 search_params=(STATUS,))]


@pytest.fixture(scope="module")
def api(small_ctx: ServerContext, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = make_settings(small_ctx.settings.database_url, tmp_path_factory.mktemp("var"), auth={"secret": SECRET})
    with plugin_api(settings, small_ctx.db, "public", PublicPlugin()) as client:
        client.app_settings = settings  # type: ignore[attr-defined]
        yield client


@pytest.fixture(scope="module")
def statuses(small_ctx: ServerContext) -> dict[str, str]:
    with small_ctx.db.connect() as conn:
        return {str(rid): status for rid, status in conn.execute(select(org_unit.c.id, org_unit.c.validation_status))}


def _headers(api: TestClient, scope: str, **claims: Any) -> dict[str, str]:
    return bearer(api.app_settings, scope=scope, **claims)  # type: ignore[attr-defined]


def _searched(api: TestClient, headers: dict[str, str]) -> set[str]:
    found: set[str] = set()
    url: str | None = "/fhir/Basic?_count=7"
    while url is not None:
        page = api.get(url, headers=headers)
        assert page.status_code == 200, page.text
        bundle = page.json()
        found |= {e["resource"]["id"] for e in bundle.get("entry", ())}
        url = next((link["url"] for link in bundle["link"] if link["relation"] == "next"), None)
    return found


CASES = [
    pytest.param("system/Basic.rs?status=VALID", {}, {"VALID"}, id="a-query"),
    pytest.param("system/Basic.rs?status=VALID system/Basic.rs?status=REJECTED", {}, {"VALID", "REJECTED"},
                 id="two-queries-a-union"),
    pytest.param("system/Basic.rs?status=VALID system/Basic.rs", {}, None, id="an-unfiltered-scope-grants-all"),
    pytest.param("system/Basic.rs?status=VALID", {"org_unit_roots": ["Location/3"]}, {"VALID"},
                 id="with-roots-public-but-queried"),
    pytest.param("system/Basic.rs", {"org_unit_roots": ["Location/3"]}, None, id="public-to-a-subtree"),
    pytest.param("system/Location.rs?type=CSPS system/Basic.rs", {}, None, id="another-types-query"),
]


@pytest.mark.parametrize(("scope", "claims", "kept"), CASES)
def test_a_scope_query_narrows_a_public_type(api: TestClient, statuses: dict[str, str], scope: str,
                                             claims: dict[str, Any], kept: set[str] | None) -> None:
    expected = {rid for rid, status in statuses.items() if kept is None or status in kept}
    assert expected and (kept is None or expected != set(statuses)), "a case that tells nothing"
    headers = _headers(api, scope, **claims)
    for _ in ("cold", "warm"):
        assert _searched(api, headers) == expected
        for rid in sorted(statuses, key=int):
            assert api.get(f"/fhir/Basic/{rid}", headers=headers).status_code == (200 if rid in expected else 404)


def test_an_export_of_a_public_type_keeps_to_the_query(api: TestClient, statuses: dict[str, str]) -> None:
    headers = _headers(api, "system/Basic.rs?status=VALID")
    files = export(api, "/fhir/Basic/$export", headers)["output"]
    exported = {orjson.loads(line)["id"] for line in lines(api, files, headers).get("Basic", [])}
    assert exported == {rid for rid, status in statuses.items() if status == "VALID"}
