"""_include:iterate and _revinclude:iterate across types (issue 29 item 4), both backends: an :iterate include
applies to every resource of its type in the results, matches or included, level after level (at most
MAX_ITERATE_DEPTH, then an outcome says so), each resource once, `search.mode` include, and never one the caller
may not see. One that starts from a type the results cannot hold is a 400.

Universe: tests.support.scoping (alpha: the small pyramid 1 > 2 > 10 > 20 > 30, 31; 10 > 32; 2 > 11; 1 > 3; beta:
201 > 202 > 203, 204 deleted; Device -> Location: 1 -> 30, 2 -> 3, 3 -> 201; Schedule -> Locations: 1 -> 30, 3;
2 -> 3; 3 -> 201, 30 (beta))."""
from __future__ import annotations

from typing import Any

import pytest

from server.access.tenancy import AccessScope
from server.engine.caller import TRUSTED, Caller
from server.engine.context import ServerContext
from server.errors import UnsupportedParameter
from server.search import include
from tests.support.fixtures import context_fixture
from tests.support.scoping import universe_context
from tests.support.searching import search

ALPHA = Caller(None, AccessScope(account="alpha"))
BETA = Caller(None, AccessScope(account="beta"))
SUBTREE_10 = Caller(None, AccessScope(account="alpha", roots=("Location/10",)))  # 10, 20, 30, 31, 32

ctx = context_fixture(universe_context)


def entries(bundle: dict[str, Any], mode: str) -> list[str]:
    return [f"{e['resource']['resourceType']}/{e['resource']['id']}" for e in bundle.get("entry", [])
            if e["search"]["mode"] == mode]


ITERATED = [
    pytest.param(TRUSTED, "Device", "_id=1&_include=Device:location&_include:iterate=Location:partof",
                 ["Device/1"], ["Location/30", "Location/20", "Location/10", "Location/2", "Location/1"],
                 id="a-reference-then-its-parents"),
    pytest.param(SUBTREE_10, "Device", "_id=1&_include=Device:location&_include:iterate=Location:partof",
                 ["Device/1"], ["Location/30", "Location/20", "Location/10"], id="as-far-as-the-scope-goes"),
    pytest.param(TRUSTED, "Schedule", "_id=1&_include=Schedule:actor&_include:iterate=Location:partof",
                 ["Schedule/1"], ["Location/3", "Location/30", "Location/1", "Location/20", "Location/10",
                                  "Location/2"], id="several-references-each-parent-once"),
    pytest.param(SUBTREE_10, "Schedule", "_include=Schedule:actor&_include:iterate=Location:partof",
                 ["Schedule/1"], ["Location/30", "Location/20", "Location/10"], id="a-scoped-page"),
    pytest.param(BETA, "Schedule", "_include=Schedule:actor&_include:iterate=Location:partof",
                 ["Schedule/3"], ["Location/201"], id="another-accounts-unit-stays-a-reference"),
    pytest.param(TRUSTED, "Device", "_id=1&_include:iterate=Device:location&_include:iterate=Location:partof",
                 ["Device/1"], ["Location/30", "Location/20", "Location/10", "Location/2", "Location/1"],
                 id="iterate-on-the-first-include-too"),
    pytest.param(TRUSTED, "Device", "_id=1,2&_include=Device:location&_include:iterate=Location:partof",
                 ["Device/1", "Device/2"], ["Location/3", "Location/30", "Location/1", "Location/20",
                                            "Location/10", "Location/2"], id="two-matches-meet-at-the-root"),
    pytest.param(ALPHA, "Location", "_id=2&_revinclude:iterate=Location:partof",
                 ["Location/2"], ["Location/10", "Location/11", "Location/20", "Location/32", "Location/30",
                                  "Location/31"], id="revinclude-iterate-down-the-tree"),
    pytest.param(BETA, "Location", "_id=201&_revinclude:iterate=Location:partof",
                 ["Location/201"], ["Location/202", "Location/203"], id="revinclude-iterate-no-deleted-unit"),
    pytest.param(SUBTREE_10, "Location", "_id=10&_revinclude:iterate=Location:partof"
                                         "&_revinclude:iterate=Device:location",
                 ["Location/10"], ["Location/20", "Location/32", "Location/30", "Location/31", "Device/1"],
                 id="revinclude-iterate-across-types"),
    pytest.param(TRUSTED, "Location", "_id=30&_revinclude=Device:location&_include:iterate=Location:partof",
                 ["Location/30"], ["Device/1", "Location/20", "Location/10", "Location/2", "Location/1"],
                 id="a-revinclude-beside-an-iterate"),
    pytest.param(TRUSTED, "Location", "_id=10&_revinclude=Location:partof&_include:iterate=Location:partof",
                 ["Location/10"], ["Location/20", "Location/32", "Location/2", "Location/1"],
                 id="iterate-on-what-a-revinclude-brought"),
]


@pytest.mark.parametrize(("caller", "rtype", "query", "matched", "included"), ITERATED)
def test_iterate_across_types(ctx: ServerContext, caller: Caller, rtype: str, query: str, matched: list[str],
                              included: list[str]) -> None:
    bundle = search(ctx, rtype, query, caller, strict=True)
    assert entries(bundle, "match") == matched
    assert sorted(entries(bundle, "include")) == sorted(included)
    assert entries(bundle, "include") == included  # level by level, in the order of the includes
    assert bundle["total"] == len(matched) and "outcome" not in {e["search"]["mode"] for e in bundle["entry"]}


def test_iterate_stops_at_the_depth_limit_and_says_so(ctx: ServerContext, monkeypatch: pytest.MonkeyPatch) -> None:
    """Levels count from the first include: here the Device's Location, then one parent; the next would go on."""
    monkeypatch.setattr(include, "MAX_ITERATE_DEPTH", 2)
    bundle = search(ctx, "Device", "_id=1&_include=Device:location&_include:iterate=Location:partof")
    assert entries(bundle, "include") == ["Location/30", "Location/20"]
    assert [e["search"]["mode"] for e in bundle["entry"]][-1] == "outcome"
    reverse = search(ctx, "Location", "_id=2&_revinclude:iterate=Location:partof")
    assert entries(reverse, "include") == ["Location/10", "Location/11", "Location/20", "Location/32"]
    assert [e["search"]["mode"] for e in reverse["entry"]][-1] == "outcome"
    done = search(ctx, "Location", "_id=20&_revinclude:iterate=Location:partof")  # nothing left below
    assert "outcome" not in [e["search"]["mode"] for e in done["entry"]]


@pytest.mark.parametrize("rtype, query, words", [
    pytest.param("Device", "_include:iterate=Location:partof", "no Location is among the results",
                 id="iterate-from-a-type-not-brought"),
    pytest.param("Device", "_include=Location:partof", "'Location:partof' is not supported",
                 id="a-plain-include-starts-from-the-matches"),
    pytest.param("Location", "_revinclude:iterate=Schedule:actor&_include:iterate=Device:location",
                 "no Device is among the results", id="a-type-nothing-brings"),
    pytest.param("Device", "_include=Device:location&_include:iterate=Location:name", "is not supported",
                 id="not-a-reference"),
])
def test_what_cannot_be_iterated_is_a_400(ctx: ServerContext, rtype: str, query: str, words: str) -> None:
    with pytest.raises(UnsupportedParameter) as info:
        search(ctx, rtype, query)
    assert info.value.status == 400 and words in info.value.diagnostics


def test_the_self_link_keeps_the_includes(ctx: ServerContext) -> None:
    bundle = search(ctx, "Device", "_id=1&_include=Device:location&_include:iterate=Location:partof")
    assert "_include=Device:location:Location&_include:iterate=Location:partof:Location" in bundle["link"][0]["url"]
