"""Pre-rendered bodies: stored once per version, spliced into responses, byte for byte what rendering per
request gives; re-rendered when the settings change; never stored when they would go stale."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qsl

import pytest
from sqlalchemy import func, select

from server.engine import reads, searches, versions
from server.engine.caller import TRUSTED
from server.engine.context import ServerContext, create_context
from server.declare.registry import code_of
from server.storage.freshness import Freshness, Snapshot
from server.http.responses import render
from server.http.negotiation import FHIR_XML, Format
from server.storage.prerender import refresh, usable
from server.declare.rendered import Rendered
from plugins.orgunits.tables import org_unit_history
from server.storage.tables import render_state
from plugins.orgunits.writer import write_units
from plugins.orgunits.records import UnitRecord
from tests.support.contexts import make_settings, per_request
from tests.support.data import NOW, load_small_pyramid

BASE = "http://fhir.example.org/fhir"


Call = Callable[[ServerContext], Any]


def _search(query: str) -> Call:
    return lambda ctx: searches.search_type(ctx, TRUSTED, BASE, "Location", parse_qsl(query))


REQUESTS: list[Any] = [
    *(pytest.param(lambda ctx, rid=rid: reads.read(ctx, TRUSTED, "Location", rid), id=f"read-{rid}")
      for rid in ("1", "10", "20", "30", "31", "32")),
    pytest.param(lambda ctx: reads.read(ctx, TRUSTED, "Location", "30", [("_summary", "true")]), id="read-summary"),
    pytest.param(lambda ctx: versions.vread(ctx, TRUSTED, "Location", "20", "1"), id="vread"),
    pytest.param(_search("_count=100"), id="search-all"),
    pytest.param(_search("name=ds&_count=1"), id="search-name-paged"),
    pytest.param(_search("status=active&_elements=name"), id="search-elements"),
    pytest.param(_search("near=11.7|-3.3|50|km"), id="search-near"),
    pytest.param(_search("partof:below=2&_sort=-name"), id="search-below-sorted"),
    pytest.param(_search("_include=Location:partof&_id=30"), id="search-include"),
    pytest.param(lambda ctx: searches.run_operation(ctx, TRUSTED, BASE, "Location", "20", "children", []),
                 id="children"),
    pytest.param(lambda ctx: versions.history_type(ctx, TRUSTED, BASE, "Location", []), id="history-type"),
    pytest.param(lambda ctx: versions.history_instance(ctx, TRUSTED, BASE, "Location", "31", []),
                 id="history-instance"),
]


@pytest.mark.parametrize("call", REQUESTS)
@pytest.mark.parametrize("fmt", [Format(), Format(pretty=True), Format(FHIR_XML)], ids=["json", "pretty", "xml"])
def test_stored_bodies_give_the_same_bytes(small_ctx: ServerContext, call: Call, fmt: Format) -> None:
    assert render(call(small_ctx), fmt) == render(call(per_request(small_ctx)), fmt)


def test_reads_splice_the_stored_body(small_ctx: ServerContext) -> None:
    assert isinstance(reads.read(small_ctx, TRUSTED, "Location", "30"), Rendered)
    # 32 closes in 2999: the day it closes its operationalStatus changes, so it is rendered per request
    assert not isinstance(reads.read(small_ctx, TRUSTED, "Location", "32"), Rendered)
    with small_ctx.db.connect() as conn:
        stored = conn.execute(select(func.count()).where(org_unit_history.c.body.is_not(None))).scalar()
    assert stored == 8


@pytest.mark.parametrize("bodies, stores, splices", [
    pytest.param({"Location"}, True, True, id="rendered-for-what-is-held"),
    pytest.param(set(), True, False, id="not-rendered-for-it"),
    pytest.param({"Location"}, False, False, id="a-provider-storing-no-body"),
])
def test_whether_a_snapshot_splices_a_providers_bodies(small_ctx: ServerContext, bodies: set[str], stores: bool,
                                                       splices: bool) -> None:
    """The one decision (server.storage.freshness.Snapshot.splices) reads, searches, versions and exports take."""
    provider = small_ctx.registry.get("Location")
    provider = provider if stores else replace(provider, prerendered=None)  # type: ignore[type-var]
    assert Snapshot(bodies=frozenset(bodies)).splices(provider) is splices  # type: ignore[arg-type]


def test_other_settings_re_render_every_version(fresh_ctx: Callable[..., ServerContext]) -> None:
    ctx = fresh_ctx()
    load_small_pyramid(ctx.db)
    assert refresh(ctx.db, ctx.registry) == 8 and refresh(ctx.db, ctx.registry) == 0
    other = fresh_ctx(status_map={"NEW": "active"})
    with other.db.connect() as conn:
        assert usable(conn, other.registry) == frozenset() and usable(conn, ctx.registry) == {"Location"}
    # until `render` runs for the new settings, their server renders per request (right, slower)
    assert reads.read(other, TRUSTED, "Location", "11")["status"] == "active"
    assert refresh(other.db, other.registry) == 8
    with other.db.connect() as conn:
        assert usable(conn, ctx.registry) == frozenset()
        assert conn.execute(select(render_state.c.fingerprint)).scalar() == other.registry.get(
            "Location").prerendered.fingerprint  # type: ignore[union-attr]
    later = replace(other, freshness=Freshness(other.registry))  # a running server looks again within a second
    body = reads.read(later, TRUSTED, "Location", "11")
    assert isinstance(body, Rendered) and body.resource()["status"] == "active"


def test_a_blocked_reference_type_is_part_of_the_fingerprint(fresh_ctx: Callable[..., ServerContext],
                                                           migrated_url: str, tmp_path: Any) -> None:
    ctx = fresh_ctx()
    without = create_context(make_settings(migrated_url, tmp_path, plugins={"organization": {"enabled": False}}))
    try:
        fingerprints = {c.registry.get("Location").prerendered.fingerprint for c in (ctx, without)}  # type: ignore[union-attr]
        assert len(fingerprints) == 2
        load_small_pyramid(without.db)
        refresh(without.db, without.registry)
        body = reads.read(without, TRUSTED, "Location", "30")
        assert isinstance(body, Rendered) and "reference" not in body.resource()["managingOrganization"]
    finally:
        without.db.dispose()


def test_a_total_follows_a_load(fresh_ctx: Callable[..., ServerContext]) -> None:
    ctx = fresh_ctx()
    load_small_pyramid(ctx.db)

    def total() -> int:
        return int(searches.search_type(ctx, TRUSTED, BASE, "Location", [("status", "active")])["total"])

    assert total() == total() == 6
    with ctx.db.begin() as conn:
        write_units(conn, [UnitRecord(40, "CSPS Nouveau", "CSPS", "VALID", parent_id=20)], 1, NOW)
    ctx.freshness.expire()  # as a second passing does
    assert total() == 7


def test_the_freshness_clock_decides_when_a_load_shows(fresh_ctx: Callable[..., ServerContext]) -> None:
    """Time under the tests' control: the server looks at the database again when its clock says a second passed,
    not before; a test holds the clock still (tests/support/clock.py) or calls expire(), it never sleeps."""
    ctx = fresh_ctx()
    load_small_pyramid(ctx.db)
    now = [100.0]
    ctx.freshness.clock = lambda: now[0]
    ctx.freshness.expire()

    def total() -> int:
        return int(searches.search_type(ctx, TRUSTED, BASE, "Location", [("status", "active")])["total"])

    assert total() == 6
    with ctx.db.begin() as conn:
        write_units(conn, [UnitRecord(40, "CSPS Nouveau", "CSPS", "VALID", parent_id=20)], 1, NOW)
    now[0] += ctx.freshness.interval_s * 0.99
    assert total() == 6  # not due yet: the snapshot (and the count kept under it) stays
    now[0] += ctx.freshness.interval_s * 0.02
    assert total() == 7  # a second passed on its clock: it looked again


@pytest.mark.parametrize("edited, same", [
    pytest.param('def f(x):\n    # why\n    return x + 1\n', True, id="a-comment"),
    pytest.param('def f(x):\n    """Adds one."""\n    return x + 1\n', True, id="a-docstring"),
    pytest.param('def f(x):\n\n    return (x\n            + 1)\n', True, id="layout"),
    pytest.param('def f(x):\n    return x + 2\n', False, id="the-code"),
    pytest.param('def f(y):\n    return y + 1\n', False, id="a-name"),
])
def test_the_rendering_fingerprint_follows_the_code_not_its_text(edited: str, same: bool) -> None:
    """Stored bodies are re-rendered when the engine code they depend on changes; an edit of a comment there
    stopped body splicing until `render` ran (issue 42 item 7)."""
    assert (code_of("def f(x):\n    return x + 1\n") == code_of(edited)) is same
