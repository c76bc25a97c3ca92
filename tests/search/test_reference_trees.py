""":below and :above on a reference to a type with a tree (issue 29 item 4), single- and multi-valued, both backends:
`location:below=X` finds the resources referring to X itself or to a Location inside X's subtree, `:above=X` to X
or one of its ancestors (FHIR's :below/:above on a reference to a hierarchical resource). The provider declares
only `ReferenceTarget(column, "Location")` (with `through=` for several): the registry finds Location's tree.
Location's own `partof:below`/`:above` (a self-reference with its own path) keep their meaning: the Locations
strictly inside X, X's ancestors (tests/search/test_search.py).

What the caller may not see of Location decides nothing: a value out of its sight matches nothing, and the
Locations of a subtree or above it count only as far as it sees them. Universe: tests.support.scoping (alpha: the
small pyramid 1 > 2 > 10 > 20 > 30, 31; 10 > 32; 2 > 11; 1 > 3; beta: 201 > 202 > 203, 101-103 not served),
with Device (one Location, its own column), Schedule (several, a side table) and here Basic (one Location, no
tenancy of its own: every caller sees every one). The issue's own case, the proof's HealthcareService:
tests/search/test_services_across_types.py."""
from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Column, Engine, Integer, MetaData, Table

from server import ReferenceTarget, ResourceProvider, SearchParam, Settings, hookimpl
from server.access.tenancy import AccessScope
from server.engine.caller import TRUSTED, Caller
from server.engine.context import ServerContext
from server.errors import FhirError, InvalidValue, UnsupportedParameter
from tests.support.fixtures import context_fixture
from tests.support.scoping import schedule_location, universe_context
from tests.support.searching import search

ALPHA = Caller(None, AccessScope(account="alpha"))
BETA = Caller(None, AccessScope(account="beta"))
SUBTREE_10 = Caller(None, AccessScope(account="alpha", roots=("Location/10",)))  # 10, 20, 30, 31, 32
SUBTREE_20 = Caller(None, AccessScope(account="alpha", roots=("Location/20",)))  # 20, 30, 31

metadata = MetaData()
basic = Table("trees_test_basic", metadata, Column("id", Integer, primary_key=True, autoincrement=False),
              Column("location_id", Integer))
BASICS = {1: 30, 2: 10, 3: 3, 4: 1, 5: None, 6: 201}  # id -> its Location


class PublicBasic:
    """Basic: one Location, no tenancy (the Location's scope alone decides what :below finds)."""

    @hookimpl
    def register_resource_providers(self, settings: Settings) -> list[ResourceProvider]:
        at = SearchParam("location", "reference", (ReferenceTarget(basic.c.location_id, "Location"),), "Where")
        return [ResourceProvider("Basic", basic, basic.c.id, tuple(basic.c),
                                 lambda row: {"resourceType": "Basic", "id": str(row["id"])}, search_params=(at,))]


def _load(engine: Engine) -> None:
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(basic.insert(), [{"id": i, "location_id": loc} for i, loc in BASICS.items()])
        # schedule 5 (alpha): at 31 and at the root 1, which a token limited to 10 does not see
        conn.exec_driver_sql("INSERT INTO scoping_schedule (id, account) VALUES (5, 'alpha')")
        conn.execute(schedule_location.insert(), [{"schedule_id": 5, "location_id": 31},
                                                   {"schedule_id": 5, "location_id": 1}])


ctx = context_fixture(lambda url, var: universe_context(url, var, [("basic", PublicBasic())], [_load]))


def ids(bundle: dict[str, Any], mode: str = "match") -> set[str]:
    return {e["resource"]["id"] for e in bundle.get("entry", []) if e["search"]["mode"] == mode}


# Device -> Location: 1 -> 30, 2 -> 3, 3 -> 201 (beta), 4 -> 101 (beta, not served), 5 -> none, 6 -> unknown
# Schedule -> Locations: 1 -> 30, 3 (alpha); 2 -> 3 (alpha); 3 -> 201, 30 (beta); 4 -> none; 5 -> 31, 1 (alpha)
CASES = [
    pytest.param(TRUSTED, "Device", "location:below=10", {"1"}, id="single-below"),
    pytest.param(TRUSTED, "Device", "location:below=Location/30", {"1"}, id="single-below-is-itself-too"),
    pytest.param(TRUSTED, "Device", "location:below=1", {"1", "2"}, id="single-below-the-root"),
    pytest.param(TRUSTED, "Device", "location:below=10,3", {"1", "2"}, id="single-below-or"),
    pytest.param(TRUSTED, "Device", "location:above=31", set(), id="single-above-a-sibling"),
    pytest.param(TRUSTED, "Device", "location:above=30", {"1"}, id="single-above-is-itself-too"),
    pytest.param(BETA, "Device", "location:above=203", {"3"}, id="single-above"),
    pytest.param(TRUSTED, "Device", "location:below=101", set(), id="a-version-not-served-is-unknown"),
    pytest.param(TRUSTED, "Device", "location:below=999999", set(), id="an-unknown-location"),
    pytest.param(TRUSTED, "Device", "location:below=1&location:missing=false", {"1", "2"}, id="and-missing"),
    pytest.param(TRUSTED, "Schedule", "actor:below=10", {"1", "3", "5"}, id="multi-below"),
    pytest.param(TRUSTED, "Schedule", "actor:below=3", {"1", "2"}, id="multi-below-a-leaf"),
    pytest.param(TRUSTED, "Schedule", "actor:above=20", {"5"}, id="multi-above"),
    pytest.param(TRUSTED, "Schedule", "actor:above=30", {"1", "3", "5"}, id="multi-above-itself-and-ancestors"),
    pytest.param(TRUSTED, "Schedule", "actor:below=10&actor:below=3", {"1"}, id="multi-and"),
    pytest.param(ALPHA, "Schedule", "actor:below=2", {"1", "5"}, id="multi-own-account-only"),
    pytest.param(BETA, "Schedule", "actor:below=201", {"3"}, id="multi-beta"),
    pytest.param(ALPHA, "Schedule", "actor:below=201", set(), id="another-accounts-root"),
    pytest.param(SUBTREE_10, "Device", "location:below=1", set(), id="a-root-out-of-sight-matches-nothing"),
    pytest.param(SUBTREE_10, "Device", "location:below=10", {"1"}, id="a-root-in-sight"),
    pytest.param(SUBTREE_10, "Schedule", "actor:below=20", {"1", "5"}, id="scoped-multi-below"),
    pytest.param(SUBTREE_10, "Schedule", "actor:above=20", set(), id="ancestors-out-of-sight-count-for-nothing"),
    pytest.param(ALPHA, "Schedule", "actor:above=20", {"5"}, id="ancestors-in-sight"),
    pytest.param(TRUSTED, "Basic", "location:below=10", {"1", "2"}, id="public-below"),
    pytest.param(SUBTREE_20, "Basic", "location:below=10", set(), id="public-root-out-of-sight"),
    pytest.param(SUBTREE_20, "Basic", "location:below=20", {"1"}, id="public-root-in-sight"),
    pytest.param(SUBTREE_20, "Basic", "location:above=30", {"1"}, id="public-above-in-sight-only"),
    pytest.param(TRUSTED, "Basic", "location:above=30", {"1", "2", "4"}, id="public-above"),
    pytest.param(TRUSTED, "Location", "_has:Schedule:actor:actor:below=10", {"1", "3", "30", "31", "201"},
                 id="the-last-clause-of-a-has"),
    pytest.param(SUBTREE_10, "Location", "_has:Schedule:actor:actor:below=20", {"30", "31"},
                 id="the-last-clause-of-a-has-scoped"),
]


@pytest.mark.parametrize(("caller", "rtype", "query", "expected"), CASES)
def test_below_and_above_by_the_referenced_tree(ctx: ServerContext, caller: Caller, rtype: str, query: str,
                                                expected: set[str]) -> None:
    bundle = search(ctx, rtype, query, caller, strict=True)
    assert ids(bundle) == expected and bundle["total"] == len(expected)


def test_each_caller_gets_its_own_answer(ctx: ServerContext) -> None:
    """The same query, one caller after another (pages and totals are kept): Basic has no tenancy, the scope on
    the Location decides."""
    for caller, expected in [(TRUSTED, {"1", "2"}), (SUBTREE_20, set()), (TRUSTED, {"1", "2"}), (SUBTREE_10, {"1", "2"}),
                             (SUBTREE_20, set())]:
        bundle = search(ctx, "Basic", "location:below=10", caller)
        assert (ids(bundle), bundle["total"]) == (expected, len(expected))


def test_location_keeps_its_own_hierarchy(ctx: ServerContext) -> None:
    """partof is Location's self-reference with its own path: :below strictly inside, :above the ancestors."""
    assert ids(search(ctx, "Location", "partof:below=20")) == {"30", "31"}
    assert ids(search(ctx, "Location", "partof:above=20")) == {"10", "2", "1"}


@pytest.mark.parametrize("rtype, query, error, words", [
    pytest.param("Device", "location:below=Organization/1", InvalidValue, "must refer to Location", id="other-type"),
    pytest.param("Device", "location:below=a b", InvalidValue, "not a FHIR id", id="not-an-id"),
    pytest.param("Device", "location:exact=30", UnsupportedParameter, "supported: :above, :below, :missing",
                 id="modifiers-listed"),
])
def test_bad_values_are_a_400(ctx: ServerContext, rtype: str, query: str, error: type[FhirError],
                              words: str) -> None:
    with pytest.raises(error) as info:
        search(ctx, rtype, query, strict=True)
    assert info.value.status == 400 and words in info.value.diagnostics


def test_the_capability_statement_says_so(ctx: ServerContext) -> None:
    resources = {r["type"]: r for r in ctx.capability_statement["rest"][0]["resource"]}
    params = {p["name"]: p for p in resources["Schedule"]["searchParam"]}
    assert "Modifiers :below and :above (Location hierarchy)" in params["actor"]["documentation"]
    partof = {p["name"]: p for p in resources["Location"]["searchParam"]}["partof"]
    assert "Modifiers :below and :above" not in partof["documentation"]  # its own path: its own words
