"""What a caller sees of a type scoped through Locations follows the Locations when they move: its totals (kept per
data generation) are counted again once the pyramid changes, not only once the type itself does (issue 29: a
district's PractitionerRole total stayed 2 after its facility moved out, until a restart)."""
from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from plugins.orgunits.writer import ensure_data_source, ensure_source_version, write_units
from server.access.mint import mint_token
from server.app import create_app
from server.contract.answers import entries
from server.contract.context import contract_context
from server.engine.context import ServerContext
from plugins.orgunits.contract_samples import SUBJECT as ORGUNITS
from tests.proof.contract_samples import SUBJECT as PROOF
from tests.support.data import UNITS


@pytest.fixture
def ctx(backend_url: str, tmp_path: Path) -> Iterator[ServerContext]:
    with contract_context(backend_url, tmp_path / "var", (ORGUNITS, PROOF)) as made:
        yield made


def _total_and_matches(api: TestClient, ctx: ServerContext, root: str, url: str) -> tuple[int, set[str]]:
    """The total `url` answers a token limited to `root`, and the matches the same search lists whole."""
    headers = {"Authorization": f"Bearer {mint_token(ctx.settings, roots=[root])}"}
    total = api.get(url, headers=headers).json()["total"]
    search = url.replace("_summary=count", "").replace("_count=1", "")
    listed = api.get(f"{search}{'&' if '?' in search else '?'}_count=100", headers=headers).json()
    return total, {rid for _, rid in entries(listed)}


def _move(ctx: ServerContext, unit: int, parent: int) -> None:
    moved = replace(next(u for u in UNITS if u.id == unit), parent_id=parent)
    with ctx.db.begin() as conn:
        version = ensure_source_version(conn, ensure_data_source(conn, "Ministère de la Santé"), 3)
        write_units(conn, [moved], version, datetime.now(timezone.utc))
    ctx.freshness.expire()  # the server looks at what the database holds again (it does within a second)


@pytest.mark.parametrize("url", ["/fhir/PractitionerRole", "/fhir/PractitionerRole?_summary=count",
                                 "/fhir/PractitionerRole?_total=accurate&_count=1", "/fhir/Practitioner",
                                 "/fhir/HealthcareService?active=true"])
def test_totals_follow_a_facility_that_moves_out_of_a_district(ctx: ServerContext, url: str) -> None:
    roots = ("Location/10", "Location/3")
    with TestClient(create_app(ctx.settings, context=ctx), base_url="http://testserver") as api:
        before = {root: _total_and_matches(api, ctx, root, url) for root in roots}
        _move(ctx, 30, 3)  # CSPS Ségou leaves district 10 for region 3
        after = {root: _total_and_matches(api, ctx, root, url) for root in roots}
    assert before != after, "the move changes what each token sees"
    for total, matches in (*before.values(), *after.values()):
        assert total == len(matches)
