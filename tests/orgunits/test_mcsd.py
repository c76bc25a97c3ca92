"""The CapabilityStatement instantiates the IHE mCSD Directory and its description lists every difference from it,
as the plugins enabled serve it; Organization is the Directory's (type, partof, vread and _history)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from plugins.orgunits.mcsd import BY_DESIGN, MCSD_DIRECTORY
from server.access.mint import mint_token
from server.app import create_app
from server.engine.context import ServerContext
from tests.support.contexts import SECRET, make_settings

NOT_SERVED = ("resource types not served: Practitioner, PractitionerRole, HealthcareService, Endpoint, "
              "OrganizationAffiliation")
WITHOUT_ORGANIZATION = ("resource types not served: Organization, Practitioner, PractitionerRole, HealthcareService, "
                        "Endpoint, OrganizationAffiliation")
ORGANIZATION = ("Organization: no search parameter ihe-mcsd-hierarchy-type, ihe-mcsd-hierarchy-partof; no modifier "
                "partof:above, partof:below; no chained parameter endpoint.connection-type, endpoint.payload-type; no "
                "_include Organization:endpoint; no _revinclude OrganizationAffiliation:participating-organization, "
                "OrganizationAffiliation:primary-organization")


def _statement(small_ctx: ServerContext, tmp_path: Path, plugins: dict[str, Any]) -> dict[str, Any]:
    settings = make_settings(small_ctx.settings.database_url, tmp_path, auth={"secret": SECRET}, plugins=plugins)
    client = TestClient(create_app(settings, db=small_ctx.db))
    client.headers["Authorization"] = f"Bearer {mint_token(settings)}"
    statement: dict[str, Any] = client.get("/fhir/metadata").json()
    return statement


def _differences(statement: dict[str, Any]) -> list[str]:
    description = statement["description"]
    _, _, listed = description.partition("differs from it as follows: ")
    return listed.removesuffix(".").split("; ")


@pytest.mark.parametrize("plugins, differences", [
    pytest.param({}, [*BY_DESIGN, NOT_SERVED, *ORGANIZATION.split("; ")], id="shipped-plugins"),
    pytest.param({"organization": {"enabled": False}}, [
        *BY_DESIGN, WITHOUT_ORGANIZATION, "Location: no search parameter organization",
        "no chained parameter organization.active, organization.identifier, organization.name",
        "no _include Location:organization"], id="without-organization"),
])
def test_the_description_lists_every_difference_from_the_mcsd_directory(
        small_ctx: ServerContext, tmp_path: Path, plugins: dict[str, Any], differences: list[str]) -> None:
    statement = _statement(small_ctx, tmp_path, plugins)
    assert statement["instantiates"][0] == MCSD_DIRECTORY
    assert _differences(statement) == differences


@pytest.mark.parametrize("element, expected", [
    pytest.param("versioning", "versioned", id="versioned"),
    pytest.param("readHistory", True, id="read-history"),
    pytest.param("interaction", {"read", "vread", "history-instance", "history-type", "search-type"},
                 id="update-option"),
    pytest.param("searchParam", {"_id", "_lastUpdated", "active", "identifier", "name", "partof", "type"},
                 id="directory-parameters"),
    pytest.param("searchInclude", {"Organization:partof"}, id="includes"),
    pytest.param("searchRevInclude", {"Location:organization", "Organization:partof"}, id="revincludes"),
])
def test_organization_is_the_directorys(client: TestClient, element: str, expected: Any) -> None:
    entry = next(r for r in client.get("/fhir/metadata").json()["rest"][0]["resource"] if r["type"] == "Organization")
    value = entry[element]
    if isinstance(expected, set):
        value = {item["code"] if "code" in item else item["name"] for item in value} if isinstance(value[0], dict) \
            else set(value)
        assert expected <= value
    else:
        assert value == expected
