"""`Through(table, key, where)` reads its side table, a join as well (issue 29 item 7): a side table joined with
another to keep some of its rows finds the right resources (not every pair of rows of both tables), and a `key`,
`where` or `version` that is not a column of its table is refused at declaration, named. On both backends, with a
throwaway provider declared here over its own tables."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Boolean, Column, ForeignKey, Integer, MetaData, String, Table, exists, select

from server import ConfigError, ReferenceTarget, ResourceProvider, SearchParam, Settings, Through, hookimpl
from server.engine.context import ServerContext, create_context
from tests.support.contexts import SECRET, make_settings
from tests.support.searching import search

metadata = MetaData()
teams = Table("through_join_team", metadata, Column("id", Integer, primary_key=True), Column("name", String))
roles = Table("through_join_role", metadata, Column("id", Integer, primary_key=True), Column("active", Boolean))
# one row per membership; only those whose role is active are references (the join keeps them)
seats = Table("through_join_seat", metadata,
              Column("team_id", Integer, ForeignKey("through_join_team.id"), index=True),
              Column("location_id", Integer, index=True),
              Column("role_id", Integer, ForeignKey("through_join_role.id")))

TEAMS = [(1, "north"), (2, "south"), (3, "mixed")]
ROLES = [(1, True), (2, False)]
SEATS = [(1, 30, 1), (2, 31, 2), (3, 30, 2), (3, 32, 1)]  # team 3 held Location/30 in an inactive role

ACTIVE = Through(seats.join(roles, seats.c.role_id == roles.c.id), seats.c.team_id, roles.c.active.is_(True))


class TeamProvider:
    @hookimpl
    def register_resource_providers(self, settings: Settings) -> list[ResourceProvider]:
        return [ResourceProvider(
            resource_type="Group", table=teams, id_column=teams.c.id, columns=tuple(teams.c),
            to_resource=lambda row: {"resourceType": "Group", "id": str(row["id"]), "type": "device",
                                     "actual": True, "name": row["name"]},
            search_params=(SearchParam("member", "reference",
                                       (ReferenceTarget(seats.c.location_id, "Location", through=ACTIVE),),
                                       "The locations the team holds in an active role"),),
        )]


@pytest.fixture(scope="module")
def ctx(small_ctx: ServerContext, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerContext]:
    with small_ctx.db.begin() as conn:
        metadata.create_all(conn)
        for table in (seats, roles, teams):
            conn.execute(table.delete())
        conn.execute(teams.insert(), [{"id": i, "name": n} for i, n in TEAMS])
        conn.execute(roles.insert(), [{"id": i, "active": a} for i, a in ROLES])
        conn.execute(seats.insert(), [{"team_id": t, "location_id": loc, "role_id": r} for t, loc, r in SEATS])
    settings = make_settings(small_ctx.settings.database_url, tmp_path_factory.mktemp("through-join"),
                             auth={"secret": SECRET})
    yield create_context(settings, [("teams", TeamProvider())], db=small_ctx.db)
    with small_ctx.db.begin() as conn:
        metadata.drop_all(conn)


def _matches(bundle: dict[str, Any]) -> list[str]:
    return [f"{e['resource']['resourceType']}/{e['resource']['id']}" for e in bundle.get("entry", [])
            if e["search"]["mode"] == "match"]


@pytest.mark.parametrize("query, expected", [
    pytest.param("member=30", ["Group/1"], id="the-joined-row-decides"),  # not team 3: its role is inactive
    pytest.param("member=31", [], id="only-an-inactive-row"),
    pytest.param("member=32", ["Group/3"], id="active-row"),
    pytest.param("member=30,31,32", ["Group/1", "Group/3"], id="or"),
    pytest.param("member:missing=true", ["Group/2"], id="missing-counts-only-kept-rows"),
    pytest.param("member:missing=false", ["Group/1", "Group/3"], id="present"),
])
def test_a_join_as_the_side_table(ctx: ServerContext, query: str, expected: list[str]) -> None:
    bundle = search(ctx, "Group", query, strict=True)
    assert _matches(bundle) == expected and bundle["total"] == len(expected)


@pytest.mark.parametrize("query, included", [
    pytest.param("_id=3&_include=Group:member", ["Location/32"], id="include-keeps-to-the-joined-rows"),
    pytest.param("_id=1,2,3&_include=Group:member", ["Location/30", "Location/32"], id="several"),
])
def test_a_join_as_the_side_table_in_an_include(ctx: ServerContext, query: str, included: list[str]) -> None:
    bundle = search(ctx, "Group", query, strict=True)
    assert sorted(f"{e['resource']['resourceType']}/{e['resource']['id']}" for e in bundle.get("entry", [])
                  if e["search"]["mode"] == "include") == included


def test_a_reference_column_outside_its_side_table_is_refused() -> None:
    with pytest.raises(ConfigError, match="is not a column of its side table"):
        ReferenceTarget(other.c.id, "Location", through=ACTIVE)


other = Table("through_join_other", MetaData(), Column("id", Integer, primary_key=True), Column("team_id", Integer))


@pytest.mark.parametrize("make, message", [
    pytest.param(lambda: Through(seats, other.c.team_id), r"Through\(through_join_seat\): its key reads "
                 r"through_join_other.team_id, not a column of its table", id="key-of-another-table"),
    pytest.param(lambda: Through(seats, seats.c.team_id, roles.c.active.is_(True)),
                 r"Through\(through_join_seat\): its where reads through_join_role.active",
                 id="where-of-a-table-not-joined"),
    pytest.param(lambda: Through(seats.join(roles, seats.c.role_id == roles.c.id), other.c.team_id),
                 r"Through\(through_join_seat JOIN through_join_role\): its key reads through_join_other.team_id",
                 id="key-outside-the-join"),
    pytest.param(lambda: Through(seats, seats.c.team_id, version=other.c.id),
                 r"its version reads through_join_other.id", id="version-of-another-table"),
])
def test_columns_of_another_table_are_refused_at_declaration(make: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()


@pytest.mark.parametrize("make", [
    pytest.param(lambda: Through(seats, seats.c.team_id, seats.c.role_id == 1), id="own-columns"),
    pytest.param(lambda: ACTIVE, id="a-join"),
    pytest.param(lambda: Through(seats, seats.c.team_id,
                                 exists(select(roles.c.id).where(roles.c.id == seats.c.role_id, roles.c.active))),
                 id="a-subquery-reads-its-own-tables"),
])
def test_columns_of_the_table_are_accepted(make: Any) -> None:
    assert isinstance(make(), Through)
