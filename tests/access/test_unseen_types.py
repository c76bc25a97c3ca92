"""A search whose caller sees nothing of a type it reads says so (issue 41, the second platform-team trial): a token
limited to subtrees sees no Organization (they are scoped by account alone), so `Organization?...` and a chain
through Organization match nothing for it; the Bundle carries a `suppressed` warning saying the empty answer is the
token's access, not what the server holds. A caller who sees the type gets no such warning."""
from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from server.engine.context import ServerContext
from tests.support.contexts import bearer

SUBTREE = {"org_unit_roots": ["Location/10"]}
WHOLE: dict[str, Any] = {}
SMART_LOCATION_ONLY = {"scope": "system/Location.rs"}


@pytest.mark.parametrize("query, claims, warned", [
    pytest.param("Organization?_count=10", SUBTREE, ["no Organization resource"], id="own-type-unseen"),
    pytest.param("Location?organization.name=a", SUBTREE, ["no Organization resource, which this search's chained"],
                 id="chain-through-unseen"),
    pytest.param("Location?organization.name=a", SMART_LOCATION_ONLY,
                 ["no Organization resource, which this search's chained"], id="chain-beyond-smart-scopes"),
    pytest.param("Location?_count=10", SUBTREE, [], id="own-type-seen"),
    pytest.param("Organization?_count=10", WHOLE, [], id="whole-account-sees-organizations"),
    pytest.param("Location?organization.name=a", WHOLE, [], id="whole-account-chain"),
])
def test_a_search_through_a_type_the_caller_cannot_see_says_so(pyramid_api: tuple[TestClient, ServerContext],
                                                                query: str, claims: dict[str, Any],
                                                                warned: list[str]) -> None:
    client, ctx = pyramid_api
    answer = client.get(f"/fhir/{query}", headers=bearer(ctx.settings, **claims))
    assert answer.status_code == 200, answer.text
    outcomes = [e["resource"]["issue"][0] for e in answer.json().get("entry", [])
                if e["search"]["mode"] == "outcome"]
    assert [(o["severity"], o["code"]) for o in outcomes] == [("warning", "suppressed")] * len(warned)
    for outcome, text in zip(outcomes, warned):
        assert text in outcome["diagnostics"], outcome
