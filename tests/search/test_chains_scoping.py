"""Every hop of a chained or _has parameter applies the caller's scope on its own type, both backends: accounts,
source versions not served, deleted units, and providers scoped through a reference to Location (Device: one
reference; Schedule: several, in a side table, and its own account). Universe: tests.support.scoping (alpha: the
small pyramid 1-32; beta: DHIS2 version 1 (101-103, not served) and 2 (201-203), 204 deleted under 202). And the
conditions the server keeps follow the data."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from plugins.orgunits.records import TypeRecord, UnitRecord
from plugins.orgunits.writer import ensure_data_source, ensure_source_version, ensure_types, write_units

from server.access.tenancy import AccessScope
from server.engine.context import ServerContext
from server.engine.caller import TRUSTED, Caller
from tests.support.chained import matched, search
from tests.support.contexts import pyramid_context
from tests.support.data import NOW
from tests.support.fixtures import context_fixture
from tests.support.scoping import universe_context

ALPHA = Caller(None, AccessScope(account="alpha"))
BETA = Caller(None, AccessScope(account="beta"))
SUBTREE_10 = Caller(None, AccessScope(account="alpha", roots=("Location/10",)))  # 10, 20, 30, 31, 32


ctx = context_fixture(universe_context)


CASES = [
    pytest.param(BETA, "Location", "partof.identifier=BO200", {"203"}, id="served-version-deleted-child-left-out"),
    pytest.param(BETA, "Location", "partof.identifier=BO100", set(), id="version-not-served"),
    pytest.param(TRUSTED, "Location", "partof.identifier=BO100", set(), id="not-served-even-to-trusted"),
    pytest.param(BETA, "Location", "_has:Location:partof:name=Gone", set(), id="deleted-child-decides-nothing"),
    pytest.param(TRUSTED, "Location", "_has:Location:partof:name=Gone", set(), id="deleted-even-for-trusted"),
    pytest.param(BETA, "Location", "_has:Location:partof:name=Bo Clinic", {"202"}, id="live-child"),
    pytest.param(ALPHA, "Location", "partof.identifier=BO200", set(), id="another-accounts-parent"),
    pytest.param(ALPHA, "Location", "_has:Location:partof:identifier=BC200", set(), id="another-accounts-child"),
    pytest.param(SUBTREE_10, "Device", "location.name=CSPS", {"1"}, id="device-at-a-unit-named"),
    pytest.param(SUBTREE_10, "Device", "location.partof.identifier=AS0000000020", {"1"}, id="device-two-hops"),
    pytest.param(SUBTREE_10, "Device", "location.identifier=HB0000000003", set(), id="device-outside-the-subtree"),
    pytest.param(ALPHA, "Device", "location.identifier=HB0000000003", {"2"}, id="device-account"),
    pytest.param(ALPHA, "Location", "_has:Device:location:_id=1", {"30"}, id="has-device"),
    pytest.param(SUBTREE_10, "Location", "_has:Device:location:_id=2", set(), id="has-device-outside"),
    pytest.param(TRUSTED, "Location", "_has:Device:location:_id=6", set(), id="has-device-at-an-unknown-unit"),
    pytest.param(ALPHA, "Schedule", "actor.name=CSPS", {"1"}, id="schedule-side-table"),
    pytest.param(BETA, "Schedule", "actor.name=CSPS", set(), id="schedule-names-a-unit-of-another-account"),
    pytest.param(ALPHA, "Location", "_has:Schedule:actor:_id=1", {"3", "30"}, id="has-schedule"),
    pytest.param(BETA, "Location", "_has:Schedule:actor:_id=3", {"201"}, id="has-schedule-own-units-only"),
    pytest.param(ALPHA, "Location", "_has:Schedule:actor:_id=3", set(), id="has-schedule-of-another-account"),
    pytest.param(ALPHA, "Location", "_has:Schedule:actor:actor.identifier=HB0000000003", {"3", "30"},
                 id="has-schedule-then-chain"),
    pytest.param(SUBTREE_10, "Location", "_has:Schedule:actor:actor.identifier=HB0000000003", set(),
                 id="has-schedule-then-chain-outside"),
    pytest.param(ALPHA, "Organization", "_has:Location:organization:identifier=KvNOePwHFyH", {"alpha"},
                 id="organization-of-a-unit"),
    pytest.param(BETA, "Organization", "_has:Location:organization:identifier=KvNOePwHFyH", set(),
                 id="organization-of-another-accounts-unit"),
    pytest.param(BETA, "Organization", "_has:Location:organization:identifier=BO100", set(),
                 id="organization-of-a-version-not-served"),
]


@pytest.mark.parametrize(("caller", "rtype", "query", "expected"), CASES)
def test_each_hop_is_scoped(ctx: ServerContext, caller: Caller, rtype: str, query: str, expected: set[str]) -> None:
    with ctx.db.connect() as conn:
        accounts = {acct: str(i) for acct, i in conn.exec_driver_sql("SELECT account, id FROM data_source")}
    bundle = search(ctx, rtype, query, caller)
    assert matched(bundle) == {accounts.get(e, e) for e in expected} and bundle["total"] == len(expected)


def test_kept_conditions_follow_the_data(migrated_url: str, tmp_path: Path) -> None:
    """A chain's condition, with what its parameter looked up (a type's key), is kept per data generation: a unit
    of a new type written later is found at once."""
    ctx = pyramid_context(migrated_url, tmp_path)
    try:
        children, parents = "partof.identifier=CTtB0TPRvWc", "_has:Location:partof:type=NEWT"
        assert (matched(search(ctx, "Location", children)), matched(search(ctx, "Location", parents))) == \
            ({"20", "32"}, set())
        later = NOW + timedelta(days=1)
        with ctx.db.begin() as conn:
            version = ensure_source_version(conn, ensure_data_source(conn, "Ministère de la Santé", now=later), 3)
            ensure_types(conn, (TypeRecord("Nouveau type", "NEWT", "HF", 5),))
            write_units(conn, (UnitRecord(40, "CSPS Nouveau", "NEWT", "VALID", parent_id=10),), version, later)
        ctx.freshness.expire()
        assert (matched(search(ctx, "Location", children)), matched(search(ctx, "Location", parents))) == \
            ({"20", "32", "40"}, {"10"})
    finally:
        ctx.db.dispose()
