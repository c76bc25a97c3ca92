"""The current bodies' table (server.CurrentBodies): search pages and includes read each match's stored body by id
from it; a row serves only the version it was stored for (a newer version is rendered per request until its body
is stored); other settings empty it; a purge erases its rows with the units."""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl

import orjson
import pytest
from sqlalchemy import delete, select, text, update

from plugins.orgunits.admin import remove_source
from plugins.orgunits.records import UnitRecord
from plugins.orgunits.samples import NOW, SOURCE_NAME, UNITS
from plugins.orgunits.tables import org_unit, org_unit_body, org_unit_history
from plugins.orgunits.views import FIRST_ACCOUNT
from plugins.orgunits.writer import write_units
from server.declare.provider import CurrentBodies
from server.errors import ConfigError
from server.declare.rendered import Rendered, json_bytes
from server.engine import searches
from server.engine.caller import TRUSTED
from server.engine.context import ServerContext
from server.storage.prerender import _keep_current, refresh
from server.storage.tables import render_state
from tests.support.contexts import per_request
from tests.support.data import load_small_pyramid

BASE = "http://fhir.example.org/fhir"
MARKER = b'{"resourceType":"Location","id":"30","name":"from org_unit_body"}'


def _loaded(ctx: ServerContext) -> ServerContext:
    load_small_pyramid(ctx.db)
    refresh(ctx.db, ctx.registry)
    ctx.freshness.expire()
    return ctx


def _kept(ctx: ServerContext) -> dict[int, tuple[int, bytes]]:
    with ctx.db.connect() as conn:
        return {rid: (version, bytes(body)) for rid, version, body in conn.execute(
            select(org_unit_body.c.org_unit_id, org_unit_body.c.version_id, org_unit_body.c.body))}


def _current_stored(ctx: ServerContext) -> dict[int, tuple[int, bytes]]:
    """What the history holds as each unit's current version's stored body."""
    with ctx.db.connect() as conn:
        return {rid: (version, bytes(body)) for rid, version, body in conn.execute(
            select(org_unit.c.id, org_unit.c.version_id, org_unit_history.c.body).join(
                org_unit_history, (org_unit_history.c.org_unit_id == org_unit.c.id)
                & (org_unit_history.c.version_id == org_unit.c.version_id))
            .where(org_unit_history.c.body.is_not(None)))}


def _page(ctx: ServerContext, query: str) -> dict[str, Any]:
    return orjson.loads(json_bytes(searches.search_type(ctx, TRUSTED, BASE, "Location", parse_qsl(query))))


def _names(ctx: ServerContext, query: str) -> dict[str, str]:
    return {e["resource"]["id"]: e["resource"].get("name") for e in _page(ctx, query).get("entry", [])}


def test_a_refresh_keeps_each_current_body_apart(fresh_ctx: Callable[..., ServerContext]) -> None:
    ctx = _loaded(fresh_ctx())
    kept = _kept(ctx)
    assert kept == _current_stored(ctx)
    assert 32 not in kept  # its rendering does not stay right as time passes: never stored
    assert len(kept) == len(UNITS) - 1


@pytest.mark.parametrize("query", [
    pytest.param("_id=30", id="a-page"),
    pytest.param("_id=31&_include=Location:partof", id="an-include"),
])
def test_pages_and_includes_splice_the_kept_body(fresh_ctx: Callable[..., ServerContext], query: str) -> None:
    """The kept row is what a page splices (marked here to see it), for its version only."""
    ctx = _loaded(fresh_ctx())
    with ctx.db.begin() as conn:
        conn.execute(update(org_unit_body).where(org_unit_body.c.org_unit_id == 20).values(
            body=MARKER.replace(b'"30"', b'"20"')))
        conn.execute(update(org_unit_body).where(org_unit_body.c.org_unit_id == 30).values(body=MARKER))
    marked = "20" if "include" in query else "30"
    assert _names(ctx, query)[marked] == "from org_unit_body"
    with ctx.db.begin() as conn:  # a row of another version serves nothing: the page renders the current one
        conn.execute(update(org_unit_body).values(version_id=org_unit_body.c.version_id + 7))
    assert _names(ctx, query)[marked] != "from org_unit_body"
    assert _page(ctx, query) == _page(per_request(ctx), query)


def test_a_newer_version_is_never_served_an_older_body(fresh_ctx: Callable[..., ServerContext]) -> None:
    ctx = _loaded(fresh_ctx())
    before = _kept(ctx)[30]
    with ctx.db.begin() as conn:
        write_units(conn, [UnitRecord(30, "CSPS Ségou Renamed", "CSPS", "VALID", source_ref="KvNOePwHFyH",
                                      parent_id=20)], 1, NOW + timedelta(days=1))
    ctx.freshness.expire()
    # written, its body not yet stored: the page renders the new version, the kept row (the old one) serves nothing
    assert _kept(ctx)[30] == before
    assert _names(ctx, "_id=30") == {"30": "CSPS Ségou Renamed"}
    assert refresh(ctx.db, ctx.registry) == 1
    ctx.freshness.expire()
    assert _kept(ctx) == _current_stored(ctx) and _kept(ctx)[30][0] == before[0] + 1
    found = searches.search_type(ctx, TRUSTED, BASE, "Location", [("_id", "30")])["entry"][0]["resource"]
    assert isinstance(found, Rendered) and found.resource()["name"] == "CSPS Ségou Renamed"


def test_other_settings_make_the_kept_bodies_again(fresh_ctx: Callable[..., ServerContext]) -> None:
    ctx = _loaded(fresh_ctx())
    assert orjson.loads(_kept(ctx)[11][1])["status"] == "suspended"
    other = fresh_ctx(status_map={"NEW": "active"})
    refresh(other.db, other.registry)
    assert _kept(other) == _current_stored(other)
    assert orjson.loads(_kept(other)[11][1])["status"] == "active"


def test_a_purge_erases_the_kept_bodies(fresh_ctx: Callable[..., ServerContext]) -> None:
    ctx = _loaded(fresh_ctx())
    assert _kept(ctx)
    with ctx.db.begin() as conn:
        remove_source(conn, FIRST_ACCOUNT, SOURCE_NAME, force=True, now=NOW + timedelta(days=1), purge=True)
    assert _kept(ctx) == {}


def test_an_older_releases_claim_leaves_the_kept_bodies_unused_until_render(
        fresh_ctx: Callable[..., ServerContext]) -> None:
    """A release that does not know the kept bodies claims the type (its render with other settings: the row
    deleted, one inserted with its fingerprint only) and leaves the table as it was. Even where that fingerprint
    equals this server's (a provider whose fingerprint names its settings only), the kept rows serve nothing until
    this release's render makes them again."""
    ctx = _loaded(fresh_ctx())
    spec = ctx.registry.get("Location").prerendered  # type: ignore[union-attr]
    assert spec is not None
    with ctx.db.begin() as conn:
        conn.execute(update(org_unit_body).where(org_unit_body.c.org_unit_id == 30).values(body=MARKER))  # stale
        conn.execute(delete(render_state))
        conn.execute(text("INSERT INTO render_state (resource_type, fingerprint) VALUES ('Location', :f)"),
                     {"f": spec.fingerprint})
    ctx.freshness.expire()
    assert _names(ctx, "_id=30") == {"30": "CSPS Ségou"}
    assert _page(ctx, "_id=30") == _page(per_request(ctx), "_id=30")
    assert refresh(ctx.db, ctx.registry) == len(UNITS) - 1  # claimed again: every body made anew
    ctx.freshness.expire()
    assert _kept(ctx) == _current_stored(ctx) and MARKER not in {body for _, body in _kept(ctx).values()}
    assert _names(ctx, "_id=30") == {"30": "CSPS Ségou"}


def _current_spec(ctx: ServerContext) -> CurrentBodies:
    spec = ctx.registry.get("Location").prerendered  # type: ignore[union-attr]
    assert spec is not None and spec.current is not None
    return spec.current


def test_a_kept_body_never_goes_back_to_an_older_version(fresh_ctx: Callable[..., ServerContext]) -> None:
    """A render that read the units before a write stores after one that read them after it: its older row is
    not written over the newer one."""
    ctx = _loaded(fresh_ctx())
    version, body = _kept(ctx)[30]
    with ctx.db.begin() as conn:
        _keep_current(conn, _current_spec(ctx), [(30, version + 1, MARKER)])
        _keep_current(conn, _current_spec(ctx), [(30, version, body)])
    assert _kept(ctx)[30] == (version + 1, MARKER)


def test_two_renders_at_once_store_the_same_row(fresh_ctx: Callable[..., ServerContext]) -> None:
    """Two renders writing the row of one unit at once (PostgreSQL: the second waits for the first to commit,
    then updates the row rather than failing on its key; SQLite: one writer at a time)."""
    ctx = _loaded(fresh_ctx())
    if ctx.db.dialect.name != "postgresql":
        pytest.skip("SQLite runs one writer at a time: the second never meets the first's uncommitted row")
    version, _ = _kept(ctx)[30]
    with ctx.db.begin() as conn:
        conn.execute(delete(org_unit_body).where(org_unit_body.c.org_unit_id == 30))
    failed: list[BaseException] = []
    transactions = "READ COMMITTED"  # the context's engine autocommits; a render's connection does not

    def second() -> None:
        try:
            with ctx.db.connect() as conn, conn.execution_options(isolation_level=transactions).begin():
                _keep_current(conn, _current_spec(ctx), [(30, version + 1, MARKER)])
        except BaseException as exc:  # noqa: BLE001  (reported to the test's thread)
            failed.append(exc)

    with ctx.db.connect() as first:
        with first.execution_options(isolation_level=transactions).begin():
            _keep_current(first, _current_spec(ctx), [(30, version, b'{"first":1}')])
            thread = threading.Thread(target=second)
            thread.start()
            with ctx.db.connect() as watch:  # until the second waits for the first's uncommitted row
                while not watch.execute(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                             "AND datname = current_database()")).scalar():
                    assert thread.is_alive(), failed
                    watch.commit()
        thread.join(timeout=60)
    assert not thread.is_alive() and not failed, failed
    assert _kept(ctx)[30] == (version + 1, MARKER)


@pytest.mark.parametrize("columns", [
    pytest.param((org_unit_body.c.org_unit_id, org_unit.c.version_id, org_unit_body.c.body), id="two-tables"),
    pytest.param((org_unit_body.c.org_unit_id, org_unit_body.c.version_id, org_unit_body.c.body.label("b")),
                 id="an-expression"),
])
def test_a_current_bodies_table_is_one_table(small_ctx: ServerContext, columns: tuple[Any, Any, Any]) -> None:
    provider = small_ctx.registry.get("Location")
    spec = provider.prerendered  # type: ignore[union-attr]
    declared = replace(provider, prerendered=replace(spec, current=CurrentBodies(*columns)))  # type: ignore[type-var, arg-type]
    with pytest.raises(ConfigError, match="columns of one table"):
        declared.check()  # type: ignore[union-attr]
