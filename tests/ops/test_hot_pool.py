"""The hot path's own PostgreSQL connections (server.storage.hot.PostgresOnLoop): never more open than
database.pool_size, every statement answered when more ask at once than there are connections, and a freed
connection always reaches a taker still waiting: one that stops waiting (its request cancelled, before or after
it was woken) takes no connection and loses no wake-up; a connection that cannot be made, or whose making is
cancelled, frees its room; no connection keeps a large result between statements."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from server.errors import StorageUnavailable
from server.settings import Settings
from server.storage.db import wait_bound_s
from server.storage.hot import PostgresOnLoop, hot_database
from tests.support import pg
from tests.support.contexts import make_settings
from tests.support.proxy import Forwarder

pytestmark = pytest.mark.postgres
OPEN_HERE = "SELECT pg_sleep(%s), (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database())"


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with pg.scratch_database() as made:
        yield made


def _settings(url: str, tmp_path: Path, size: int = 1, **database: object) -> Settings:
    return make_settings(url, tmp_path, database={"pool_size": size, "statement_timeout_ms": 5000,
                                                  "connect_timeout_seconds": 2, **database})


def _pool(url: str, tmp_path: Path, size: int, **database: object) -> PostgresOnLoop:
    hot = hot_database(_settings(url, tmp_path, size, **database), url)
    assert isinstance(hot, PostgresOnLoop)
    return hot


async def holding(hot: PostgresOnLoop) -> None:
    """Until the pool's one place is taken by the statement started before (it counts the place before it
    connects): what starts next waits for it, however slow the machine."""
    while hot._open < hot.size:
        await asyncio.sleep(0)


@pytest.mark.parametrize(("size", "at_once"), [
    pytest.param(1, 6, id="one-connection-six-statements"),
    pytest.param(3, 12, id="three-connections-twelve-statements"),
])
def test_statements_beyond_the_pool_wait_their_turn(url: str, tmp_path: Path, size: int, at_once: int) -> None:
    hot = _pool(url, tmp_path, size)

    async def scenario() -> list[int]:
        try:
            found = await asyncio.gather(*(hot.rows(OPEN_HERE, (0.02,)) for _ in range(at_once)))
            return [rows[0][1] for rows in found]
        finally:
            await hot.close()

    open_seen = asyncio.run(scenario())
    assert len(open_seen) == at_once and max(open_seen) <= size, open_seen


@pytest.mark.parametrize("cancelled", ["while-waiting", "after-being-woken"])
def test_a_taker_that_stops_waiting_leaves_the_connection_to_the_next(url: str, tmp_path: Path,
                                                                      cancelled: str) -> None:
    """One connection: the first statement holds it, the second and third wait. The second is cancelled, either
    while it waits or just after the first's end woke it (before it ran): the third is answered at once, not
    after waiting out the bound for a wake-up the second took with it."""
    hot = _pool(url, tmp_path, 1)

    async def scenario() -> float:
        try:
            second: asyncio.Task[object] | None = None

            async def first() -> None:
                await hot.rows("SELECT pg_sleep(0.2)", ())
                if cancelled == "after-being-woken":
                    assert second is not None
                    second.cancel()  # its wake-up is set, it has not run yet

            holder = asyncio.create_task(first())
            await holding(hot)
            second = asyncio.create_task(hot.rows("SELECT 2", ()))
            third = asyncio.create_task(hot.rows("SELECT 3", ()))
            await asyncio.sleep(0)
            if cancelled == "while-waiting":
                second.cancel()
            started = time.monotonic()
            await holder
            assert await asyncio.wait_for(third, 10) == [(3,)]
            with pytest.raises(asyncio.CancelledError):
                await second
            assert await hot.rows("SELECT 4", ()) == [(4,)]  # the pool's one connection is still there
            return time.monotonic() - started
        finally:
            await hot.close()

    waited = asyncio.run(scenario())
    assert waited < wait_bound_s(_settings(url, tmp_path)) / 3, \
        f"the third waited {waited:.1f} s for a connection freed at once"


def test_a_connection_attempt_cancelled_frees_its_room(url: str, tmp_path: Path) -> None:
    """One connection, not made yet: a request whose connection is being made through a silent network is cancelled
    (its timeout, shutdown). When the network answers again, the next statement gets a connection at once: the
    cancelled attempt kept no place (it did: every later statement waited out the bound for a 503)."""
    parsed = make_url(url)
    forwarder = Forwarder((parsed.host or "127.0.0.1", parsed.port or 5432))
    through = parsed.set(port=forwarder.port).render_as_string(hide_password=False)
    hot = _pool(through, tmp_path, 1, connect_timeout_seconds=10)

    async def scenario() -> float:
        try:
            forwarder.pause()
            making = asyncio.create_task(hot.rows("SELECT 1", ()))
            await holding(hot)  # connecting, unanswered
            making.cancel()
            with pytest.raises(asyncio.CancelledError):
                await making
            forwarder.resume()
            started = time.monotonic()
            assert await hot.rows("SELECT 2", ()) == [(2,)]
            return time.monotonic() - started
        finally:
            forwarder.resume()
            await hot.close()

    try:
        took = asyncio.run(scenario())
    finally:
        forwarder.close()
    assert took < wait_bound_s(_settings(through, tmp_path)) / 3, \
        f"the next statement waited {took:.1f} s for the place of a cancelled attempt"


def test_a_connection_that_cannot_be_made_frees_its_room(tmp_path: Path) -> None:
    """Nothing listens: each statement fails at once as StorageUnavailable (503), the second too (its room was
    not kept by the first's failed connect, which would make it wait out the bound)."""
    nowhere = make_url(pg.ADMIN_URL).set(port=9, database="none").render_as_string(hide_password=False)
    hot = _pool(nowhere, tmp_path, 1, connect_timeout_seconds=1)
    bound = wait_bound_s(_settings(nowhere, tmp_path, connect_timeout_seconds=1))

    async def scenario() -> list[float]:
        took = []
        for _ in range(2):
            started = time.monotonic()
            with pytest.raises(StorageUnavailable):
                await hot.rows("SELECT 1", ())
            took.append(time.monotonic() - started)
        await hot.close()
        return took

    took = asyncio.run(scenario())
    assert max(took) < bound / 2, took


@pytest.mark.parametrize(("statement", "kept"), [
    pytest.param("SELECT 1, 'a'", True, id="one-small-row-a-read"),
    pytest.param("SELECT false, 7, now(), '\\x00ff'::bytea, 'a/b'", True, id="a-stored-versions-row"),
    pytest.param("SELECT json_build_object('type', 'Point')", False, id="a-value-of-unknown-size-json"),
    pytest.param("SELECT 1 WHERE false", True, id="no-row"),
    pytest.param("SELECT generate_series(1, 2)", False, id="a-page-of-rows"),
    pytest.param("SELECT repeat('x', 70000)", False, id="one-row-of-a-large-body"),
    pytest.param("SELECT json_build_object('type', repeat('x', 70000))", False, id="one-row-of-a-large-json"),
    pytest.param("SELECT 1, repeat('x', 40000), repeat('y', 40000)", False, id="large-across-columns"),
])
def test_a_connection_keeps_no_large_result_between_statements(url: str, tmp_path: Path, statement: str,
                                                               kept: bool) -> None:
    """Each connection runs its statements on one cursor (a cursor per statement costs client CPU), which holds
    its last result until the next: held on only for a read's one small row, never a page or a large body."""
    hot = _pool(url, tmp_path, 1)

    async def scenario() -> tuple[bool, object]:
        try:
            await hot.rows("SELECT 0", ())
            before = hot._idle[-1].cursor
            await hot.rows(statement, ())
            after = hot._idle[-1].cursor
            return after is before, after.pgresult
        finally:
            await hot.close()

    same, result = asyncio.run(scenario())
    assert same is kept
    assert kept or result is None


def test_takers_are_served_in_order_of_arrival(url: str, tmp_path: Path) -> None:
    """One connection, held by a first statement while two more wait: when it ends, its task asks again at once
    (before the first waiting has run): the connection goes to the one waiting first, not to the latecomer; a
    taker waiting after one that gave up is still served (no place lost in the line)."""
    hot = _pool(url, tmp_path, 1)
    served: list[str] = []

    async def ask(name: str, statement: str = "SELECT 1") -> None:
        await hot.rows(statement, ())
        served.append(name)

    async def scenario() -> None:
        try:
            async def first() -> None:
                await ask("first", "SELECT pg_sleep(0.2)")
                await ask("latecomer")  # before the ones waiting have run

            holder = asyncio.create_task(first())
            await holding(hot)
            waiting = [asyncio.create_task(ask(name)) for name in ("second", "gives-up", "third")]
            await asyncio.sleep(0)
            waiting[1].cancel()
            await asyncio.wait_for(asyncio.gather(holder, waiting[0], waiting[2]), 10)
            assert await hot.rows("SELECT 2", ()) == [(2,)]  # nothing waits: the idle connection at once
        finally:
            await hot.close()

    asyncio.run(scenario())
    assert served == ["first", "second", "third", "latecomer"]
