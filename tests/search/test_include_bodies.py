"""_include and _revinclude splice stored bodies (issue 27): the matches of a search with includes are their stored
bodies as without includes, and so are the resources included, each read as its id and current stored body; a row
without a usable one (NULL, a provider without pre-rendered bodies, bodies not usable for what the database holds)
is rendered per request. The answer is byte for byte the one rendered per request, for every caller: on both
backends, over the two-account universe (tests.support.scoping) with the body of unit 20 left NULL."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest
from sqlalchemy import delete, select, update
from starlette.testclient import TestClient

from plugins.orgunits.records import UnitRecord
from plugins.orgunits.tables import org_unit, org_unit_body, org_unit_history
from plugins.orgunits.writer import write_units
from server.app import create_app
from server.declare.rendered import Rendered
from server.engine import searches
from server.engine.caller import TRUSTED
from server.engine.context import ServerContext
from server.search import include
from server.storage.prerender import refresh
from tests.support.contexts import bearer, per_request
from tests.support.data import NOW
from tests.support.fixtures import context_fixture
from tests.support.plans import captured
from tests.support.scoping import universe_context

NULL_BODY = 20  # its stored body left NULL: rendered per request wherever it is included
BOUNDED = 33  # a child of 20 with a boundary: its stored body serves reads and includes, not rows of search columns
BASE = "http://fhir.example.org/fhir"
SQUARE = {"type": "Polygon", "coordinates": [[[-3.4, 11.6], [-3.2, 11.6], [-3.2, 11.8], [-3.4, 11.8], [-3.4, 11.6]]]}


def _universe(url: str, var: Path) -> ServerContext:
    ctx = universe_context(url, var)
    with ctx.db.begin() as conn:
        version = conn.execute(select(org_unit.c.source_version_id).where(org_unit.c.id == NULL_BODY)).scalar_one()
        write_units(conn, (UnitRecord(BOUNDED, "CSPS Bordé", "CSPS", "VALID", source_ref="CB0000000033",
                                      parent_id=NULL_BODY, geometry=SQUARE),), version, NOW)
    refresh(ctx.db, ctx.registry)
    with ctx.db.begin() as conn:
        conn.execute(update(org_unit_history).where(org_unit_history.c.org_unit_id == NULL_BODY).values(body=None))
        conn.execute(delete(org_unit_body).where(org_unit_body.c.org_unit_id == NULL_BODY))  # nor kept apart
    return ctx


ctx = context_fixture(_universe)


@pytest.fixture(scope="module")
def clients(ctx: ServerContext) -> Iterator[tuple[TestClient, TestClient]]:
    """(bodies spliced, every resource rendered per request)."""
    with TestClient(create_app(ctx.settings, context=ctx), base_url="http://testserver") as spliced, \
            TestClient(create_app(ctx.settings, context=per_request(ctx)), base_url="http://testserver") as rendered:
        yield spliced, rendered


ALPHA = {"account": "alpha"}
PATHS = [
    pytest.param("Location?_include=Location:partof&_count=100", id="include"),
    pytest.param("Location?_include=Location:partof&_count=3&_sort=-name", id="include-sorted-page"),
    pytest.param("Location?_include=Location:partof&_elements=name", id="include-elements"),
    pytest.param("Location?_id=30&_include:iterate=Location:partof", id="include-iterate"),
    pytest.param("Location?_id=31,202&_include:iterate=Location:partof", id="include-iterate-both-accounts"),
    pytest.param("Location?near=11.7|-3.3|500|km&_include=Location:partof", id="include-ranked"),
    pytest.param("Location?_id=30&_include=Location:partof&_include=Location:organization", id="include-two"),
    pytest.param("Location?_id=10,202&_revinclude=Location:partof", id="revinclude-null-body-and-deleted"),
    pytest.param("Location?_id=20&_revinclude=Location:partof", id="revinclude-a-boundary"),
    pytest.param("Location?_id=33&_include:iterate=Location:partof", id="include-from-a-boundary"),
    pytest.param("Location?_id=2&_revinclude=Location:partof&_include=Location:partof", id="revinclude-and-include"),
    pytest.param("Location?_revinclude=Device:location&_revinclude=Schedule:actor", id="revinclude-other-types"),
    pytest.param("Device?_include=Device:location", id="include-from-a-type-without-bodies"),
    pytest.param("Schedule?_include=Schedule:actor", id="include-through-a-side-table"),
    pytest.param("Location/20/$children?_include=Location:partof&_revinclude=Device:location", id="operation"),
    pytest.param("Device?_include=Device:location&_include:iterate=Location:partof", id="iterate-across-types"),
    pytest.param("Schedule?_include=Schedule:actor&_include:iterate=Location:partof", id="iterate-from-a-side-table"),
    pytest.param("Location?_id=10&_revinclude:iterate=Location:partof&_include:iterate=Location:partof",
                 id="revinclude-iterate-and-include-iterate"),
    pytest.param("Location?_id=2&_revinclude:iterate=Location:partof&_revinclude:iterate=Device:location",
                 id="revinclude-iterate-across-types"),
]
CALLERS = [
    pytest.param({}, id="no-account-claim"),
    pytest.param(ALPHA, id="alpha"),
    pytest.param({"account": "beta"}, id="beta"),
    pytest.param({**ALPHA, "org_unit_roots": ["Location/10"]}, id="alpha-subtree-10"),
    pytest.param({"account": "beta", "org_unit_roots": ["202"]}, id="beta-subtree-202"),
    pytest.param({**ALPHA, "scope": "system/Location.rs"}, id="smart-Location-only"),
    pytest.param({**ALPHA, "scope": "system/Location.s system/Device.s system/Schedule.s"}, id="smart-search-scopes"),
    pytest.param({**ALPHA, "scope": "system/*.rs"}, id="smart-wildcard"),
]


@pytest.mark.parametrize("claims", CALLERS)
@pytest.mark.parametrize("path", PATHS)
def test_includes_answer_the_bytes_rendered_per_request(ctx: ServerContext, clients: tuple[TestClient, TestClient],
                                                        path: str, claims: dict[str, Any]) -> None:
    spliced, rendered = clients
    headers = bearer(ctx.settings, **claims)
    expected = rendered.get(f"/fhir/{path}", headers=headers)
    answer = spliced.get(f"/fhir/{path}", headers=headers)
    assert (answer.status_code, answer.headers.get("content-type")) == \
        (expected.status_code, expected.headers.get("content-type")), answer.text
    assert answer.content == expected.content
    if answer.status_code == 200 and "Organization" not in path:
        assert {e["search"]["mode"] for e in answer.json().get("entry", [])} <= {"match", "include", "outcome"}


@pytest.mark.parametrize("path, limit", [
    pytest.param("Location?_id=1,2,10&_revinclude=Location:partof", ("MAX_INCLUDED", 2), id="revinclude-cap"),
    pytest.param("Location?_id=30&_include:iterate=Location:partof", ("MAX_INCLUDED", 1), id="include-cap"),
    pytest.param("Location?_id=1,2&_revinclude:iterate=Location:partof", ("MAX_INCLUDED", 3),
                 id="revinclude-iterate-cap"),
    pytest.param("Location?_id=30&_include:iterate=Location:partof", ("MAX_ITERATE_DEPTH", 2), id="iterate-depth"),
])
def test_the_limits_stop_at_the_same_resources(ctx: ServerContext, clients: tuple[TestClient, TestClient],
                                               monkeypatch: pytest.MonkeyPatch, path: str,
                                               limit: tuple[str, int]) -> None:
    monkeypatch.setattr(include, *limit)
    spliced, rendered = clients
    headers = bearer(ctx.settings, **ALPHA)
    answer = spliced.get(f"/fhir/{path}", headers=headers)
    assert answer.content == rendered.get(f"/fhir/{path}", headers=headers).content
    assert [e["search"]["mode"] for e in answer.json()["entry"]][-1] == "outcome"


def _search(ctx: ServerContext, resource_type: str, query: str) -> dict[str, Any]:
    return searches.search_type(ctx, TRUSTED, BASE, resource_type, parse_qsl(query))


def _kinds(bundle: dict[str, Any]) -> list[tuple[str, str, bool]]:
    return [(e["search"]["mode"], e["fullUrl"].removeprefix(BASE + "/"), isinstance(e["resource"], Rendered))
            for e in bundle["entry"]]


@pytest.mark.parametrize("resource_type, query, kinds", [
    pytest.param("Location", "_id=30&_include:iterate=Location:partof", [
        ("match", "Location/30", True), ("include", "Location/20", False), ("include", "Location/10", True),
        ("include", "Location/2", True), ("include", "Location/1", True)], id="include-iterate"),
    pytest.param("Location", "_id=10&_revinclude=Location:partof", [
        ("match", "Location/10", True), ("include", "Location/20", False),
        ("include", "Location/32", False)], id="revinclude-a-body-not-storable"),  # unit 32 closes later
    pytest.param("Location", "_id=20&_revinclude=Location:partof", [
        ("match", "Location/20", False), ("include", "Location/30", True), ("include", "Location/31", True),
        ("include", "Location/33", False)], id="revinclude-a-body-not-for-search-columns"),
    pytest.param("Location", "_id=33&_include=Location:partof&_revinclude=Location:partof", [
        ("match", "Location/33", False), ("include", "Location/20", False)], id="a-match-not-spliced"),
    pytest.param("Device", "_id=1&_include=Device:location", [
        ("match", "Device/1", False), ("include", "Location/30", True)], id="include-into-bodies"),
    pytest.param("Location", "_id=30&_revinclude=Device:location", [
        ("match", "Location/30", True), ("include", "Device/1", False)], id="revinclude-of-a-type-without-bodies"),
])
def test_what_is_spliced_and_what_is_rendered(ctx: ServerContext, resource_type: str, query: str,
                                              kinds: list[tuple[str, str, bool]]) -> None:
    assert _kinds(_search(ctx, resource_type, query)) == kinds
    assert _kinds(_search(per_request(ctx), resource_type, query)) == [(m, u, False) for m, u, _ in kinds]


def test_the_included_resources_are_read_as_ids_and_bodies(ctx: ServerContext) -> None:
    """Of the spliced answer, only the row without a body (unit 20) is read whole; the matches' reference columns
    and the included resources are read narrowly."""
    query = "_id=30,31&_include:iterate=Location:partof"
    _search(ctx, "Location", query)
    with captured(ctx.db) as statements:
        _search(ctx, "Location", query)
    whole = [s.sql for s in statements if "org_unit.name" in s.sql]
    assert len(whole) == 1 and "org_unit.id IN" in whole[0], whole
    with captured(ctx.db) as statements:
        _search(per_request(ctx), "Location", query)
    assert len([s for s in statements if "org_unit.name" in s.sql]) == 1 + 4  # the page, then each level
