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

def forward(searched: str, reference: str, far_type: str, far: str, name: str) -> Any:
    """`searched?reference.far`: the `searched` resources whose reference is one of what `far_type?far` finds."""
    return pytest.param(f"{searched}?{reference}.{far}", f"{far_type}?{far}", f"{searched}?{reference}={{ids}}",
                        id=name)


def has(searched: str, referring: str, reference: str, far: str, name: str) -> Any:
    """`searched?_has:referring:reference:far`: the `searched` resources that one of what `referring?far` finds
    refers to."""
    return pytest.param(f"{searched}?_has:{referring}:{reference}:{far}", f"{referring}?{far}",
                        f"{searched}?_has:{referring}:{reference}:_id={{ids}}", id=name)


# (the chained search, its far clause searched alone, the search by what that finds: what the chain means)
CHAINS = [
    forward("HealthcareService", "location", "Location", "partof:below=Location/10", "forward-below"),
    forward("HealthcareService", "location", "Location", "partof:below=Location/2", "forward-below-a-region"),
    forward("HealthcareService", "location", "Location", "partof:above=Location/30", "forward-above"),
    forward("HealthcareService", "location", "Location", "partof:missing=true", "forward-missing"),
    forward("HealthcareService", "location", "Location", "partof.partof:below=Location/2", "two-hops"),
    forward("Location", "partof", "Location", "partof:below=Location/2", "back-to-its-own-type"),
    forward("PractitionerRole", "location", "Location", "partof:below=Location/10", "another-type-forward"),
    has("Location", "HealthcareService", "location", "location:below=Location/10", "has-below-another-types-tree"),
    has("Location", "PractitionerRole", "location", "location:below=Location/10", "has-of-roles"),
    has("Practitioner", "PractitionerRole", "practitioner", "location:below=Location/2",
        "has-through-a-type-without-a-tree"),
    has("Location", "Location", "partof", "partof:below=Location/2", "has-of-its-own-type"),
    has("Location", "Location", "partof", "_has:HealthcareService:location:location:below=Location/10",
        "has-of-a-has"),
    forward("HealthcareService", "location", "Location", "_has:PractitionerRole:location:location:below=Location/10",
            "forward-then-has"),
    forward("PractitionerRole", "practitioner", "Practitioner",
            "_has:PractitionerRole:practitioner:location:below=Location/10", "forward-then-has-back"),
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
