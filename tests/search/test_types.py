"""Search-parameter types behind one protocol: the registered types, declarations checked against them, and a
new type added as one module (here: a class in the test) plus one table entry, searched end to end."""
from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import parse_qsl

import pytest
from sqlalchemy import Column, ColumnElement, Integer, MetaData, String, Table

from server import (
    ConfigError,
    DateTarget,
    InvalidValue,
    ResourceProvider,
    SearchParam,
    Settings,
    StringTarget,
    TokenTarget,
    hookimpl,
)
from server.engine.context import ServerContext, create_context
from server.engine import searches
from server.engine.caller import TRUSTED
from server.declare.rendered import materialized
from server.errors import UnsupportedParameter
from server.params import types
from server.params.types.base import CompileContext, Match, ParamType
from tests.support.contexts import SECRET, make_settings

BASE = "http://fhir.test/fhir"
things = Table("types_test_thing", MetaData(), Column("id", Integer, primary_key=True), Column("name", String),
               Column("size", Integer))


def test_every_type_implements_the_protocol() -> None:
    members = {*ParamType.__annotations__, *(n for n, _ in inspect.getmembers(ParamType, inspect.isfunction)
                                             if not n.startswith("_"))}
    assert {"name", "target", "split", "parse", "compile"} <= members
    for kind in types.PARAM_TYPES:
        for name in members:
            assert hasattr(kind, name), f"{type(kind).__name__} lacks {name}"
        assert types.type_of(kind.target.__new__(kind.target)) is kind
    assert len({t.target for t in types.PARAM_TYPES}) == len(types.PARAM_TYPES)
    assert {t.name for t in types.PARAM_TYPES} == {"string", "token", "reference", "date", "special"}


@pytest.mark.parametrize("param, words", [
    pytest.param(SearchParam("size", "string", (TokenTarget(things.c.size),), "x"), "make it 'token'",
                 id="type-does-not-match-targets"),
    pytest.param(SearchParam("size", "number", (things.c.size,), "x"), "one search type", id="not-a-target"),
    pytest.param(SearchParam("size", "token", (), "x"), "none", id="no-target"),
    pytest.param(SearchParam("size", "token", (TokenTarget(things.c.size), DateTarget(things.c.size)), "x"),
                 "one search type", id="mixed-targets"),
])
def test_declarations_are_checked_against_the_types(param: SearchParam, words: str) -> None:
    provider = ResourceProvider("Basic", things, things.c.id, tuple(things.c), lambda row: {}, search_params=(param,))
    with pytest.raises(ConfigError, match=words):
        provider.check()


# -- a new type: its target, its typed value, its ParamType; one line in the table ------------------------

@dataclass(frozen=True)
class NumberTarget:
    column: ColumnElement[Any]


@dataclass(frozen=True)
class NumberValue:
    raw: str
    prefix: str
    number: int


class NumberType:
    name: ClassVar[str] = "number"
    target: ClassVar[type] = NumberTarget
    split: ClassVar[bool] = True

    def modifiers(self, targets: Sequence[NumberTarget]) -> frozenset[str]:
        return frozenset({"missing"})

    def parse(self, name: str, targets: Sequence[NumberTarget], modifier: str | None, raw: str) -> NumberValue:
        prefix, digits = (raw[:2], raw[2:]) if raw[:2] in ("gt", "lt") else ("eq", raw)
        if not digits.isdigit():
            raise InvalidValue(f"{name}: {raw!r} is not a number")
        return NumberValue(raw, prefix, int(digits))

    def compile(self, target: NumberTarget, modifier: str | None, value: NumberValue,
                at: CompileContext) -> Match | None:
        column, number = target.column, value.number
        return {"eq": column == number, "gt": column > number, "lt": column < number}[value.prefix]

    def present(self, target: NumberTarget, at: CompileContext) -> Match:
        return target.column.is_not(None)


class Things:
    @hookimpl
    def register_resource_providers(self, settings: Settings) -> list[ResourceProvider]:
        return [ResourceProvider(
            resource_type="Basic", table=things, id_column=things.c.id, columns=tuple(things.c),
            to_resource=lambda row: {"resourceType": "Basic", "id": str(row["id"]), "code": {"text": row["name"]}},
            search_params=(SearchParam("name", "string", (StringTarget(things.c.name, things.c.name),), "Name"),
                           SearchParam("size", "number", (NumberTarget(things.c.size),), "Size")),
        )]


@pytest.fixture(scope="module")
def ctx(small_ctx: ServerContext, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerContext]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(types.BY_TARGET, NumberTarget, NumberType())  # the "one line" of a new type
        with small_ctx.db.begin() as conn:
            things.create(conn, checkfirst=True)
            conn.execute(things.delete())
            conn.execute(things.insert(), [{"id": 1, "name": "pebble", "size": 1}, {"id": 2, "name": "rock", "size": 5},
                                           {"id": 3, "name": "cloud", "size": None}])
        settings = make_settings(small_ctx.settings.database_url, tmp_path_factory.mktemp("types"),
                                 auth={"secret": SECRET})
        yield create_context(settings, [("things", Things())], db=small_ctx.db)
        with small_ctx.db.begin() as conn:
            things.drop(conn)


@pytest.mark.parametrize("query, expected", [
    pytest.param("size=5", ["2"], id="eq"),
    pytest.param("size=gt0", ["1", "2"], id="prefix"),
    pytest.param("size=1,5", ["1", "2"], id="or"),
    pytest.param("size:missing=true", ["3"], id="missing"),
    pytest.param("size=lt9&name=pe", ["1"], id="with-another-type"),
])
def test_a_new_type_is_searched_end_to_end(ctx: ServerContext, query: str, expected: list[str]) -> None:
    bundle = materialized(searches.search_type(ctx, TRUSTED, BASE, "Basic", parse_qsl(query), strict=True))
    assert [e["resource"]["id"] for e in bundle.get("entry", [])] == expected


@pytest.mark.parametrize("query, error", [
    pytest.param("size=big", InvalidValue, id="its-parse-refuses"),
    pytest.param("size:exact=1", UnsupportedParameter, id="its-modifiers-only"),
])
def test_a_new_type_decodes_before_any_sql(ctx: ServerContext, query: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        searches.search_type(ctx, TRUSTED, BASE, "Basic", parse_qsl(query), strict=True)


def test_the_protocol_is_small() -> None:
    """parse, compile, present, modifiers; optional LooksUp and Ranks (see server.params.types.base)."""
    methods = {n for n, v in inspect.getmembers(ParamType, inspect.isfunction) if not n.startswith("_")}
    assert methods == {"modifiers", "parse", "compile", "present"}
