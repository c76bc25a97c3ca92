"""The proof package's health workers (issue 29): a loader that resolves facility codes through the engine's
look-up, a Practitioner scoped through a chain (its roles, each through its Locations), and PractitionerRole
versions each scoped by the Locations that version was held at. Data: tests/proof/contract_samples.py."""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from starlette.testclient import TestClient

from server import (AmbiguousLookup, InvalidRequest, LoadError, ReferenceTarget, SearchParam, Settings, StringTarget,
                    Tenancy, Via, hookimpl)
from server.access.mint import mint_token
from server.cli.data import load_call
from server.contract.answers import entries
from server.contract.context import contract_context, installed
from server.declare.progress import Progress
from server.declare.registry import Registry
from server.engine.context import ServerContext
from server.engine.searches import lookup
from server.errors import ConfigError, ResourceTypeNotSupported
from server.plugins import get_plugin_manager
from server.settings import parse_settings
from plugins.orgunits.contract_samples import SUBJECT as ORGUNITS
from tests.proof.contract_samples import SUBJECT as PROOF
from tests.support.fixtures import client_fixture, context_fixture
from tests.support.proof import SITE, WORKERS

ctx = context_fixture(lambda url, var: contract_context(url, var, (ORGUNITS, PROOF)))
api = client_fixture(authorized=True)


def _as(ctx: ServerContext, *roots: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(ctx.settings, roots=list(roots))}"}


def _ids(api: TestClient, url: str, headers: dict[str, str] | None = None, mode: str = "match") -> set[str]:
    answer = api.get(url, headers=headers)
    assert answer.status_code == 200, answer.text
    return {rid for _, rid in entries(answer.json(), mode)}


# ------------------------------------------------------------------ the look-up a loader and a handler call

@pytest.mark.parametrize(("call", "found"), [
    pytest.param(lambda look: look.identified("Location", "KvNOePwHFyH"), "30", id="facility-code"),
    pytest.param(lambda look: look.identified("Location", "ASN-20"), "20", id="an-alias-is-an-identifier"),
    pytest.param(lambda look: look.identified("Location", "no-such-code"), None, id="unknown-code"),
    pytest.param(lambda look: look.ids("Location", "partof=10&_id=20,32,3"), ["20", "32"], id="search"),
    pytest.param(lambda look: [r["name"] for r in look.search("Location", [("name", "CSPS")])], ["CSPS Ségou"],
                 id="pairs"),
    pytest.param(lambda look: len(look.ids("Location", "")), 9, id="every-page-followed"),
    pytest.param(lambda look: look.ids("HealthcareService", "location=Location/20"), ["1", "2"],
                 id="another-plugins-type"),
    pytest.param(lambda look: look.one("Practitioner", "name=claire")["id"], "3", id="one"),
    pytest.param(lambda look: look.ids("Location", {"partof": "10"}), ["20", "32"], id="a-mapping"),
    pytest.param(lambda look: look.within("default").identified("Location", "KvNOePwHFyH"), "30",
                 id="within-its-account"),
    pytest.param(lambda look: look.within("elsewhere").identified("Location", "KvNOePwHFyH"), None,
                 id="within-another-account"),
])
def test_the_look_up_searches_any_type_with_its_providers_rules(ctx: ServerContext, call: Any, found: Any) -> None:
    assert call(lookup(ctx)) == found


@pytest.mark.parametrize(("call", "error"), [
    pytest.param(lambda look: look.ids("Location", "nmae=Boromo"), InvalidRequest, id="a-typo-is-an-error"),
    pytest.param(lambda look: look.ids("Location", "_count=1"), InvalidRequest, id="paging-is-the-look-ups"),
    pytest.param(lambda look: look.ids("Practitionner", "name=a"), ResourceTypeNotSupported, id="unknown-type"),
    pytest.param(lambda look: look.one("Location", "partof=10"), AmbiguousLookup, id="one-of-several"),
    pytest.param(lambda look: look.identified("Location", ""), InvalidRequest, id="no-value"),
    pytest.param(lambda look: look.ids("Location", "identifier="), InvalidRequest, id="an-empty-value"),
    pytest.param(lambda look: look.ids("Location", [("partof:below", " ")]), InvalidRequest, id="a-blank-value"),
    pytest.param(lambda look: look.ids("Location", "identifier"), InvalidRequest, id="not-a-query-string"),
    pytest.param(lambda look: look.ids("Location", "_sort=name"), InvalidRequest, id="a-result-parameter"),
])
def test_a_look_up_never_answers_everything_for_a_mistake(ctx: ServerContext, call: Any, error: type) -> None:
    with pytest.raises(error):
        call(lookup(ctx))


@pytest.mark.parametrize(("roots", "found"), [
    pytest.param(None, ["Location/1", "Location/3"], id="every-location"),
    pytest.param(["Location/3"], ["Location/3"], id="a-region-its-own"),
    pytest.param(["Location/10"], None, id="the-role-unseen"),
])
def test_an_operation_finds_another_types_resources_as_its_caller_sees_them(
        api: TestClient, ctx: ServerContext, roots: list[str] | None, found: list[str] | None) -> None:
    """The handler's look-up searches as the caller: a region's token gets the role's Locations in its region."""
    headers = _as(ctx, *roots) if roots is not None else {}
    answer = api.get("/fhir/PractitionerRole/4/$facilities", headers=headers)
    if found is None:
        assert answer.status_code == 404  # the role itself is out of its scope
        return
    assert answer.status_code == 200, answer.text
    assert sorted(e["fullUrl"].split("/fhir/")[1] for e in answer.json().get("entry", ())) == found


def test_the_loader_resolved_each_facility_code_to_its_location(api: TestClient) -> None:
    role = api.get("/fhir/PractitionerRole/4").json()
    assert role["location"] == [{"reference": "Location/1"}, {"reference": "Location/3"}]


def _load(ctx: ServerContext, path: Path) -> Any:
    fmt = ctx.extensions.load_formats["workers-json"]
    return fmt.load(load_call(ctx.settings, ctx.db, str(path), argparse.Namespace(), Progress("load")))


@pytest.mark.parametrize(("code", "message"), [
    pytest.param("KvNOePwHFy", "facility code 'KvNOePwHFy' names no Location", id="typo"),
    pytest.param("", "facility code '' names no Location|needs a value", id="empty"),
])
def test_a_facility_code_that_names_no_location_fails_the_load_and_writes_nothing(
        ctx: ServerContext, tmp_path: Path, code: str, message: str) -> None:
    data = json.loads(WORKERS.read_text(encoding="utf-8"))
    data["roles"][0]["facilities"] = [code]
    data["roles"].append({"id": 99, "practitioner": 1, "facilities": ["KvNOePwHFyH"]})
    path = tmp_path / "workers.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with ctx.db.connect() as conn:
        before = conn.execute(select(func.count()).select_from(ctx.registry.providers["PractitionerRole"].table))
        before_count = before.scalar_one()
    with pytest.raises((LoadError, InvalidRequest), match=message):
        _load(ctx, path)
    with ctx.db.connect() as conn:
        after = conn.execute(select(func.count()).select_from(ctx.registry.providers["PractitionerRole"].table))
        assert after.scalar_one() == before_count


# ------------------------------------------------------------------ scoping through a chain of references

@pytest.mark.parametrize(("roots", "practitioners", "roles"), [
    pytest.param(("Location/10",), {"1", "3"}, {"1", "3"}, id="district"),
    pytest.param(("Location/3",), {"2"}, {"4"}, id="other-region"),
    pytest.param(("Location/2",), {"1", "2", "3"}, {"1", "2", "3"}, id="region"),
    pytest.param(("Location/32",), set(), set(), id="only-a-deleted-role"),
    pytest.param(("Location/11", "Location/30"), {"1", "2", "3"}, {"1", "2", "3"}, id="two-roots"),
])
def test_a_practitioner_is_seen_through_its_roles_and_a_role_through_its_locations(
        api: TestClient, ctx: ServerContext, roots: tuple[str, ...], practitioners: set[str], roles: set[str]) -> None:
    headers = _as(ctx, *roots)
    assert _ids(api, "/fhir/Practitioner", headers) == practitioners
    assert _ids(api, "/fhir/PractitionerRole", headers) == roles
    for rid in ("1", "2", "3", "4"):
        assert api.get(f"/fhir/Practitioner/{rid}", headers=headers).status_code == (200 if rid in practitioners
                                                                                    else 404)
    # the chain's other end: _revinclude and _has keep to the scope too
    assert _ids(api, "/fhir/Practitioner?_revinclude=PractitionerRole:practitioner", headers, "include") == roles
    assert _ids(api, "/fhir/Practitioner?_has:PractitionerRole:practitioner:location=Location/30", headers) == \
        ({"1", "3"} & practitioners)


def test_a_token_of_the_whole_account_sees_every_practitioner_with_a_role_or_not(api: TestClient) -> None:
    """Issue 36: a row nothing refers to is seen by whoever sees the whole account (it was hidden from everyone),
    and one deleted with its roles answers 410 (it was 404 to everyone)."""
    assert _ids(api, "/fhir/Practitioner") == {"1", "2", "3", "4"}  # 4 holds no role
    assert api.get("/fhir/Practitioner/4").status_code == 200
    assert api.get("/fhir/Practitioner/5").status_code == 410  # deleted with its one role


# ------------------------------------------------------------------ a multi-valued reference into the pyramid

@pytest.mark.parametrize(("query", "roles"), [
    pytest.param("location:below=Location/10", {"1", "3"}, id="held-in-a-district"),
    pytest.param("location:below=3", {"4"}, id="held-at-the-unit-itself"),
    pytest.param("location:below=Location/1", {"1", "2", "3", "4"}, id="the-country"),
    pytest.param("location:below=Location/32", set(), id="only-a-deleted-role"),
    pytest.param("location:above=Location/30", {"1", "3", "4"}, id="above-a-facility"),
    pytest.param("location:below=Location/10,Location/11", {"1", "2", "3"}, id="or"),
])
def test_roles_below_a_unit_through_their_multi_valued_location(api: TestClient, query: str,
                                                                 roles: set[str]) -> None:
    assert _ids(api, f"/fhir/PractitionerRole?{query}") == roles


def test_a_role_its_facility_and_the_facilitys_parents_in_one_request(api: TestClient, ctx: ServerContext) -> None:
    url = "/fhir/PractitionerRole?_id=1&_include=PractitionerRole:location&_include:iterate=Location:partof" \
          "&_include=PractitionerRole:practitioner"
    bundle = api.get(url).json()
    assert sorted(entries(bundle, "include")) == [("Location", "1"), ("Location", "10"), ("Location", "2"),
                                                  ("Location", "20"), ("Location", "30"), ("Practitioner", "1")]
    # a district's token: the parents above its district stay out
    scoped = api.get(url, headers=_as(ctx, "Location/10")).json()
    assert sorted(entries(scoped, "include")) == [("Location", "10"), ("Location", "20"), ("Location", "30"),
                                                  ("Practitioner", "1")]


# ------------------------------------------------------------------ each version scoped by its own references

# (roots, read, the versions it sees, the versions it is shown as deletions): the region the role left keeps the
# version held there and is told it left (issue 37: its version 2 is a deletion there, a departure)
@pytest.mark.parametrize(("roots", "read", "versions", "departures"), [
    pytest.param(("Location/10",), 200, {"2"}, set(), id="moved-in: the version held outside is not its"),
    pytest.param(("Location/3",), 404, {"1"}, {"2"}, id="moved-out: the version held here stays its"),
    pytest.param(("Location/1",), 200, {"1", "2"}, set(), id="both"),
    pytest.param(("Location/11",), 404, set(), set(), id="neither"),
])
def test_each_version_of_a_role_is_seen_by_the_locations_it_was_held_at(
        api: TestClient, ctx: ServerContext, roots: tuple[str, ...], read: int, versions: set[str],
        departures: set[str]) -> None:
    headers = _as(ctx, *roots)
    assert api.get("/fhir/PractitionerRole/3", headers=headers).status_code == read
    for vid in ("1", "2"):
        answer = api.get(f"/fhir/PractitionerRole/3/_history/{vid}", headers=headers)
        assert answer.status_code == (200 if vid in versions else 410 if vid in departures else 404), answer.text
    history = api.get("/fhir/PractitionerRole/3/_history", headers=headers)
    assert history.status_code == (200 if versions else 404)

    def shown(bundle: dict[str, Any]) -> tuple[set[str], set[str]]:
        mine = [e for e in bundle.get("entry", ()) if e["fullUrl"].endswith("/PractitionerRole/3")]
        return ({e["resource"]["meta"]["versionId"] for e in mine if "resource" in e},
                {e["response"]["etag"][3:-1] for e in mine if e["request"]["method"] == "DELETE"})

    if versions:
        assert shown(history.json()) == (versions, departures)
    typed = api.get("/fhir/PractitionerRole/_history?_count=100", headers=headers).json()
    assert shown(typed) == (versions, departures)


def test_a_deletion_is_seen_where_the_version_it_deletes_was(api: TestClient, ctx: ServerContext) -> None:
    headers = _as(ctx, "Location/32")
    assert api.get("/fhir/PractitionerRole/5", headers=headers).status_code == 410
    history = api.get("/fhir/PractitionerRole/5/_history", headers=headers).json()
    assert [e["request"]["method"] for e in history["entry"]] == ["DELETE", "POST"]


# ------------------------------------------------------------------ what a declaration gets wrong is refused

def _registry_with(tenancy: Tenancy, **role: Any) -> None:
    """The health workers' providers, Practitioner scoped by `tenancy` (PractitionerRole with `role` changed),
    registered by a plugin of the test."""
    from healthcare_services.workers import PRACTITIONER, ROLE

    class Workers:
        @hookimpl
        def register_resource_providers(self, settings: Settings) -> list[Any]:
            return [replace(PRACTITIONER, tenancy=tenancy), replace(ROLE, **role)]

    settings = parse_settings({"plugins": {"healthcare_services": {"enabled": False}}})
    Registry.collect(get_plugin_manager(settings, [("workers", Workers())]), settings)


@pytest.mark.parametrize(("via", "message"), [
    pytest.param(Via("practicioner", "PractitionerRole", reverse=True), "has no reference search parameter "
                 "'practicioner' to Practitioner", id="typo-in-the-parameter"),
    pytest.param(Via("location", "PractitionerRole", reverse=True), "no reference search parameter 'location' to "
                 "Practitioner", id="a-parameter-to-another-type"),
    pytest.param(Via("practitioner", "PractitionerRol", reverse=True), "'PractitionerRol' \\(its tenancy.via\\), "
                 "which is no FHIR R4 resource type: a typo", id="typo-in-the-type"),
    pytest.param(Via("practitioner", "Endpoint", reverse=True), "through Endpoint the other way round, but Endpoint "
                 "has no reference search parameter|which no enabled plugin serves", id="a-type-not-served"),
])
def test_a_reverse_scope_that_names_nothing_is_refused_at_start_up(via: Via, message: str) -> None:
    with installed([SITE]), pytest.raises(ConfigError, match=message):
        _registry_with(Tenancy(via=via))


def test_a_typo_in_a_referenced_type_is_refused_at_start_up() -> None:
    """A reference to no FHIR type is a typo (its resources would silently lose the reference); one to a type no
    enabled plugin serves is left out, as a plugin disabled on purpose wants."""
    from healthcare_services.workers import PRACTITIONER
    with installed([SITE]), pytest.raises(ConfigError, match="PractitionerRole refers to 'Practicioner' \\(its "
                                                             "'practitioner' element\\), which is no FHIR R4 resource"):
        _registry_with(PRACTITIONER.tenancy, references={"practitioner": "Practicioner"})


@pytest.mark.parametrize(("param", "message"), [
    pytest.param(lambda t: SearchParam("location", "reference", (ReferenceTarget(t.role_location.c.location_id,
                                                                                 "Location"),), "held at"),
                 "location reads hw_practitioner_role_location.location_id, not a column of the provider's table",
                 id="a-side-table-without-through"),
    pytest.param(lambda t: SearchParam("name", "string", (StringTarget(t.practitioner.c.name_norm,
                                                                       t.practitioner.c.name),), "name"),
                 "name reads hw_practitioner.name_norm, not a column of the provider", id="another-types-table"),
])
def test_a_target_on_a_table_the_provider_does_not_read_is_refused(param: Any, message: str) -> None:
    """Read beside the provider's rows, such a column would pair every row with every other: `location=10` would
    match every role, and a district's token see them all."""
    from healthcare_services import tables
    from healthcare_services.workers import PRACTITIONER, ROLE
    with installed([SITE]), pytest.raises(ConfigError, match=message):
        _registry_with(PRACTITIONER.tenancy, search_params=(*ROLE.search_params[:1], param(tables),
                                                            *ROLE.search_params[2:]))
