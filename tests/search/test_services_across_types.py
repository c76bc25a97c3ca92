"""The issue 29 (item 4) cases on the proof's HealthcareService (tests/proof: a third-party provider with several
Locations in a side table, declared `ReferenceTarget(location_id, "Location", through=...)` and nothing more), both
backends: `location:below=X` finds the services held at X itself and at units below it, and one request brings a
service, its Locations and their parents (`_include=HealthcareService:location&_include:iterate=Location:partof`),
each as far as the caller sees.

Services -> Locations (tests/proof/contract_samples.py): 1 -> 30, 20; 2 -> 10, 20; 3 -> 3; 4 -> 3, 30; 5 -> 1;
6 -> none; 7 -> 32 (deleted); 8 -> 30 (moved there from 3). The small pyramid: 1 > 2 > 10 > 20 > 30, 31; 10 > 32; 2 > 11; 1 > 3."""
from __future__ import annotations

from typing import Any

import pytest

from server.access.tenancy import AccessScope
from server.contract.context import contract_context
from server.engine.caller import TRUSTED, Caller
from server.engine.context import ServerContext
from server.errors import InvalidValue
from plugins.orgunits.contract_samples import SUBJECT as ORGUNITS
from tests.proof.contract_samples import SUBJECT as PROOF
from tests.support.fixtures import context_fixture
from tests.support.searching import search

SUBTREE_10 = Caller(None, AccessScope(roots=("Location/10",)))  # 10, 20, 30, 31, 32

ctx = context_fixture(lambda url, var: contract_context(url, var, (ORGUNITS, PROOF)))


def entries(bundle: dict[str, Any], mode: str) -> list[str]:
    return [f"{e['resource']['resourceType']}/{e['resource']['id']}" for e in bundle.get("entry", [])
            if e["search"]["mode"] == mode]


@pytest.mark.parametrize(("caller", "query", "expected"), [
    pytest.param(TRUSTED, "location:below=10", {"1", "2", "4", "8"}, id="held-at-the-unit-itself-too"),
    pytest.param(TRUSTED, "location:below=Location/1", {"1", "2", "3", "4", "5", "8"}, id="below-the-root"),
    pytest.param(TRUSTED, "location:below=32", set(), id="a-deleted-service-is-gone"),
    pytest.param(TRUSTED, "location:above=30", {"1", "2", "4", "5", "8"}, id="above"),
    pytest.param(SUBTREE_10, "location:below=1", set(), id="root-out-of-sight"),
    pytest.param(SUBTREE_10, "location:below=10", {"1", "2", "4", "8"}, id="root-in-sight"),
])
def test_services_below_and_above_a_unit(ctx: ServerContext, caller: Caller, query: str,
                                         expected: set[str]) -> None:
    bundle = search(ctx, "HealthcareService", query, caller, strict=True)
    assert {e["resource"]["id"] for e in bundle.get("entry", [])} == expected and bundle["total"] == len(expected)


def test_below_another_type_is_a_400(ctx: ServerContext) -> None:
    with pytest.raises(InvalidValue, match="must refer to Location") as info:
        search(ctx, "HealthcareService", "location:below=Organization/1", strict=True)
    assert info.value.status == 400


@pytest.mark.parametrize(("caller", "query", "included"), [
    pytest.param(TRUSTED, "_id=4&_include=HealthcareService:location&_include:iterate=Location:partof",
                 ["Location/1", "Location/10", "Location/2", "Location/20", "Location/3", "Location/30"],
                 id="a-service-its-units-and-their-parents"),
    pytest.param(SUBTREE_10, "_id=4&_include=HealthcareService:location&_include:iterate=Location:partof",
                 ["Location/10", "Location/20", "Location/30"], id="as-far-as-the-caller-sees"),
    pytest.param(TRUSTED, "location:below=10&_include=HealthcareService:location&_include:iterate=Location:partof"
                          "&_revinclude:iterate=HealthcareService:location",
                 ["HealthcareService/3", "HealthcareService/5", "Location/1", "Location/10", "Location/2",
                  "Location/20", "Location/3", "Location/30"], id="and-the-other-services-at-those-units"),
    pytest.param(TRUSTED, "_id=3&_include=HealthcareService:location&_revinclude:iterate=HealthcareService:location",
                 ["HealthcareService/4", "Location/3"], id="services-at-the-same-units"),
])
def test_a_service_its_units_and_their_parents_in_one_request(ctx: ServerContext, caller: Caller, query: str,
                                                              included: list[str]) -> None:
    bundle = search(ctx, "HealthcareService", query, caller, strict=True)
    assert sorted(entries(bundle, "include")) == included
    urls = [e["fullUrl"] for e in bundle["entry"]]
    assert len(urls) == len(set(urls))  # each resource once
