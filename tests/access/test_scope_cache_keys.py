"""A SMART scope's query is compiled against the caller's view of every other type it crosses (issue 36: one compile
path), so two tokens with the same query but another view of those types see other rows. The searches' kept counts
and pages are keyed by the caller's visibility: a narrower token must never be served the count or the page SQL kept
for a wider one (it was: the visibility's key named the query alone, so a token without the Organization scope, or
with a narrower one, read the Locations of a token that had it). Data: the small pyramid with the proof package's
services (tests/proof/contract_samples.py), on both backends."""
from __future__ import annotations

from collections.abc import Sequence

import pytest
from starlette.testclient import TestClient

from plugins.orgunits.contract_samples import SUBJECT as ORGUNITS
from server.contract.answers import entries, every_page
from server.contract.context import contract_context
from server.engine.context import ServerContext
from tests.proof.contract_samples import SUBJECT as PROOF
from tests.support.contexts import bearer
from tests.support.fixtures import client_fixture, context_fixture

ctx = context_fixture(lambda url, var: contract_context(url, var, (ORGUNITS, PROOF)))
api = client_fixture()

ORG = "system/Location.rs?organization.name=Minist%C3%A8re"
HAS = "system/Location.rs?_has:HealthcareService:location:active=true"
EVERY_UNIT = {"1", "2", "3", "10", "11", "20", "30", "31", "32"}


def _seen(api: TestClient, ctx: ServerContext, scopes: Sequence[str]) -> tuple[set[str], int, int]:
    """(the Locations a search lists, its total, its _summary=count) for a token of these scopes."""
    headers = bearer(ctx.settings, scope=" ".join(scopes))
    listed = {rid for page in every_page(api, "/fhir/Location?_count=2", headers) for _, rid in entries(page)}
    total = api.get("/fhir/Location", headers=headers).json()["total"]
    counted = api.get("/fhir/Location", params={"_summary": "count"}, headers=headers).json()["total"]
    return listed, total, counted


def _read(api: TestClient, ctx: ServerContext, scopes: Sequence[str]) -> set[str]:
    """The Locations a read answers 200 (a read takes no kept page or count)."""
    headers = bearer(ctx.settings, scope=" ".join(scopes))
    return {rid for rid in EVERY_UNIT if api.get(f"/fhir/Location/{rid}", headers=headers).status_code == 200}


# (the wider token, asked first, the narrower one asked after it with the same Location query)
@pytest.mark.parametrize(("wider", "narrower"), [
    pytest.param([ORG, "system/Organization.rs"], [ORG], id="chain-to-a-type-the-token-cannot-read"),
    pytest.param([ORG, "system/Organization.rs"], [ORG, "system/Organization.rs?name=Nothing"],
                 id="chain-to-a-type-narrowed-by-its-own-query"),
    pytest.param([HAS, "system/HealthcareService.rs"], [HAS], id="has-from-a-type-the-token-cannot-read"),
    pytest.param([HAS, "system/HealthcareService.rs"], [HAS, "system/HealthcareService.rs?name=Urgences"],
                 id="has-from-a-type-narrowed-by-its-own-query"),
])
def test_a_narrower_token_is_never_served_what_was_kept_for_a_wider_one(
        api: TestClient, ctx: ServerContext, wider: list[str], narrower: list[str]) -> None:
    wide = _seen(api, ctx, wider)
    narrow_reads = _read(api, ctx, narrower)
    assert wide[0] and wide[0] != narrow_reads, "a case that tells nothing"
    for _ in ("after the wider one", "again"):
        listed, total, counted = _seen(api, ctx, narrower)
        assert listed == narrow_reads
        assert total == counted == len(narrow_reads)
    # and the other way round: the wider token is not served what was kept for the narrower one
    assert _seen(api, ctx, wider) == wide
    assert _read(api, ctx, wider) == wide[0]
