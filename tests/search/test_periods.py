"""A `date` parameter over a period (issue 29 item 4): `DateTarget(start, end=end)`, a NULL start or end an open
bound, both NULL no value. Each prefix as R4 defines it for a target that is a range (the search value a range
too: 2020 is [2020-01-01, 2021-01-01)), both backends, with a throwaway provider declared here."""
from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from sqlalchemy import Column, DateTime, Integer, MetaData, Table

from server import DateTarget, ResourceProvider, SearchParam, Settings, hookimpl
from server.engine.context import ServerContext, create_context
from server.errors import InvalidValue, UnsupportedParameter
from tests.support.contexts import SECRET, make_settings
from tests.support.searching import search

spans = Table("periods_test_span", MetaData(), Column("id", Integer, primary_key=True, autoincrement=False),
              Column("start", DateTime(timezone=True)), Column("end", DateTime(timezone=True)))


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


PERIODS = {  # id -> (start, end); 2020 is the value searched most
    1: ("2020-01-01T00:00:00", "2020-12-31T23:59:59"),  # within 2020
    2: ("2019-06-01T00:00:00", "2020-06-01T00:00:00"),  # overlaps its start
    3: ("2020-06-01T00:00:00", "2021-06-01T00:00:00"),  # overlaps its end
    4: ("2019-01-01T00:00:00", "2019-12-31T00:00:00"),  # wholly before
    5: ("2021-01-01T00:00:00", "2021-12-31T00:00:00"),  # wholly after (starts at its upper bound)
    6: ("2020-03-01T00:00:00", None),  # open end, starts within
    7: (None, "2020-03-01T00:00:00"),  # open start, ends within
    8: (None, None),  # no value
    9: ("2018-01-01T00:00:00", "2022-01-01T00:00:00"),  # spans it
    10: ("2019-12-31T23:59:59", "2019-12-31T23:59:59"),  # an instant just before it
}
EVERY = set(PERIODS)


class Spans:
    @hookimpl
    def register_resource_providers(self, settings: Settings) -> list[ResourceProvider]:
        def to_resource(row: Any) -> dict[str, Any]:
            return {"resourceType": "Encounter", "id": str(row["id"]), "status": "finished",
                    "class": {"code": "AMB"}}

        return [ResourceProvider(
            resource_type="Encounter", table=spans, id_column=spans.c.id, columns=tuple(spans.c),
            to_resource=to_resource,
            search_params=(SearchParam("date", "date", (DateTarget(spans.c.start, end=spans.c.end),),
                                       "The period of the encounter"),),
        )]


@pytest.fixture(scope="module")
def ctx(small_ctx: ServerContext, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerContext]:
    with small_ctx.db.begin() as conn:
        spans.create(conn, checkfirst=True)
        conn.execute(spans.delete())
        conn.execute(spans.insert(), [{"id": i, "start": start and _at(start), "end": end and _at(end)}
                                      for i, (start, end) in PERIODS.items()])
    settings = make_settings(small_ctx.settings.database_url, tmp_path_factory.mktemp("periods"),
                             auth={"secret": SECRET})
    yield create_context(settings, [("spans", Spans())], db=small_ctx.db)
    with small_ctx.db.begin() as conn:
        spans.drop(conn)


@pytest.mark.parametrize("query, expected", [
    pytest.param("date=2020", {1}, id="eq-the-value-holds-the-period"),
    pytest.param("date=eq2020", {1}, id="eq-explicit"),
    pytest.param("date=ne2020", EVERY - {1, 8}, id="ne-not-held-open-bounds-included"),
    pytest.param("date=gt2020", {3, 5, 6, 9}, id="gt-reaches-past-it"),
    pytest.param("date=lt2020", {2, 4, 7, 9, 10}, id="lt-reaches-before-it"),
    pytest.param("date=ge2020", {1, 3, 5, 6, 9}, id="ge-reaches-past-or-held"),
    pytest.param("date=le2020", {1, 2, 4, 7, 9, 10}, id="le-reaches-before-or-held"),
    pytest.param("date=sa2020", {5}, id="sa-starts-after"),
    pytest.param("date=eb2020", {4, 10}, id="eb-ends-before"),
    pytest.param("date=ge2020-06-01", {1, 3, 5, 6, 9}, id="ge-a-day"),
    pytest.param("date=eb2020-06-01", {4, 7, 10}, id="eb-a-day-open-start-not-ending-at-its-start"),
    pytest.param("date=sa2020-02-15", {3, 5, 6}, id="sa-a-day-open-end"),
    pytest.param("date=eq2019-12-31", {10}, id="eq-an-instant-within-a-day"),
    pytest.param("date=ge2020&date=lt2021", {1, 3, 6, 9}, id="and"),
    pytest.param("date=eb2020-01-01,sa2020-12-31", {4, 5, 10}, id="or"),
    pytest.param("date:missing=true", {8}, id="missing-both-null"),
    pytest.param("date:missing=false", EVERY - {8}, id="present-either-bound"),
])
def test_a_period_by_each_prefix(ctx: ServerContext, query: str, expected: set[int]) -> None:
    bundle = search(ctx, "Encounter", f"{query}&_count=50", strict=True)
    assert {int(e["resource"]["id"]) for e in bundle.get("entry", [])} == expected
    assert bundle["total"] == len(expected)


@pytest.mark.parametrize("query, error", [
    pytest.param("date=ap2020", InvalidValue, id="ap-is-not-supported"),
    pytest.param("date=2020-13", InvalidValue, id="not-a-date"),
    pytest.param("date:below=2020", UnsupportedParameter, id="no-such-modifier"),
])
def test_bad_values_are_a_400(ctx: ServerContext, query: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        search(ctx, "Encounter", query, strict=True)
