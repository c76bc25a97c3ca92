"""Statement templates (server.engine.templates): a search's count and page are compiled once per shape of its
values; another request of that shape binds its values into the kept statement and answers exactly what a statement
built for it answers. A value that reaches a statement other than through the search's own conditions refuses the
template, for good: the shape is built per request again."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import literal, select

from server.access.tenancy import AccessScope
from server.engine import templates
from server.engine.caller import TRUSTED, Caller
from server.engine.context import ServerContext
from server.engine.templates import REFUSED, Kept, Parts, bound
from server.storage.cache import Bounded
from server.storage.freshness import CountCache
from server.storage.prepared import Bound, Shaped
from plugins.orgunits.tables import org_unit
from tests.support.searching import search

SUBTREE_10 = Caller(None, AccessScope(account="default", roots=("Location/10",)))

# each family: one search of several values; the values differ in what a statement binds, not in its shape (and some
# in its shape too: each shape gets its own template)
FAMILIES = [
    pytest.param("_id={}", ["30", "20", "999", "10", "1"], id="id"),
    pytest.param("_id={},{}", [("30", "20"), ("1", "999"), ("10", "10")], id="ids"),
    pytest.param("identifier={}", ["KvNOePwHFyH", "nothing", "urn:uuid:00000000-0000-0000-0000-000000000000",
                                   "|KvNOePwHFyH", "x|y"], id="identifier"),
    pytest.param("identifier:text={}", ["kv", "zz", "a"], id="identifier-text"),
    pytest.param("identifier:not={}", ["KvNOePwHFyH", "nothing"], id="identifier-not"),
    pytest.param("name={}", ["seg", "aire", "zz", "s", "\U0010ffff", "a\U0010ffff"], id="name-prefix"),
    pytest.param("name={}&_count=1", ["seg", "aire", "b"], id="name-prefix-page"),
    pytest.param("name:exact={}", ["Segou", "nothing"], id="name-exact"),
    pytest.param("name:contains={}", ["eg", "ire", "q"], id="name-contains"),
    pytest.param("name={},{}", [("seg", "aire"), ("b", "zz")], id="names"),
    # two clauses alike share their matches (one bind in the statement): another shape than two that differ
    pytest.param("name={}&name={}", [("seg", "seg"), ("seg", "aire"), ("b", "b"), ("a", "b")], id="name-twice"),
    pytest.param("status={}&status={}", [("active", "active"), ("active", "inactive"), ("inactive", "inactive")],
                 id="status-twice"),
    pytest.param("status={}", ["active", "inactive", "suspended"], id="status"),
    pytest.param("partof={}", ["20", "10", "2", "999"], id="partof"),
    pytest.param("partof:below={}", ["20", "2", "10", "999", "30"], id="partof-below"),
    pytest.param("partof:above={}", ["30", "20", "1"], id="partof-above"),
    pytest.param("partof:missing={}", ["true", "false"], id="partof-missing"),
    pytest.param("partof.name={}", ["seg", "aire", "zz"], id="chain"),
    pytest.param("_has:Location:partof:name={}", ["seg", "aire", "zz"], id="has"),
    pytest.param("_lastUpdated=ge{}", ["2000-01-01", "2100-01-01", "2020"], id="last-updated"),
    pytest.param("status=active&name={}&_sort=-name", ["seg", "a", "b"], id="sorted"),
    pytest.param("status=active&_count=2&_after={}", ["10", "20", "30"], id="after"),
    # a page walked along the name index from a position: its look-up of where it resumes is a template too
    pytest.param("name={}&_count=1&_after={}", [("d", "10"), ("d", "32"), ("aire", "20"), ("s", "20"), ("cs", "30")],
                 id="name-prefix-after"),
    pytest.param("organization={}", ["1", "2", "999"], id="organization"),
    pytest.param("type={}", ["nothing", "x|y"], id="type"),
]


def _fresh(ctx: ServerContext, kept: int) -> ServerContext:
    """The context with nothing kept by a request's values (no page, no count), templates kept up to `kept`."""
    return replace(ctx, templates=Bounded(kept), pages=Bounded(0), counts=CountCache())


def _shown(bundle: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in bundle.items() if k not in ("id", "meta", "timestamp")}


def _values(query: str, value: Any) -> str:
    return query.format(*(value if isinstance(value, tuple) else (value,)))


@pytest.fixture
def trusted_at_once(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A template answers alone from its second request (no statement built beside it to compare)."""
    monkeypatch.setattr(templates, "VERIFY", 0)
    yield


@pytest.mark.parametrize("caller", [pytest.param(TRUSTED, id="trusted"), pytest.param(SUBTREE_10, id="subtree")])
@pytest.mark.parametrize("query, values", FAMILIES)
def test_a_templated_search_answers_what_a_built_one_answers(small_ctx: ServerContext, trusted_at_once: None,
                                                             query: str, values: list[Any], caller: Caller) -> None:
    templated, built = _fresh(small_ctx, 100), _fresh(small_ctx, 0)
    for value in [*values, *values]:  # then again, each from its template
        path = _values(query, value)
        assert _shown(search(templated, "Location", path, caller)) == _shown(search(built, "Location", path, caller)), \
            path
    assert any(isinstance(v, Kept) for v in templated.templates._items.values())  # the templates answered


@pytest.mark.parametrize("query, values", FAMILIES)
def test_no_template_binds_a_statement_other_than_its_requests(small_ctx: ServerContext, query: str,
                                                               values: list[Any], monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """Every use compared with the statement built for it (SQL and parameters): none differs."""
    monkeypatch.setattr(templates, "VERIFY", 10**9)
    ctx = _fresh(small_ctx, 100)
    for value in [*values, *values]:
        search(ctx, "Location", _values(query, value), SUBTREE_10)
        search(ctx, "Location", _values(query, value))
    kept = list(ctx.templates._items.values())
    assert REFUSED not in kept
    assert any(isinstance(k, Kept) and k.checked for k in kept)  # compared: a later value, the same shape


def test_a_kept_template_serves_a_new_value_without_building(small_ctx: ServerContext, trusted_at_once: None,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _fresh(small_ctx, 100)
    search(ctx, "Location", "identifier=KvNOePwHFyH")
    built: list[str] = []
    real = Shaped.of
    monkeypatch.setattr(Shaped, "of", classmethod(lambda cls, *a, **k: built.append("built") or real(*a, **k)))
    bundle = search(ctx, "Location", "identifier=nothing-of-this")
    assert bundle["total"] == 0 and built == []


def _condition(value: int) -> Any:
    return org_unit.c.id == value


@pytest.mark.refuses_templates
@pytest.mark.parametrize("outside", [pytest.param(True, id="a value outside its parts"),
                                     pytest.param(False, id="values in its parts only")])
def test_a_value_outside_the_parts_refuses_the_template(small_ctx: ServerContext, outside: bool) -> None:
    ctx = _fresh(small_ctx, 100)
    answers: list[Bound] = []
    for value in (1, 2, 3, 4):
        part = _condition(value)
        statement = select(org_unit.c.id, literal(value if outside else 0).label("v")).where(part)
        answers.append(bound(ctx, ("test",), Parts.of([part]), {}, lambda s=statement: s))
    assert [a.params for a in answers] == [Shaped.of(select(org_unit.c.id, literal(v if outside else 0).label("v"))
                                                     .where(_condition(v)), ctx.db.dialect, ctx.statements
                                                     ).bound().params for v in (1, 2, 3, 4)]
    assert (ctx.templates.peek(("test",)) is REFUSED) == outside


def test_a_part_used_twice_is_bound_at_each_place(small_ctx: ServerContext) -> None:
    ctx = _fresh(small_ctx, 100)
    for value in (1, 2, 10, 20, 30):
        part = _condition(value)
        statement = select(org_unit.c.id).where(part).union_all(select(org_unit.c.id).where(part))
        answer = bound(ctx, ("twice",), Parts.of([part]), {}, lambda s=statement: s)
        with ctx.db.connect() as conn:
            assert [tuple(r) for r in conn.exec_driver_sql(answer.sql, answer.params)] == [(value,), (value,)]
    assert isinstance(ctx.templates.peek(("twice",)), Kept)


def test_a_bound_name_is_replaced_wherever_it_is() -> None:
    statement = Bound("SELECT ? WHERE a > ? AND b > ?", (1, 2, 2), ("x", "y", "y"))
    assert statement.replace("y", 5).params == (1, 5, 5)
    assert Bound("SELECT", {"x": 1, "y": 2}, None).replace("y", 5).params == {"x": 1, "y": 5}
    assert Bound("SELECT", {"x": 1}, None).replace("y", 5).params == {"x": 1}  # a name it does not hold


@pytest.mark.parametrize("query", [pytest.param("identifier=KvNOePwHFyH", id="identifier"),
                                   pytest.param("name:contains=eg&status=active", id="contains-and-status"),
                                   pytest.param("_lastUpdated=ge2000-01-01", id="last-updated")])
def test_a_template_binds_its_values_into_the_statement_as_sent(small_ctx: ServerContext, query: str) -> None:
    """No compiled machinery per request: a template whose values the SQL does not render binds them straight into
    the first request's parameters (Template.flat), and that is what binding them the long way gives."""
    ctx = _fresh(small_ctx, 100)
    search(ctx, "Location", query)
    kept = [k for k in ctx.templates._items.values() if isinstance(k, Kept)]
    assert kept and all(k.template.flat is not None for k in kept)
    for k in kept:
        first = [k.template.shaped.extracted[positions[0]] for positions in k.template.slots]
        other = [b._with_value(_another(b.value), maintain_key=True) for b in first]
        assert k.template.flat.bind(other) == k.template.compiled_bind(other) != k.template.compiled_bind(first)


def _another(value: Any) -> Any:
    """Another value of the same type."""
    return value + timedelta(days=1) if isinstance(value, datetime) else value + (1 if isinstance(value, int) else "x")
