"""The suite's google-fhir-r4 check validates a Bundle in parts (each distinct resource once): it must find what the
whole Bundle's validation finds, with the same message (tests/support/validators.py)."""
from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support import validators
from tests.support.validators import google_problems


def _location(uid: str, **more: Any) -> dict[str, Any]:
    return {"resourceType": "Location", "id": uid, "meta": {"versionId": "1"}, "name": f"Unit {uid}",
            "status": "active", **more}


def _bundle(*resources: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"resourceType": "Bundle", "type": "searchset", "total": len(resources), **more,
            "entry": [{"fullUrl": f"http://x/fhir/Location/{r['id']}", "resource": r, "search": {"mode": "match"}}
                      for r in resources]}


CASES = [
    pytest.param(_bundle(_location("a"), _location("b")), True, id="valid"),
    pytest.param(_bundle(_location("a"), _location("b", status="closed-ish")), False, id="an-entry-with-a-bad-code"),
    pytest.param(_bundle(_location("a"), _location("b", position={"longitude": "east"})), False,
                 id="an-entry-with-a-bad-decimal"),
    pytest.param(_bundle(_location("a"), _location("b", partOf={"reference": 12})), False,
                 id="an-entry-with-a-bad-reference"),
    pytest.param(_bundle(_location("a"), type="listing"), False, id="a-bad-bundle-type"),
    pytest.param(_bundle(_location("a"), total="many"), False, id="a-bad-total"),
    pytest.param({**_bundle(_location("a")), "entry": 5}, False, id="entries-not-a-list"),
    pytest.param({**_bundle(_location("a")), "entry": {"fullUrl": "http://x/fhir/Location/a"}}, False,
                 id="entries-an-object"),
    pytest.param(_bundle(_location("a"), _location("b", meta={"versionId": "1", "lastUpdated": "yesterday"})), False,
                 id="an-entry-with-a-bad-meta"),
]


@pytest.mark.parametrize("bundle, valid", CASES)
def test_the_parts_find_what_the_whole_finds(bundle: dict[str, Any], valid: bool) -> None:
    validators._GOOGLE_VALID.clear()
    whole = validators._google_validated(bundle, json.dumps(bundle))
    assert (not whole) is valid, whole
    assert google_problems(bundle) == whole
    assert google_problems(bundle) == whole  # again, from what it kept


def test_a_resource_found_valid_before_still_fails_beside_a_bad_shell() -> None:
    validators._GOOGLE_VALID.clear()
    assert google_problems(_bundle(_location("a"))) == []
    assert google_problems(_bundle(_location("a"), type="listing"))
