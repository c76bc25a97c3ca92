"""Instants and history cursors are read and written exactly, at every precision a provider may stamp (issue 37
item 5: a fraction parsed through a float read .000249 as 248 microseconds, and a cursor one microsecond early made
the keyset walk drop every remaining version at that instant)."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from plugins.orgunits.writer import ensure_data_source, ensure_source_version, write_units
from server.access.mint import mint_token
from server.app import create_app
from server.contract.answers import every_page
from server.declare.instants import exact_instant
from server.params.dates import parse_instant
from server.search.history import read_cursor, write_cursor
from server.storage.db import create_db_engine
from tests.support.contexts import SECRET, make_settings
from tests.support.data import UNITS, load_small_pyramid

BASE = datetime(2026, 11, 28, 21, 30, 30, tzinfo=UTC)


@pytest.mark.parametrize(("text", "microseconds"), [
    pytest.param("2026-11-28T21:30:30.000249Z", 249, id="a-float-reads-248"),
    pytest.param("2026-11-28T21:30:30.000251Z", 251, id="a-float-reads-250"),
    pytest.param("2026-11-28T21:30:30.000978+00:00", 978, id="with-a-zone"),
    pytest.param("2026-11-28T21:30:30.1Z", 100_000, id="tenths"),
    pytest.param("2026-11-28T21:30:30.123Z", 123_000, id="milliseconds"),
    pytest.param("2026-11-28T21:30:30.999999Z", 999_999, id="the-last-microsecond"),
    pytest.param("2026-11-28T21:30:30.123456789Z", 123_456, id="nanoseconds-drop-past-the-sixth-digit"),
    pytest.param("2026-11-28T21:30:30Z", 0, id="no-fraction"),
])
def test_a_fraction_of_a_second_is_read_exactly(text: str, microseconds: int) -> None:
    assert parse_instant("_since", text, zoned=True) == BASE.replace(microsecond=microseconds)


@pytest.mark.parametrize("microseconds", [249, 251, 489, 493, 498, 502, 507, 511, 978, 983, 0, 1, 999_999])
def test_a_cursor_reads_back_the_instant_it_was_written_with(microseconds: int) -> None:
    cursor = (BASE.replace(microsecond=microseconds), 3, "42")
    assert read_cursor(write_cursor(cursor)) == cursor
    assert parse_instant("_after", exact_instant(cursor[0]), zoned=True) == cursor[0]


@pytest.fixture
def api(migrated_url: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = make_settings(migrated_url, tmp_path, auth={"secret": SECRET})
    engine = create_db_engine(settings)
    load_small_pyramid(engine)
    with TestClient(create_app(settings, db=engine)) as client:
        client.headers["Authorization"] = f"Bearer {mint_token(settings)}"
        client.app.state.engine_for_test = engine
        yield client
    engine.dispose()


@pytest.mark.parametrize("microseconds", [249, 498, 983])
def test_a_history_walk_keeps_every_version_stamped_at_one_odd_microsecond(api: TestClient,
                                                                         microseconds: int) -> None:
    """Every unit renamed in one write stamped at ...30.000249: `_history?_count=2` walks all of them, each once."""
    at = BASE.replace(microsecond=microseconds)
    engine = api.app.state.engine_for_test
    with engine.begin() as conn:
        version = ensure_source_version(conn, ensure_data_source(conn, "Ministère de la Santé"), 3)
        write_units(conn, tuple(replace(u, name=f"{u.name} (2)") for u in UNITS), version, at)
    api.app.state.ctx.freshness.expire()
    since = exact_instant(at - timedelta(microseconds=1))
    pages = every_page(api, f"/fhir/Location/_history?_since={since}&_count=2")
    walked = [(e["fullUrl"].rsplit("/", 1)[1], e["response"]["etag"]) for page in pages for e in page["entry"]]
    assert sorted(walked) == sorted((str(u.id), 'W/"2"') for u in UNITS)
    assert len(walked) == pages[0]["total"] == len(UNITS)


# a forged cursor is a 400 naming it, never a 500 (an id past what the id column holds made the database refuse it)
@pytest.mark.parametrize("after", [
    pytest.param("2026-11-28T21:30:30Z,1," + "9" * 40, id="an-id-past-any-integer"),
    pytest.param("2026-11-28T21:30:30Z,1,9223372036854775808", id="an-id-past-a-bigint"),
    pytest.param("2026-11-28T21:30:30Z,1,1 OR 1=1", id="not-an-id"),
    pytest.param("2026-11-28T21:30:30Z,1,١٢", id="digits-of-another-script"),
    pytest.param("2026-11-28T21:30:30Z,1,-", id="a-sign-alone"),
])
def test_a_forged_history_cursor_is_refused_with_a_400(api: TestClient, after: str) -> None:
    for path in ("/fhir/Location/_history", "/fhir/Location/1/_history"):
        answer = api.get(path, params={"_after": after, "_count": 2})
        assert answer.status_code == 400, answer.text
        assert answer.json()["issue"][0]["code"] == "value"
