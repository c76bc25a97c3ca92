"""The result parameters shared by every pageable request (search, _history, static search), parsed by one
function, and the one quoting rule of the links rebuilt from them."""
from __future__ import annotations

from typing import Any

import pytest

from server.errors import InvalidValue
from server.search.history import parse_history
from server.search.paging import Paging, parse_paging, query_string
from server.engine.static import parse_static
from server.declare.provider import StaticProvider

STATIC = StaticProvider("CodeSystem", lambda conn: [])


@pytest.mark.parametrize("items, paging, rest", [
    pytest.param([], Paging(20, 0), [], id="defaults"),
    pytest.param([("_count", "5"), ("_skip", "10")], Paging(5, 10), [], id="count-and-skip"),
    pytest.param([("_count", "500")], Paging(100, 0), [], id="count-clamped"),
    pytest.param([("_count", ""), ("_skip", "")], Paging(20, 0), [], id="empty-ignored"),
    pytest.param([("_format", "xml"), ("name", "a"), ("_pretty", "true")],
                 Paging(20, 0, (("_format", "xml"), ("_pretty", "true"))), [("name", "a")], id="format-carried"),
    pytest.param([("b", "1"), ("_count", "2"), ("a", "2")], Paging(2, 0), [("b", "1"), ("a", "2")], id="rest-in-order"),
])
def test_parse_paging(items: list[tuple[str, str]], paging: Paging, rest: list[tuple[str, str]]) -> None:
    assert parse_paging(items) == (paging, rest)


@pytest.mark.parametrize("items", [
    pytest.param([("_count", "-1")], id="negative"),
    pytest.param([("_skip", "ten")], id="not-a-number"),
    pytest.param([("_count", "1" * 10)], id="too-long"),
])
def test_bad_paging_values(items: list[tuple[str, str]]) -> None:
    with pytest.raises(InvalidValue):
        parse_paging(items)


ITEMS = [("_count", "2"), ("_skip", "4"), ("_format", "application/fhir+json"), ("_pretty", "true")]


@pytest.mark.parametrize("parse, own, expected", [
    pytest.param(lambda items: parse_history(items),
                 [("_since", "2025-01-01T00:00:00+01:00")], "_since=2025-01-01T00:00:00%2B01:00&", id="history"),
    pytest.param(lambda items: parse_static(STATIC, items, strict=True),
                 [("url", "http://x.test/a b,http://x.test/c")], "url=http://x.test/a%20b,http://x.test/c&",
                 id="static"),
])
def test_every_pageable_request_quotes_its_links_alike(parse: Any, own: list[tuple[str, str]], expected: str) -> None:
    request = parse([*own, *ITEMS])
    assert request.query_string() == f"{expected}_count=2&_skip=4&_format=application/fhir%2Bjson&_pretty=true"
    assert request.page(0).query_string() == f"{expected}_count=2&_format=application/fhir%2Bjson&_pretty=true"


def test_query_string_keeps_what_fhir_values_hold_readable() -> None:
    assert query_string([("identifier", "http://s.test|a b"), ("name:exact", "x,y&z")]) == \
        "identifier=http://s.test|a%20b&name:exact=x,y%26z"
