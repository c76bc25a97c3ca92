"""Multi-valued references held in a side table (`ReferenceTarget(..., through=Through(...))`): search by them,
:missing, _include (every referenced resource, once per page), _include:iterate and _revinclude, on both
backends, with a throwaway provider declared here over its own tables."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Column, ForeignKey, Integer, MetaData, String, Table

from server import ConfigError, ReferenceTarget, ResourceProvider, SearchParam, Settings, Through, hookimpl
from server.access.tenancy import AccessScope
from server.engine.caller import Caller
from server.engine.context import ServerContext, create_context
from server.errors import InvalidValue, UnsupportedParameter
from tests.support.contexts import SECRET, make_settings
from tests.support.searching import search


metadata = MetaData()
groups = Table("through_test_group", metadata, Column("id", Integer, primary_key=True), Column("name", String))
# one row per reference; `kind` 'former' rows are history, not references (the Through's `where` leaves them out)
members = Table("through_test_member", metadata,
                Column("group_id", Integer, ForeignKey("through_test_group.id"), index=True),
                Column("location_id", Integer, index=True), Column("kind", String))
parts = Table("through_test_part", metadata,
              Column("group_id", Integer, ForeignKey("through_test_group.id"), index=True),
              Column("part_id", Integer, index=True))

GROUPS = [(1, "north"), (2, "south"), (3, "empty"), (4, "all")]
MEMBERS = [(1, 30, "member"), (1, 31, "member"), (1, 20, "member"), (2, 32, "member"), (2, 31, "member"),
           (3, 30, "former"), (4, 30, "member")]
PARTS = [(4, 1), (4, 2), (1, 3), (2, 3)]  # groups made of groups: 4 -> 1, 2 -> 3

MEMBER = Through(members, members.c.group_id, members.c.kind == "member")


def to_resource(row: Any) -> dict[str, Any]:
    return {"resourceType": "Group", "id": str(row["id"]), "type": "device", "actual": True, "name": row["name"]}


class GroupProvider:
    @hookimpl
    def register_resource_providers(self, settings: Settings) -> list[ResourceProvider]:
        return [ResourceProvider(
            resource_type="Group", table=groups, id_column=groups.c.id, columns=tuple(groups.c),
            to_resource=to_resource,
            search_params=(
                SearchParam("member", "reference", (ReferenceTarget(members.c.location_id, "Location", through=MEMBER),),
                            "The locations in the group"),
                SearchParam("part", "reference",
                            (ReferenceTarget(parts.c.part_id, "Group", through=Through(parts, parts.c.group_id)),),
                            "The groups this group is made of"),
            ),
        )]


@pytest.fixture(scope="module")
def ctx(small_ctx: ServerContext, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerContext]:
    with small_ctx.db.begin() as conn:
        metadata.create_all(conn)
        for table in (parts, members, groups):
            conn.execute(table.delete())
        conn.execute(groups.insert(), [{"id": i, "name": n} for i, n in GROUPS])
        conn.execute(members.insert(), [{"group_id": g, "location_id": loc, "kind": k} for g, loc, k in MEMBERS])
        conn.execute(parts.insert(), [{"group_id": g, "part_id": p} for g, p in PARTS])
    settings = make_settings(small_ctx.settings.database_url, tmp_path_factory.mktemp("through"),
                             auth={"secret": SECRET})
    yield create_context(settings, [("groups", GroupProvider())], db=small_ctx.db)
    with small_ctx.db.begin() as conn:
        metadata.drop_all(conn)


def entries(bundle: dict[str, Any], mode: str) -> list[str]:
    return [f"{e['resource']['resourceType']}/{e['resource']['id']}" for e in bundle.get("entry", [])
            if e["search"]["mode"] == mode]


@pytest.mark.parametrize("query, expected", [
    pytest.param("member=Location/31", ["Group/1", "Group/2"], id="type-and-id"),
    pytest.param("member=30", ["Group/1", "Group/4"], id="bare-id"),
    pytest.param("member=http://elsewhere.test/fhir/Location/32", ["Group/2"], id="absolute-url"),
    pytest.param("member=30,32", ["Group/1", "Group/2", "Group/4"], id="or"),
    pytest.param("member=30&member=31", ["Group/1"], id="and"),
    pytest.param("member=Location/1", [], id="none-refers"),
    pytest.param("member=abc", [], id="not-a-stored-id"),
    pytest.param("member:missing=true", ["Group/3"], id="missing-where-rows-are-filtered"),
    pytest.param("member:missing=false", ["Group/1", "Group/2", "Group/4"], id="present"),
    pytest.param("part=Group/3", ["Group/1", "Group/2"], id="side-table-without-where"),
    pytest.param("part:missing=true", ["Group/3"], id="part-missing"),
    pytest.param("member:below=Location/10", ["Group/1", "Group/2", "Group/4"], id="below-through-a-side-table"),
    pytest.param("member:below=32", ["Group/2"], id="below-a-leaf-is-itself"),
    pytest.param("member:above=Location/20", ["Group/1"], id="above-through-a-side-table"),
])
def test_search_by_a_multi_valued_reference(ctx: ServerContext, query: str, expected: list[str]) -> None:
    bundle = search(ctx, "Group", query, strict=True)
    assert entries(bundle, "match") == expected and bundle["total"] == len(expected)


@pytest.mark.parametrize("query", ["member.name=CSPS", "member:Location.name=CSPS&_count=1", "member:below=10"])
def test_a_type_open_to_all_chained_to_a_scoped_one_is_answered_per_caller(ctx: ServerContext, query: str) -> None:
    """Group has no tenancy of its own, its chain reads Location: each caller's page is its own, never the page
    kept for another caller's search (whose chain saw other Locations)."""
    district, other = (Caller(None, AccessScope(roots=(root,))) for root in ("Location/10", "Location/3"))
    for _ in range(2):  # the second time the pages are kept
        assert entries(search(ctx, "Group", query, district), "match") != []
        assert entries(search(ctx, "Group", query, other), "match") == []


@pytest.mark.parametrize("query, matches, included", [
    pytest.param("_include=Group:member", ["Group/1", "Group/2", "Group/3", "Group/4"],
                 ["Location/20", "Location/30", "Location/31", "Location/32"], id="every-referenced-once"),
    pytest.param("_id=1&_include=Group:member:Location", ["Group/1"],
                 ["Location/20", "Location/30", "Location/31"], id="explicit-target"),
    pytest.param("_id=3&_include=Group:member", ["Group/3"], [], id="filtered-rows-include-nothing"),
    pytest.param("_count=1&_include=Group:member", ["Group/1"],
                 ["Location/20", "Location/30", "Location/31"], id="per-page"),
    pytest.param("_id=4&_include:iterate=Group:part", ["Group/4"], ["Group/1", "Group/2", "Group/3"],
                 id="iterate-self-reference"),
])
def test_include_over_a_side_table(ctx: ServerContext, query: str, matches: list[str], included: list[str]) -> None:
    bundle = search(ctx, "Group", query, strict=True)
    assert entries(bundle, "match") == matches
    assert sorted(entries(bundle, "include")) == included


@pytest.mark.parametrize("query, matches, included", [
    pytest.param("_id=31&_revinclude=Group:member", ["Location/31"], ["Group/1", "Group/2"], id="one"),
    pytest.param("_id=30,32&_revinclude=Group:member", ["Location/30", "Location/32"],
                 ["Group/1", "Group/2", "Group/4"], id="once-each-where-row-filtered"),
    pytest.param("_id=1&_revinclude=Group:member", ["Location/1"], [], id="none"),
])
def test_revinclude_over_a_side_table(ctx: ServerContext, query: str, matches: list[str],
                                      included: list[str]) -> None:
    bundle = search(ctx, "Location", query, strict=True)
    assert entries(bundle, "match") == matches
    assert sorted(entries(bundle, "include")) == included


@pytest.mark.parametrize("query, error", [
    pytest.param("member=Organization/1", InvalidValue, id="other-type"),
    pytest.param("part:below=Group/1", UnsupportedParameter, id="no-hierarchy-of-a-type-without-a-tree"),
    pytest.param("_revinclude=Group:member", UnsupportedParameter, id="revinclude-of-another-type"),
])
def test_bad_values_of_a_multi_valued_reference(ctx: ServerContext, query: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        search(ctx, "Group", query, strict=True)


def test_hierarchy_needs_the_reference_in_the_own_rows() -> None:
    with pytest.raises(ConfigError, match="through"):
        ReferenceTarget(members.c.location_id, "Location", path=groups.c.name, through=MEMBER)


def test_capabilities_list_the_side_table_includes(ctx: ServerContext) -> None:
    resources = {r["type"]: r for r in ctx.capability_statement["rest"][0]["resource"]}
    assert "Group:member" in resources["Group"]["searchInclude"]
    assert "Group:member" in resources["Location"]["searchRevInclude"]
