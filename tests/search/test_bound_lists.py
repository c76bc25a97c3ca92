"""Long value lists bound as one list (issue 41 item 2: a look-up's batch of a thousand codes): `one_of` matches
exactly what an `IN` of the same values matches, on each backend, for integer and text columns and a side table,
whatever the values hold (quotes, backslashes, commas, non-ASCII, digits in a text column); the statement is the
same for any number of values (one compiled form, one parameter), and a search with more values than INLINE_VALUES
answers what its values answer one by one."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import Column, ColumnElement, Enum, String, TypeDecorator, Uuid, func, select
from sqlalchemy.dialects.postgresql import CITEXT

from plugins.orgunits.tables import org_unit, org_unit_name
from server.engine.context import ServerContext
from server.params.types.base import INLINE_VALUES, bound_list, one_of
from server.storage.dialects import code_point_string
from server.storage.prepared import driver_sql
from tests.support.contexts import bearer

ODD = ["it's", 'say "hi"', "back\\slash", "a,b", "Ségou", "東京", "", " ", "0", "007", "12", "null", "[1]"]


def _found(ctx: ServerContext, key: ColumnElement[Any], condition: ColumnElement[bool]) -> list[Any]:
    bound = driver_sql(select(key).where(condition).order_by(key), ctx.db.dialect, ctx.statements)
    with ctx.db.connect() as conn:
        return [row[0] for row in conn.exec_driver_sql(bound.sql, bound.params).all()]


def _values(ctx: ServerContext, column: ColumnElement[Any], count: int, typed: type) -> list[Any]:
    """`count` values: every value the column holds (up to half), then values it does not hold (ODD first)."""
    with ctx.db.connect() as conn:
        held = [v for v in conn.execute(select(column).distinct().order_by(column)).scalars() if v is not None]
    made = held[:max(1, count // 2)]
    extra = [*ODD, *(f"none-{n}" for n in range(count))] if typed is str else [-n for n in range(1, count + 1)]
    return (made + extra)[:count]


class _Upper(TypeDecorator[str]):
    impl = String
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Any) -> str | None:
        return None if value is None else value.upper()


class _Lowered(TypeDecorator[str]):
    impl = String
    cache_ok = True

    def bind_expression(self, bindvalue: Any) -> Any:
        return func.lower(bindvalue)


COLUMNS = [
    pytest.param(org_unit.c.id, org_unit.c.id, int, id="integer-id"),
    pytest.param(org_unit.c.source_ref, org_unit.c.id, str, id="text-code"),
    pytest.param(org_unit.c.uuid, org_unit.c.id, str, id="text-uuid"),
    pytest.param(org_unit_name.c.text, org_unit_name.c.org_unit_id, str, id="side-table-alias"),
]


@pytest.mark.parametrize("count", [2, INLINE_VALUES, INLINE_VALUES + 1, 500])
@pytest.mark.parametrize("column, key, typed", COLUMNS)
def test_one_of_matches_what_in_matches(small_ctx: ServerContext, column: ColumnElement[Any],
                                        key: ColumnElement[Any], typed: type, count: int) -> None:
    values = _values(small_ctx, column, count, typed)
    assert len(values) == count
    expected = _found(small_ctx, key, column.in_(values))
    assert expected, "some values are held"
    assert _found(small_ctx, key, one_of(column, values)) == expected
    assert _found(small_ctx, key, bound_list(column, values)) == expected


@pytest.mark.parametrize("count, bound", [(1, False), (INLINE_VALUES, False), (INLINE_VALUES + 1, True)])
def test_a_long_list_is_bound_as_one_value(small_ctx: ServerContext, count: int, bound: bool) -> None:
    """Up to INLINE_VALUES values, a bind each; above, one bind holding them all."""
    sent = driver_sql(select(org_unit.c.id).where(one_of(org_unit.c.source_ref, [f"c{n}" for n in range(count)])),
                      small_ctx.db.dialect, small_ctx.statements)
    params: Sequence[Any] = list(sent.params.values()) if isinstance(sent.params, dict) else sent.params
    assert len(params) == (1 if bound else count)


def test_long_lists_of_any_length_share_one_compiled_statement(small_ctx: ServerContext) -> None:
    statements = [driver_sql(select(org_unit.c.id).where(one_of(org_unit.c.source_ref, [f"c{n}" for n in range(k)])),
                             small_ctx.db.dialect, small_ctx.statements) for k in (40, 400, 4000)]
    assert len({s.sql for s in statements}) == 1


def test_a_search_of_many_values_answers_as_its_values_do(small_ctx: ServerContext, client: Any) -> None:
    """`identifier=` with more values than INLINE_VALUES (a bound list on each target: code, uuid, aliases)."""
    headers = bearer(small_ctx.settings)
    every = client.get("/fhir/Location", params={"_count": "200", "_elements": "identifier"}, headers=headers).json()
    codes = sorted({i["value"] for e in every["entry"] for i in e["resource"].get("identifier", ())})
    values = [*codes, *(f"none-{n}" for n in range(INLINE_VALUES))]
    assert len(values) > INLINE_VALUES
    one_by_one = sorted({e["resource"]["id"] for v in codes for e in client.get(
        "/fhir/Location", params={"identifier": v.replace("\\", "\\\\").replace(",", "\\,").replace("|", "\\|")
                                  .replace("$", "\\$")}, headers=headers).json().get("entry", ())})
    joined = ",".join(v.replace("\\", "\\\\").replace(",", "\\,").replace("|", "\\|").replace("$", "\\$")
                      for v in values)
    together = client.get("/fhir/Location", params={"identifier": joined, "_count": "200"}, headers=headers).json()
    assert sorted(e["resource"]["id"] for e in together.get("entry", ())) == one_by_one
    assert len(one_by_one) > 1


@pytest.mark.parametrize("column, values, bound", [
    pytest.param(org_unit.c.id, list(range(40)), True, id="integers"),
    pytest.param(org_unit.c.source_ref, [f"c{n}" for n in range(40)], True, id="strings"),
    pytest.param(org_unit.c.id, [*range(39), "x"], False, id="a-string-in-an-integer-column"),
    pytest.param(org_unit.c.source_ref, [*(f"c{n}" for n in range(39)), 1], False, id="an-integer-in-a-text-column"),
    pytest.param(org_unit.c.id, [True, *range(39)], False, id="a-boolean"),
    pytest.param(Column("u", Uuid()), [f"{n:032x}" for n in range(40)], False, id="a-uuid-column"),
    pytest.param(Column("e", Enum("a", "b", name="kind")), ["a", "b"] * 20, False, id="an-enum-column"),
    pytest.param(Column("c", CITEXT()), [f"c{n}" for n in range(40)], False, id="a-citext-column"),
    pytest.param(Column("v", String().with_variant(CITEXT(), "postgresql")), [f"c{n}" for n in range(40)], False,
                 id="citext-on-postgresql-only"),
    pytest.param(Column("p", code_point_string()), [f"c{n}" for n in range(40)], True, id="a-code-point-string"),
    pytest.param(Column("l", _Lowered()), [f"c{n}" for n in range(40)], False, id="a-bind-expression"),
    pytest.param(org_unit.c.source_ref, [*(f"c{n}" for n in range(39)), "a\x00b"], False, id="a-nul-character"),
])
def test_only_plain_columns_and_their_own_values_are_bound_as_a_list(column: ColumnElement[Any], values: list[Any],
                                                                     bound: bool) -> None:
    """A type that converts what is bound (a Uuid, an Enum) or a value of another kind keeps an `IN` of a bind
    each: the list is compared as the column's own values, unconverted."""
    assert isinstance(one_of(column, values), bound_list) is bound



def test_a_type_converting_what_is_bound_keeps_an_in() -> None:
    assert not isinstance(one_of(Column("x", _Upper()), [f"c{n}" for n in range(40)]), bound_list)


def test_a_list_renders_as_literal_sql(small_ctx: ServerContext) -> None:
    """With its values written into the SQL (what a statement shown or copied holds), it runs and matches."""
    values = [*_values(small_ctx, org_unit.c.source_ref, 40, str), "it's"]
    statement = select(org_unit.c.id).where(bound_list(org_unit.c.source_ref, values)).order_by(org_unit.c.id)
    sql = str(statement.compile(dialect=small_ctx.db.dialect, compile_kwargs={"literal_binds": True}))
    with small_ctx.db.connect() as conn:
        assert [r[0] for r in conn.exec_driver_sql(sql).all()] == _found(
            small_ctx, org_unit.c.id, org_unit.c.source_ref.in_(values))
