"""plugins/README.md section 7's recipe for "owner of a facility" (trial of issue 41, finding 8): an
OrganizationAffiliation whose `organization` is the owner (a directory Organization) and whose `location` is the
facility, searched both ways with `_has` as the README writes it; and a token limited to subtrees sees the
affiliations of its facilities but no owner Organization (the Organization provider is scoped by account only).
Both backends."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table
from starlette.testclient import TestClient

from plugins.orgunits.contract_samples import SOURCE
from server import ReferenceTarget, ResourceProvider, SearchParam, Settings, Tenancy, TokenTarget, Via, hookimpl
from server.app import create_app
from server.contract import load_files
from server.engine.context import ServerContext
from tests.support.contexts import bearer, pyramid_context
from tests.support.fixtures import context_fixture

ROLE = "https://example.org/fhir/CodeSystem/affiliation-role"
affiliation = Table("test_owner_affiliation", MetaData(), Column("id", Integer, primary_key=True),
                    Column("organization_id", Integer), Column("location_id", Integer), Column("role", String))
OWNERS = [{"code": "CHAK", "name": "Christian Health Association"}, {"code": "MOH", "name": "Ministry of Health"}]
# the owner of each facility: CHAK owns 30 and 31, MOH owns 32
OWNED = {"30": "CHAK", "31": "CHAK", "32": "MOH"}


def _to_resource(row: Any) -> dict[str, Any]:
    return {"resourceType": "OrganizationAffiliation", "id": str(row["id"]), "active": True,
            "organization": {"reference": f"Organization/{row['organization_id']}"},
            "location": [{"reference": f"Location/{row['location_id']}"}],
            "code": [{"coding": [{"system": ROLE, "code": row["role"]}]}]}


class Affiliations:
    @hookimpl
    def register_resource_providers(self, settings: Settings) -> list[ResourceProvider]:
        a = affiliation
        return [ResourceProvider(
            "OrganizationAffiliation", a, a.c.id, tuple(a.c), _to_resource,
            search_params=(
                SearchParam("primary-organization", "reference", (ReferenceTarget(a.c.organization_id, "Organization"),),
                            "the owner"),
                SearchParam("location", "reference", (ReferenceTarget(a.c.location_id, "Location"),), "the facility"),
                SearchParam("role", "token", (TokenTarget(a.c.role, system=ROLE, codes={"owner": ("owner",)}),),
                            "the relationship")),
            references={"organization": "Organization", "location": "Location"},
            tenancy=Tenancy(via=Via("location", "Location")))]


def _build(url: str, var: Path) -> ServerContext:
    ctx = pyramid_context(url, var)
    owners = var / "owners.json"
    owners.write_text(json.dumps({"organizations": OWNERS}), encoding="utf-8")
    load_files(ctx.settings, "organizations", owners, data_source=SOURCE)
    with ctx.db.begin() as conn:
        affiliation.drop(conn, checkfirst=True)
        affiliation.create(conn)
        ids = {code: str(1_000_000_000 + n) for n, code in enumerate(o["code"] for o in OWNERS)}
        conn.execute(affiliation.insert(), [{"id": n, "organization_id": int(ids[owner]), "location_id": int(facility),
                                             "role": "owner"} for n, (facility, owner) in enumerate(OWNED.items(), 1)])
    return ctx


ctx = context_fixture(_build)


@pytest.fixture(scope="module")
def api(ctx: ServerContext) -> Iterator[TestClient]:
    with TestClient(create_app(ctx.settings, extra_plugins=[("affiliations", Affiliations())], db=ctx.db),
                    base_url="http://testserver") as client:
        client.headers.update(bearer(ctx.settings))
        yield client
    with ctx.db.begin() as conn:
        affiliation.drop(conn, checkfirst=True)


def _ids(api: TestClient, query: str, headers: dict[str, str] | None = None, mode: str = "match") -> list[str]:
    answer = api.get(f"/fhir/{query}", headers=headers or {})
    assert answer.status_code == 200, answer.text
    return sorted((e["resource"]["resourceType"] + "/" + e["resource"]["id"] for e in answer.json().get("entry", ())
                   if e["search"]["mode"] == mode), key=lambda ref: (ref.split("/")[0], int(ref.split("/")[1])))


CHAK, MOH = "1000000000", "1000000001"


@pytest.mark.parametrize("query, found", [
    pytest.param(f"Location?_has:OrganizationAffiliation:location:primary-organization={CHAK}",
                 ["Location/30", "Location/31"], id="facilities-of-an-owner"),
    pytest.param("Organization?_has:OrganizationAffiliation:primary-organization:location=32",
                 [f"Organization/{MOH}"], id="owner-of-a-facility"),
    pytest.param("OrganizationAffiliation?primary-organization.identifier=CHAK",
                 ["OrganizationAffiliation/1", "OrganizationAffiliation/2"], id="affiliations-of-an-owner-by-code"),
    pytest.param("OrganizationAffiliation?location=30&role=owner", ["OrganizationAffiliation/1"],
                 id="affiliation-of-a-facility"),
])
def test_the_readme_queries_find_owners_and_facilities(api: TestClient, query: str, found: list[str]) -> None:
    assert _ids(api, query) == found


@pytest.mark.parametrize("query, found, mode", [
    pytest.param("OrganizationAffiliation?location=30", ["OrganizationAffiliation/1"], "match",
                 id="its-facilitys-affiliation"),
    pytest.param("OrganizationAffiliation?location=30&_include=OrganizationAffiliation:primary-organization", [],
                 "include", id="no-owner-included"),
    pytest.param("Organization", [], "match", id="no-organization-at-all"),
    pytest.param("Organization?_has:OrganizationAffiliation:primary-organization:location=30", [], "match",
                 id="no-owner-by-has"),
])
def test_a_token_limited_to_subtrees_sees_no_owner(api: TestClient, ctx: ServerContext, query: str,
                                                   found: list[str], mode: str) -> None:
    district = bearer(ctx.settings, org_unit_roots=["Location/20"])
    assert _ids(api, query, district, mode) == found
    assert api.get(f"/fhir/Organization/{CHAK}", headers=district).status_code == 404
