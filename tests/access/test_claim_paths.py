"""Account and subtree-roots claims at dotted paths (`auth.account_claim: tenant.id`, `auth.roots_claim:
access.roots`, as an identity provider nesting its claims writes them). A part above the claim that is present but
not an object cannot be read: the token is refused (403), never read as if the claim were absent (it was: a token
with `"access": "district-8"` saw the whole account, one with `"tenant": "partner"` the account of tokens without the
claim). Absent parts keep their meaning: no account claim, no subtree limit. Both backends."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.engine.context import ServerContext, create_context
from server.storage.prerender import refresh
from tests.support.contexts import SECRET, bearer, make_settings
from tests.support.data import load_small_pyramid


@pytest.fixture
def api(migrated_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, ServerContext]]:
    ctx = create_context(make_settings(migrated_url, tmp_path, auth={
        "secret": SECRET, "account_claim": "tenant.id", "roots_claim": "access.roots"}))
    ctx.extensions.schema.upgrade(ctx.db)
    load_small_pyramid(ctx.db)
    refresh(ctx.db, ctx.registry)
    with TestClient(create_app(ctx.settings, context=ctx), base_url="http://testserver") as client:
        yield client, ctx
    ctx.db.dispose()


# (the token's claims, the status of a search, the units it lists)
@pytest.mark.parametrize(("claims", "status", "total"), [
    pytest.param({}, 200, 9, id="absent-the-whole-account"),
    pytest.param({"access": {"roots": ["Location/10"]}}, 200, 5, id="roots-at-their-path"),
    pytest.param({"access": {}}, 200, 9, id="an-object-without-the-claim-is-absent"),
    pytest.param({"access": {"roots": None}}, 200, 0, id="null-roots-see-nothing"),
    pytest.param({"access": "Location/10"}, 403, None, id="roots-parent-a-string"),
    pytest.param({"access": ["Location/10"]}, 403, None, id="roots-parent-a-list"),
    pytest.param({"access": None}, 403, None, id="roots-parent-null"),
    pytest.param({"access": 10}, 403, None, id="roots-parent-a-number"),
    pytest.param({"tenant": {"id": "default"}}, 200, 9, id="account-at-its-path"),
    pytest.param({"tenant": {"id": "partner"}}, 200, 0, id="another-account"),
    pytest.param({"tenant": "partner"}, 403, None, id="account-parent-a-string"),
    pytest.param({"tenant": ["partner"]}, 403, None, id="account-parent-a-list"),
    pytest.param({"tenant": None}, 403, None, id="account-parent-null"),
    # named but for its case, at any part: read as absent it would give the claimless account or the whole account
    pytest.param({"Tenant": {"id": "partner"}}, 403, None, id="account-parent-mis-cased"),
    pytest.param({"tenant": {"ID": "partner"}}, 403, None, id="account-mis-cased"),
    pytest.param({"access": {"Roots": ["Location/10"]}}, 403, None, id="roots-mis-cased"),
    pytest.param({"ACCESS": {"roots": ["Location/10"]}}, 403, None, id="roots-parent-mis-cased"),
])
def test_a_claim_whose_path_cannot_be_read_refuses_the_token(api: tuple[TestClient, ServerContext],
                                                              claims: dict[str, Any], status: int,
                                                              total: int | None) -> None:
    client, ctx = api
    answer = client.get("/fhir/Location", params={"_summary": "count"}, headers=bearer(ctx.settings, **claims))
    assert answer.status_code == status, answer.text
    if total is not None:
        assert answer.json()["total"] == total
    else:
        assert "cannot be read" in answer.json()["issue"][0]["diagnostics"]


@pytest.mark.parametrize("claims", [
    pytest.param({"Account": "partner"}, id="account"),
    pytest.param({"ORG_UNIT_ROOTS": ["Location/10"]}, id="roots"),
])
def test_a_claim_named_but_for_its_case_refuses_the_token(migrated_url: str, tmp_path: Path,
                                                         claims: dict[str, Any]) -> None:
    """With the default claim names (`account`, `org_unit_roots`)."""
    ctx = create_context(make_settings(migrated_url, tmp_path, auth={"secret": SECRET}))
    try:
        with TestClient(create_app(ctx.settings, context=ctx), base_url="http://testserver") as client:
            answer = client.get("/fhir/Location", headers=bearer(ctx.settings, **claims))
            assert answer.status_code == 403, answer.text
            assert "but for its case" in answer.json()["issue"][0]["diagnostics"]
    finally:
        ctx.db.dispose()
