"""A chained or _has search means what its parts mean, for every kind of caller (issue 42): the chain's answer is
the search by what its far clause finds alone, each asked by the same caller. Callers: trusted, a whole account,
subtree roots, a SMART scope's query on Location (alone, with roots) and on the types scoped through it. So a
chain's far end can neither see more than the caller (a leak) nor less than the same clause unchained. Data: the
small pyramid with the proof package's services and practitioners (tests/proof/contract_samples.py)."""
from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from server.contract.answers import entries, every_page
from server.contract.context import contract_context
from server.engine.context import ServerContext
from plugins.orgunits.contract_samples import SUBJECT as ORGUNITS
from tests.proof.contract_samples import SUBJECT as PROOF
from tests.support.contexts import bearer
from tests.support.fixtures import client_fixture, context_fixture

ctx = context_fixture(lambda url, var: contract_context(url, var, (ORGUNITS, PROOF)))
api = client_fixture()

THROUGH = ["system/HealthcareService.rs", "system/PractitionerRole.rs", "system/Practitioner.rs"]
CSPS = "system/Location.rs?type=CSPS"

# caller: (its SMART scopes, its subtree roots), None: a trusted caller
CALLERS: dict[str, tuple[list[str], list[str] | None] | None] = {
    "trusted": None,
    "whole-account": (["system/*.rs"], None),
    "roots-2": (["system/*.rs"], ["Location/2"]),
    "roots-10": (["system/*.rs"], ["Location/10"]),
    "query-csps": ([CSPS, *THROUGH], None),
    "query-below-10": (["system/Location.rs?partof:below=Location/10", *THROUGH], None),
    "query-csps-roots-2": ([CSPS, *THROUGH], ["Location/2"]),
    "query-csps-roots-10": ([CSPS, *THROUGH], ["Location/10"]),
    "query-on-services": (["system/Location.rs", "system/HealthcareService.rs?active=true",
                           "system/PractitionerRole.rs", "system/Practitioner.rs"], None),
    "queries-on-services-and-units": ([CSPS, "system/HealthcareService.rs?active=true", "system/PractitionerRole.rs",
                                       "system/Practitioner.rs"], None),
    "queries-on-roles-and-units": ([CSPS, "system/HealthcareService.rs", "system/PractitionerRole.rs?active=true",
                                    "system/Practitioner.rs"], None),
}

# (the chained search, its far clause searched alone, the search by what that finds: what the chain means)
CHAINS = [
    pytest.param("HealthcareService?location.partof:below=Location/10", "Location?partof:below=Location/10",
                 "HealthcareService?location={ids}", id="forward-below"),
    pytest.param("HealthcareService?location.partof:below=Location/2", "Location?partof:below=Location/2",
                 "HealthcareService?location={ids}", id="forward-below-a-region"),
    pytest.param("HealthcareService?location.partof:above=Location/30", "Location?partof:above=Location/30",
                 "HealthcareService?location={ids}", id="forward-above"),
    pytest.param("HealthcareService?location.partof:missing=true", "Location?partof:missing=true",
                 "HealthcareService?location={ids}", id="forward-missing"),
    pytest.param("HealthcareService?location.partof.partof:below=Location/2", "Location?partof.partof:below=Location/2",
                 "HealthcareService?location={ids}", id="two-hops"),
    pytest.param("Location?partof.partof:below=Location/2", "Location?partof:below=Location/2",
                 "Location?partof={ids}", id="back-to-its-own-type"),
    pytest.param("PractitionerRole?location.partof:below=Location/10", "Location?partof:below=Location/10",
                 "PractitionerRole?location={ids}", id="another-type-forward"),
    pytest.param("Location?_has:HealthcareService:location:location:below=Location/10",
                 "HealthcareService?location:below=Location/10", "Location?_has:HealthcareService:location:_id={ids}",
                 id="has-below-another-types-tree"),
    pytest.param("Location?_has:PractitionerRole:location:location:below=Location/10",
                 "PractitionerRole?location:below=Location/10", "Location?_has:PractitionerRole:location:_id={ids}",
                 id="has-of-roles"),
    pytest.param("Practitioner?_has:PractitionerRole:practitioner:location:below=Location/2",
                 "PractitionerRole?location:below=Location/2",
                 "Practitioner?_has:PractitionerRole:practitioner:_id={ids}", id="has-through-a-type-without-a-tree"),
    pytest.param("Location?_has:Location:partof:partof:below=Location/2", "Location?partof:below=Location/2",
                 "Location?_has:Location:partof:_id={ids}", id="has-of-its-own-type"),
    pytest.param("Location?_has:Location:partof:_has:HealthcareService:location:location:below=Location/10",
                 "Location?_has:HealthcareService:location:location:below=Location/10",
                 "Location?_has:Location:partof:_id={ids}", id="has-of-a-has"),
    pytest.param("HealthcareService?location._has:PractitionerRole:location:location:below=Location/10",
                 "Location?_has:PractitionerRole:location:location:below=Location/10",
                 "HealthcareService?location={ids}", id="forward-then-has"),
    pytest.param("PractitionerRole?practitioner._has:PractitionerRole:practitioner:location:below=Location/10",
                 "Practitioner?_has:PractitionerRole:practitioner:location:below=Location/10",
                 "PractitionerRole?practitioner={ids}", id="forward-then-has-back"),
]


def _ids(api: TestClient, url: str, headers: dict[str, str]) -> set[str]:
    return {rid for page in every_page(api, url, headers) for _, rid in entries(page, "match")}


def _headers(ctx: ServerContext, caller: str) -> dict[str, str]:
    spec = CALLERS[caller]
    if spec is None:
        return bearer(ctx.settings)
    scopes, roots = spec
    claims: dict[str, Any] = {"scope": " ".join(scopes)}
    if roots is not None:
        claims["org_unit_roots"] = roots
    return bearer(ctx.settings, **claims)


@pytest.mark.parametrize("caller", list(CALLERS))
@pytest.mark.parametrize(("chained", "alone", "meant"), CHAINS)
def test_a_chain_means_its_far_clause_then_its_hops(api: TestClient, ctx: ServerContext, caller: str, chained: str,
                                                   alone: str, meant: str) -> None:
    headers = _headers(ctx, caller)
    far = _ids(api, f"/fhir/{alone}", headers)
    expected = _ids(api, f"/fhir/{meant.format(ids=','.join(sorted(far)))}", headers) if far else set()
    assert _ids(api, f"/fhir/{chained}", headers) == expected


@pytest.mark.parametrize(("chained", "alone", "meant"), CHAINS)
def test_each_chain_finds_something_for_someone(api: TestClient, ctx: ServerContext, chained: str, alone: str,
                                                meant: str) -> None:
    """A chain that finds nothing for every caller would hold its equality trivially: each finds for one at least."""
    assert any(_ids(api, f"/fhir/{chained}", _headers(ctx, caller)) for caller in CALLERS)
