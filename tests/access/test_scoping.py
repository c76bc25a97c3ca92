"""How each scoping mode applies a token's scope, and that it fails closed: typed roots (`Location/10`, bare ids,
`system|value`), a provider scoped by its own subtree (Location), through a reference to Location (Device: one
reference and no partition; Schedule: several references, its own account), and by its account only
(Organization, which shows a token limited to subtrees nothing). Universe: tests.support.scoping."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, Table, select
from starlette.testclient import TestClient

from server import ReferenceTarget, ResourceProvider, SearchParam, Subtree, Tenancy, Via
from server.access.roots import IdentifierRoot, IdRoot, Root, parse_root
from server.access.tenancy import AccessScope, caller_account
from server.engine.context import ServerContext, create_context
from server.engine import searches
from server.engine.caller import TRUSTED
from server.errors import ConfigError, Forbidden
from tests.support.contexts import SECRET, bearer, make_settings
from tests.support.fixtures import client_fixture, context_fixture
from tests.support.scoping import (
    ALPHA,
    BETA_V2,
    DEVICES,
    IDENTIFIER_3,
    NS,
    SCHEDULES,
    ScopedThroughLocation,
    universe_context,
)

SUBTREE_10 = frozenset({10, 20, 30, 31, 32})
NOTHING: dict[str, frozenset[int]] = {"Location": frozenset(), "Organization": frozenset(), "Device": frozenset(),
                                      "Schedule": frozenset()}


ctx = context_fixture(universe_context)
app_client = client_fixture()


@pytest.fixture(scope="module")
def orgs(ctx: ServerContext) -> dict[str, int]:
    with ctx.db.connect() as conn:
        return {acct: int(i) for acct, i in conn.exec_driver_sql("SELECT account, id FROM data_source")}


def seen(app_client: TestClient, resource_type: str, claims: dict[str, Any], ctx: ServerContext) -> set[int]:
    body = app_client.get(f"/fhir/{resource_type}?_count=100", headers=bearer(ctx.settings, **claims)).json()
    found = {int(e["resource"]["id"]) for e in body.get("entry", []) if e["search"]["mode"] == "match"}
    assert body["total"] == len(found)
    return found


def unknown_shape(response: Any, rid: int) -> tuple[int, str, str]:
    return response.status_code, response.headers["content-type"], re.sub(rf"(?<=/){rid}\b", "ID", response.text)


# ------------------------------------------------------------------ typed roots

@pytest.mark.parametrize("text, root", [
    pytest.param("Location/12", IdRoot("Location", "12"), id="typed"),
    pytest.param("12", IdRoot(None, "12"), id="bare-id"),
    pytest.param("https://sys|A-1", IdentifierRoot("https://sys|A-1"), id="identifier"),
    pytest.param("urn:ietf:rfc:3986|urn:uuid:0b6f", IdentifierRoot("urn:ietf:rfc:3986|urn:uuid:0b6f"), id="urn"),
    pytest.param("Patient/12", IdRoot("Patient", "12"), id="any-type-parses"),
    pytest.param("location/12", None, id="type-lowercase"),
    pytest.param("Location/", None, id="no-id"),
    pytest.param("/12", None, id="no-type"),
    pytest.param("Location/12/_history/1", None, id="versioned"),
    pytest.param("https://x.org/fhir/Location/12", None, id="absolute-url"),
    pytest.param("Location/1 2", None, id="space-in-id"),
    pytest.param("https://sys|", None, id="system-only"),
    pytest.param("|A-1", None, id="value-only"),
    pytest.param("", None, id="empty"),
    pytest.param("x" * 65, None, id="id-too-long"),
])
def test_roots_are_parsed_by_form(text: str, root: Root | None) -> None:
    assert parse_root(text) == root


@pytest.mark.parametrize("roots, locations", [
    pytest.param(["Location/10"], SUBTREE_10, id="typed"),
    pytest.param(["10"], SUBTREE_10, id="bare-id-is-a-location"),
    pytest.param([10], SUBTREE_10, id="bare-number"),
    pytest.param([IDENTIFIER_3], {3}, id="identifier"),
    pytest.param(["urn:ietf:rfc:3986|urn:uuid:0b6f7c1e-4a47-4d7e-9a3e-000000000001"], ALPHA, id="uuid-identifier"),
    pytest.param(["Location/10", "Location/30", "3"], SUBTREE_10 | {3}, id="nested-and-mixed"),
    pytest.param(["Patient/10", "Location/3"], {3}, id="bad-root-beside-a-good-one"),
    pytest.param(["Organization/1"], set(), id="type-without-subtree"),
    pytest.param(["Patient/10"], set(), id="type-not-served"),
    pytest.param(["Device/1"], set(), id="type-scoped-via-reference"),
    pytest.param(["location/10"], set(), id="malformed-type"),
    pytest.param(["Location/abc"], set(), id="id-not-a-location-id"),
    pytest.param(["https://x.org/fhir/Location/10"], set(), id="absolute-url"),
    pytest.param(["Location/201"], set(), id="root-of-another-account"),
    pytest.param(["Location/999999"], set(), id="unknown-root"),
    pytest.param([f"{NS}/fhir/sid/ministere-de-la-sante|"], set(), id="system-only"),
    pytest.param(["|HB0000000003"], set(), id="value-only"),
    pytest.param(["Location|HB0000000003"], set(), id="unknown-system"),
    pytest.param([], set(), id="empty-list"),
])
def test_typed_roots_are_resolved_against_the_type_they_name(app_client: TestClient, ctx: ServerContext,
                                                             roots: list[Any], locations: set[int]) -> None:
    assert seen(app_client, "Location", {"account": "alpha", "org_unit_roots": roots}, ctx) == locations


# ------------------------------------------------------------------ each scoping mode, every caller

def _devices(*locations: int) -> frozenset[int]:
    return frozenset(d for d, loc in DEVICES.items() if loc in locations)


def _schedules(account: str, *locations: int) -> frozenset[int]:
    return frozenset(s for s, (acct, locs) in SCHEDULES.items() if acct == account and set(locs) & set(locations))


CALLERS: dict[str, tuple[dict[str, Any], dict[str, frozenset[int]]]] = {
    # a caller seeing its whole account sees every row of it, whatever it refers to (issue 36: Schedule 4 names no
    # Location); Device has no account of its own: what it refers to decides
    "alpha": ({"account": "alpha"}, {"Location": ALPHA, "Organization": frozenset({-1}),
                                     "Device": _devices(*ALPHA), "Schedule": _schedules("alpha", *ALPHA) | {4}}),
    "beta": ({"account": "beta"}, {"Location": BETA_V2, "Organization": frozenset({-2}),
                                   "Device": _devices(*BETA_V2), "Schedule": _schedules("beta", *BETA_V2)}),
    "alpha-subtree-10": ({"account": "alpha", "org_unit_roots": ["Location/10"]},
                         {"Location": SUBTREE_10, "Organization": frozenset(), "Device": _devices(*SUBTREE_10),
                          "Schedule": _schedules("alpha", *SUBTREE_10)}),
    "alpha-subtree-3": ({"account": "alpha", "org_unit_roots": [IDENTIFIER_3]},
                        {"Location": frozenset({3}), "Organization": frozenset(), "Device": _devices(3),
                         "Schedule": _schedules("alpha", 3)}),
    "beta-subtree-201": ({"account": "beta", "org_unit_roots": ["201"]},
                         {"Location": BETA_V2, "Organization": frozenset(), "Device": _devices(*BETA_V2),
                          "Schedule": _schedules("beta", *BETA_V2)}),
    "alpha-no-roots": ({"account": "alpha", "org_unit_roots": []}, NOTHING),
    "alpha-null-roots": ({"account": "alpha", "org_unit_roots": None}, NOTHING),
    "alpha-organization-root": ({"account": "alpha", "org_unit_roots": ["Organization/1"]}, NOTHING),
    "unknown-account": ({"account": "gamma"}, NOTHING),
}
PROBED = {"Location": ALPHA | BETA_V2 | {101, 204}, "Device": frozenset(DEVICES), "Schedule": frozenset(SCHEDULES)}


def _expected(resource_type: str, visible: frozenset[int], orgs: dict[str, int]) -> set[int]:
    """Organizations are named -1 (alpha's) and -2 (beta's) in the table: their ids come from the database."""
    return {orgs["alpha"] if v == -1 else orgs["beta"] if v == -2 else v for v in visible}


def test_the_table_is_not_empty_where_it_matters() -> None:
    assert CALLERS["alpha-subtree-10"][1]["Device"] == {1} and CALLERS["alpha-subtree-10"][1]["Schedule"] == {1}
    assert CALLERS["alpha-subtree-3"][1]["Schedule"] == {1, 2} and CALLERS["beta"][1]["Schedule"] == {3}


@pytest.mark.parametrize("resource_type", ["Location", "Organization", "Device", "Schedule"])
@pytest.mark.parametrize("caller", CALLERS)
def test_each_mode_shows_exactly_what_the_scope_allows(app_client: TestClient, ctx: ServerContext,
                                                       orgs: dict[str, int], caller: str, resource_type: str) -> None:
    claims, visible = CALLERS[caller]
    assert seen(app_client, resource_type, claims, ctx) == _expected(resource_type, visible[resource_type], orgs)


@pytest.mark.parametrize("resource_type", ["Organization", "Device", "Schedule"])
@pytest.mark.parametrize("caller", CALLERS)
def test_out_of_scope_ids_answer_exactly_as_unknown_ids(app_client: TestClient, ctx: ServerContext,
                                                        orgs: dict[str, int], caller: str, resource_type: str) -> None:
    claims, visible = CALLERS[caller]
    sent = bearer(ctx.settings, **claims)
    missing = unknown_shape(app_client.get(f"/fhir/{resource_type}/999999", headers=sent), 999_999)
    assert missing[0] == 404
    expected = _expected(resource_type, visible[resource_type], orgs)
    for rid in sorted(PROBED.get(resource_type, frozenset(orgs.values()))):
        response = app_client.get(f"/fhir/{resource_type}/{rid}", headers=sent)
        if rid in expected:
            assert response.status_code == 200, rid
        else:
            assert unknown_shape(response, rid) == missing, rid


@pytest.mark.parametrize("caller, query, expected", [
    pytest.param("alpha-subtree-10", "Location?_id=30,3&_revinclude=Device:location", {("Location", 30), ("Device", 1)},
                 id="revinclude-through-a-reference"),
    pytest.param("alpha-subtree-10", "Device?_include=Device:location", {("Device", 1), ("Location", 30)},
                 id="include-of-the-referenced-location"),
    pytest.param("alpha-subtree-10", "Location?_id=30&_include=Location:organization", {("Location", 30)},
                 id="organization-not-included-for-a-subtree"),
    pytest.param("alpha", "Location?_id=30&_include=Location:organization", {("Location", 30), ("Organization", -1)},
                 id="organization-included-for-the-account"),
    pytest.param("alpha-subtree-3", "Schedule?actor=Location/30", {("Schedule", 1)}, id="search-by-a-reference"),
    pytest.param("alpha-subtree-10", "Device?location=3", set(), id="search-outside-the-scope"),
])
def test_includes_and_searches_stay_in_scope(app_client: TestClient, ctx: ServerContext, orgs: dict[str, int],
                                            caller: str, query: str, expected: set[tuple[str, int]]) -> None:
    body = app_client.get(f"/fhir/{query}", headers=bearer(ctx.settings, **CALLERS[caller][0])).json()
    assert {(e["resource"]["resourceType"], int(e["resource"]["id"])) for e in body.get("entry", [])} == \
        {(t, orgs["alpha"] if i == -1 else i) for t, i in expected}


def test_trusted_callers_see_every_row_of_a_provider_scoped_through_a_reference(ctx: ServerContext) -> None:
    """Trusted callers (a loader's look-ups) see every account: every row, whatever it refers to (a Location not
    served, none, an unknown one). Issue 36 (they saw only what refers to a served Location)."""
    for resource_type, rows in (("Device", set(DEVICES)), ("Schedule", set(SCHEDULES))):
        body = searches.search_type(ctx, TRUSTED, "http://x/fhir", resource_type, [("_count", "100")])
        assert {int(e["resource"]["id"]) for e in body["entry"]} == rows


# ------------------------------------------------------------------ the account, decided once

@pytest.mark.parametrize("scope, accounts, first, account", [
    pytest.param(AccessScope(account="alpha"), {"alpha", "beta"}, "beta", "alpha", id="named"),
    pytest.param(AccessScope(account="gamma"), {"alpha"}, None, "gamma", id="named-unknown"),
    pytest.param(AccessScope(), {"alpha"}, None, "alpha", id="the-only-account"),
    pytest.param(AccessScope(), set(), None, "", id="empty-server"),
    pytest.param(AccessScope(all_accounts=True), {"alpha", "beta"}, "alpha", None, id="trusted"),
    pytest.param(AccessScope(), {"alpha", "beta"}, "beta", "beta", id="several-accounts-the-first-loaded"),
    pytest.param(AccessScope(), {"alpha"}, "alpha", "alpha", id="the-only-account-recorded"),
    pytest.param(AccessScope(), {"alpha", "beta"}, None, Forbidden, id="several-accounts-no-first"),
    pytest.param(AccessScope(), {"alpha", "beta"}, "gone", Forbidden, id="several-accounts-first-removed"),
    pytest.param(AccessScope(), {"sl-sample"}, "default", Forbidden, id="the-only-account-left-is-not-the-first"),
    pytest.param(AccessScope(), set(), "default", Forbidden, id="nothing-left-first-recorded"),
    pytest.param(AccessScope(account="sl-sample"), {"sl-sample"}, "default", "sl-sample",
                 id="named-the-first-removed"),
])
def test_caller_account(scope: AccessScope, accounts: set[str], first: str | None,
                        account: str | None | type) -> None:
    if account is Forbidden:
        with pytest.raises(Forbidden) as refused:
            caller_account(scope, accounts, first)
        if first is not None:  # the recorded account, named, and how to get another
            assert f"account {first!r}, which tokens without an account claim see, was removed" in str(refused.value)
            assert "auth.default_account" in str(refused.value)
    else:
        assert caller_account(scope, accounts, first) == account


# ------------------------------------------------------------------ declarations refused at start-up

_table = Table("scoping_declared", MetaData(), Column("id", Integer, primary_key=True), Column("path", Integer),
               Column("part", Integer), Column("ref", Integer))
_partitions = select(_table.c.part, _table.c.part, _table.c.part)
_ref = SearchParam("ref", "reference", (ReferenceTarget(_table.c.ref, "Location"),), "a reference")


@pytest.mark.parametrize("tenancy, problem", [
    pytest.param(Tenancy(_table.c.part, _partitions, subtree=Subtree(_table.c.path), via=Via("ref", "Location")),
                 "not both", id="subtree-and-via"),
    pytest.param(Tenancy(subtree=Subtree(_table.c.path)), "partition", id="subtree-without-partition"),
    pytest.param(Tenancy(), "partition", id="account-only-without-partition"),
    pytest.param(Tenancy(_table.c.part), "partition", id="partition-without-partitions"),
    pytest.param(Tenancy(_table.c.part, _partitions, subtree=Subtree(_table.c.path, roots_by="ref")), "roots_by",
                 id="roots-by-not-a-token"),
    pytest.param(Tenancy(via=Via("nope", "Location")), "via", id="via-unknown-parameter"),
    pytest.param(Tenancy(via=Via("ref", "Organization")), "via", id="via-other-type"),
    pytest.param(Tenancy(via=Via("_id", "Location")), "via", id="via-not-a-reference"),
    pytest.param(Tenancy(via=Via("ref", "Basic")), "via", id="via-own-type"),
])
def test_bad_tenancy_is_refused(tenancy: Tenancy, problem: str) -> None:
    provider = ResourceProvider("Basic", _table, _table.c.id, tuple(_table.c), lambda row: {}, search_params=(_ref,),
                                tenancy=tenancy)
    with pytest.raises(ConfigError, match=problem):
        provider.check()


def test_a_reference_to_a_type_not_served_is_refused_at_start_up(ctx: ServerContext, tmp_path: Path) -> None:
    """Device and Schedule through Location, on a server without Location: they would serve nothing (but to
    trusted callers), silently. Start-up refuses them instead, naming what is missing."""
    settings = make_settings(ctx.settings.database_url, tmp_path, auth={"secret": SECRET}, plugins={"location": False})
    with pytest.raises(ConfigError, match=r"plugin scoped: (Device|Schedule) is scoped through Location .* no enabled "
                                          r"plugin serves"):
        create_context(settings, [("scoped", ScopedThroughLocation())], db=ctx.db)
