"""The contract check "give a Search for every declared parameter" names the parameters missing, those the engine
derives from a declaration included (issue 41, second platform-team trial, finding 3: a provider declaring
`last_updated=` declares `_lastUpdated`, and the failure did not say which parameter wanted a Search)."""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table

from server import ResourceProvider, SearchParam, StringTarget, Versioning
from server.contract.checks import test_samples_cover_every_declared_search_parameter as check
from server.contract.samples import Samples, Search

METADATA = MetaData()
THINGS = Table("things", METADATA, Column("id", Integer, primary_key=True), Column("name", String),
               Column("norm", String), Column("version", Integer), Column("updated", DateTime),
               Column("deleted", Integer))
HISTORY = Table("things_history", METADATA, Column("id", Integer), Column("version", Integer),
                Column("updated", DateTime), Column("deleted", Integer), Column("snapshot", String))
VERSIONING = Versioning(THINGS.c.version, THINGS.c.updated, THINGS.c.deleted, HISTORY, HISTORY.c.id,
                        HISTORY.c.version, HISTORY.c.updated, HISTORY.c.deleted, HISTORY.c.snapshot)
NAME = SearchParam("name", "string", (StringTarget(THINGS.c.norm, THINGS.c.name),), "its name")
BY_ID = Search("_id", "1", "1")
BY_NAME = Search("name", "one", "1")
SINCE = Search("_lastUpdated", "ge2020", "1")


@dataclass(frozen=True)
class Case:
    last_updated: bool  # the provider declares last_updated=
    versioned: bool  # ...or Versioning (whose last_updated gives _lastUpdated too)
    searches: tuple[Search, ...]
    missing: str | None  # what the failure says is missing; None: the check passes


CASES = [
    pytest.param(Case(True, False, (BY_ID, BY_NAME), "missing: _lastUpdated; _lastUpdated comes with last_updated="),
                 id="last-updated-declared-not-sampled"),
    pytest.param(Case(False, True, (BY_ID, BY_NAME), "missing: _lastUpdated; _lastUpdated comes with"),
                 id="versioning-declares-it-too"),
    pytest.param(Case(True, False, (BY_ID, BY_NAME, SINCE), None), id="last-updated-sampled"),
    pytest.param(Case(False, False, (BY_ID, BY_NAME), None), id="no-last-updated-none-needed"),
    pytest.param(Case(False, False, (Search("name:exact", "one", "1"),),
                      "missing: _id; _id comes with every provider)"), id="a-modifier-counts-for-its-parameter"),
    pytest.param(Case(True, False, (), "(missing: _id, _lastUpdated, name; _id comes with every provider; "
                                       "_lastUpdated comes with"), id="all-missing-each-named"),
]


@pytest.mark.parametrize("case", CASES)
def test_the_failure_names_the_parameters_missing(case: Case) -> None:
    provider = ResourceProvider("Basic", THINGS, THINGS.c.id, (THINGS.c.id,), dict, search_params=(NAME,),
                                versioning=VERSIONING if case.versioned else None,
                                last_updated=THINGS.c.updated if case.last_updated else None)
    ctx = SimpleNamespace(registry={"Basic": provider})
    samples = Samples("Basic", frozenset({"1"}), searches=case.searches)
    if case.missing is None:
        check(ctx, samples)  # type: ignore[arg-type]
        return
    with pytest.raises(AssertionError) as failed:
        check(ctx, samples)  # type: ignore[arg-type]
    assert str(failed.value).startswith("give a Search for every declared parameter of Basic (missing: ")
    assert case.missing in str(failed.value)
