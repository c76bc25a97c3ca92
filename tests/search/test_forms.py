"""Condition forms (server.params.types.base.Binds, server.engine.conditions): a search whose clauses all have forms
and looks nothing up keeps its conditions' parts once per forms; another search of those forms binds its own values
into them and, its statements kept as templates, builds no SQL at all. Proven as templates are: the first uses
build their conditions too and compare; a build that depends on a value outside its form refuses the forms for good,
and the answers stay those of a built search."""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import pytest
from sqlalchemy import literal

from server.access.tenancy import AccessScope
from server.engine import conditions, templates
from server.engine.caller import Caller
from server.engine.conditions import LOOKS_UP, KeptParts
from server.engine.context import ServerContext
from server.engine.templates import REFUSED
from server.params.types.string import StringType
from server.storage.prepared import Shaped
from tests.search.test_templates import FAMILIES, SUBTREE_10, _fresh, _shown, _values
from tests.support.searching import search

# what each family's conditions are kept as: their parts (forms), or built for each request (a look-up first, a chain,
# OR-ed values compiled together)
KEPT = {
    "id": KeptParts, "identifier": KeptParts, "identifier-text": KeptParts, "identifier-not": KeptParts,
    "name-prefix": KeptParts, "name-prefix-page": KeptParts, "name-exact": KeptParts, "name-contains": KeptParts,
    "name-twice": KeptParts, "status-twice": KeptParts, "status": KeptParts, "partof": KeptParts,
    "partof-missing": KeptParts, "last-updated": KeptParts, "sorted": KeptParts, "after": KeptParts,
    "name-prefix-after": KeptParts,
    "type": (KeptParts, LOOKS_UP),  # a code of the other system matches nothing (no look-up); a code looks its keys up
    "partof-below": None, "partof-above": None,  # no form: compiled from the path of the unit named, looked up
    "organization": LOOKS_UP,  # a condition on a referred table: its keys looked up first
    "ids": KeptParts, "names": KeptParts, "many-ids": KeptParts, "ids-of-systems": KeptParts,  # OR-ed values
    "chain": None, "has": None,
}


def _kept(ctx: ServerContext) -> list[Any]:
    return [v for k, v in ctx.templates._items.items() if isinstance(k, tuple) and k[0] == "condition"]


# OR-ed values in their forms: how many (one `IN` of a bind each, or one list bound as one value past INLINE_VALUES)
# and which systems are in the form; the values themselves are bound
MANY = [
    pytest.param("_id={}", [",".join(map(str, range(1, 40))), ",".join(map(str, range(5, 44))),
                            ",".join(map(str, range(50, 89)))], id="many-ids"),
    pytest.param("identifier={}", ["KvNOePwHFyH,x|y,nothing", "a,x|z,b", "|KvNOePwHFyH,x|y,q"], id="ids-of-systems"),
]
FAMILIES = [*FAMILIES, *MANY]


@pytest.mark.parametrize("query, values", FAMILIES)
def test_what_each_search_keeps_of_its_conditions(small_ctx: ServerContext, query: str, values: list[Any]) -> None:
    family = next(p.id for p in FAMILIES if p.values == (query, values))
    ctx = _fresh(small_ctx, 100)
    for value in [*values, *values]:
        search(ctx, "Location", _values(query, value))
    kept = _kept(ctx)
    expected = KEPT[family] if isinstance(KEPT[family], tuple) else (KEPT[family],)
    assert {type(k) if isinstance(k, KeptParts) else k for k in kept} == {e for e in expected if e is not None}
    assert all(k.checked for k in kept if isinstance(k, KeptParts))  # a later search compared with them, and held


def test_a_kept_condition_serves_a_new_value_building_no_sql(small_ctx: ServerContext,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(templates, "VERIFY", 0)
    ctx = _fresh(small_ctx, 100)
    assert search(ctx, "Location", "identifier=KvNOePwHFyH&name=seg")["total"] >= 0
    built: list[str] = []
    real_matching, real_of = conditions.matching, Shaped.of
    monkeypatch.setattr(conditions, "matching", lambda *a, **k: built.append("conditions") or real_matching(*a, **k))
    monkeypatch.setattr(Shaped, "of", classmethod(lambda cls, *a, **k: built.append("statement") or real_of(*a, **k)))
    kept = search(ctx, "Location", "identifier=nothing-of-this&name=aire")
    assert built == []
    monkeypatch.undo()
    assert _shown(kept) == _shown(search(_fresh(small_ctx, 0), "Location", "identifier=nothing-of-this&name=aire"))


@pytest.mark.parametrize("verify", [pytest.param(0, id="trusted-at-once"), pytest.param(10**9, id="always-compared")])
@pytest.mark.parametrize("query, values", FAMILIES)
def test_a_kept_condition_answers_what_a_built_one_answers(small_ctx: ServerContext, monkeypatch: pytest.MonkeyPatch,
                                                           query: str, values: list[Any], verify: int) -> None:
    """Every family, each value after the others (its parts then another's, rebound), as a subtree caller too."""
    monkeypatch.setattr(templates, "VERIFY", verify)
    kept, built = _fresh(small_ctx, 100), _fresh(small_ctx, 0)
    for value in [*values, *reversed(values)]:
        path = _values(query, value)
        for caller in (None, SUBTREE_10):
            args = () if caller is None else (caller,)
            assert _shown(search(kept, "Location", path, *args)) == _shown(search(built, "Location", path, *args)), \
                path
    assert REFUSED not in _kept(kept)


_BUILD = StringType.build


def _build_reading_the_value(self: StringType, target: Any, modifier: str | None, key: Hashable,
                             binds: Sequence[Any]) -> Any:
    """:contains built with its value read from its bind, bound anew: against the protocol (a build depends on its
    form and its binds' places only, never on what they hold)."""
    return _BUILD(self, target, modifier, key, (literal(binds[0].value),) if modifier == "contains" else binds)


def test_a_build_reading_a_value_refuses_its_forms(small_ctx: ServerContext, monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(StringType, "build", _build_reading_the_value)
    ctx, built = _fresh(small_ctx, 100), _fresh(small_ctx, 0)
    for value in ("eg", "ire", "q", "eg", "ire", "q"):
        path = f"name:contains={value}"
        assert _shown(search(ctx, "Location", path)) == _shown(search(built, "Location", path))
    assert _kept(ctx) == [REFUSED]
    assert "condition forms refused" in caplog.text


def _narrowed(*query: tuple[str, str]) -> Caller:
    """A caller whose SMART scope on Location carries a query (`system/Location.rs?name=...`)."""
    return Caller(None, AccessScope(account="default", filters=(("Location", (query,)),)))


@pytest.mark.parametrize("verify", [pytest.param(0, id="trusted-at-once"), pytest.param(2, id="as-served")])
@pytest.mark.parametrize("scope, searches", [
    # the scope's query compiles its own clauses: its values must never be taken for the search's own
    pytest.param(("name", "seg"), ["name=seg&partof:missing=true", "name=aire&partof:missing=true",
                                   "name=b&partof:missing=true", "name=seg&partof:missing=true"], id="name-scope"),
    pytest.param(("_id", "20"), ["name=seg&partof:missing=false", "_id=20&partof:missing=true",
                                 "_id=30&partof:missing=true", "_id=1&partof:missing=true"], id="id-scope"),
    # the scope's query holds a chain (its far clause compiled apart): the caller sees 20 and 32, under DS Boromo
    pytest.param(("partof.name", "ds"), ["name=aire&partof:missing=true", "name=disp&partof:missing=true",
                                         "name=cma&partof:missing=true", "name=aire&partof:missing=true"],
                 id="chain-scope"),
])
def test_a_scopes_query_is_never_rebound_as_the_searchs_own(small_ctx: ServerContext, monkeypatch: pytest.MonkeyPatch,
                                                             scope: tuple[str, str], searches: list[str],
                                                             verify: int) -> None:
    """A caller narrowed by a scope's query: `:missing` on the hierarchy holds what it sees of the tree (the scope's
    own compiled clauses) inside the search's conditions; a later search of the same forms rebinds its own values
    only, whatever names the scope's binds carry."""
    monkeypatch.setattr(templates, "VERIFY", verify)
    kept, built, caller = _fresh(small_ctx, 100), _fresh(small_ctx, 0), _narrowed(scope)
    for path in [*searches, *searches]:
        assert _shown(search(kept, "Location", path, caller)) == _shown(search(built, "Location", path, caller)), path
    assert REFUSED not in _kept(kept)

