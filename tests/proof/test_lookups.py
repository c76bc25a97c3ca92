"""Issue 41 item 2: look-ups are exact. A loader's look-up finds what nothing refers to yet, `within(account)` too
(rows of no account), never another account's; every form raises AmbiguousLookup when several match (a dict query
included: it was a ValueError); `identified_all` answers exactly what `identified` answers for each code, in a few
statements (a batch of 1,000 values each, not one per code). Over the proof's data and a second account `partner`
(tests/proof/test_tenants.py), both backends."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from plugins.orgunits.contract_samples import SUBJECT as ORGUNITS
from plugins.orgunits.records import UnitRecord
from plugins.orgunits.writer import ensure_data_source, ensure_source_version, ensure_types, write_units
from server.contract.context import contract_context
from server.engine.context import ServerContext
from server.engine import lookup as lookup_module
from server.engine.lookup import BATCH_VALUES, EngineLookup
from server.engine.searches import lookup
from server.errors import AmbiguousLookup, InvalidRequest
from server.search.request import MAX_VALUES
from tests.proof.contract_samples import SUBJECT as PROOF
from tests.proof.test_tenants import PARTNER_UNITS
from tests.support.data import NOW, TYPES


# a partner unit holding the code of the default account's Location 11: a trusted look-up of it is ambiguous
SHARED_CODE = UnitRecord(102, "Partner Copy", "CSPS", "VALID", source_ref="DD0000000011", parent_id=100)
# a unit known by aliases (a side table: a batch reads them by a statement of its own), one its own code in another
# system, with a uuid: each of its identifiers is matched by a form it does not show too (the uuid bare)
ALIASED = UnitRecord(103, "Partner Post", "CSPS", "VALID", uuid="5b1f0a6e-5d2c-4c43-9a57-1f0a6e5d2c4c",
                     source_ref="PARTNER0103", identifier_system="https://partner.example.org/sid/facility",
                     aliases=("OU_PARTNER_103", "Post Kati"), parent_id=100)


@pytest.fixture(scope="module")
def ctx(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerContext]:
    with contract_context(backend_url, tmp_path_factory.mktemp("var"), (ORGUNITS, PROOF)) as made:
        with made.db.begin() as conn:
            source = ensure_data_source(conn, "Partner MoH", now=NOW, account="partner")
            ensure_types(conn, TYPES, account="partner")
            write_units(conn, (*PARTNER_UNITS, SHARED_CODE, ALIASED), ensure_source_version(conn, source, 1),
                        NOW + timedelta(days=1))
        made.freshness.expire()
        yield made


@pytest.fixture
def trusted(ctx: ServerContext) -> EngineLookup:
    return lookup(ctx)


# practitioner 4 holds no role and service 6 is at no Location: on a server of two accounts they belong to none
@pytest.mark.parametrize("account", [None, "default", "partner"], ids=["trusted", "within-default", "within-partner"])
@pytest.mark.parametrize("resource_type, rid", [("Practitioner", "4"), ("HealthcareService", "6")])
def test_a_loaders_look_up_finds_what_nothing_refers_to_yet(trusted: EngineLookup, account: str | None,
                                                            resource_type: str, rid: str) -> None:
    found = trusted if account is None else trusted.within(account)
    assert found.ids(resource_type, {"_id": rid}) == [rid]
    assert found.one(resource_type, {"_id": rid}) is not None


@pytest.mark.parametrize("account, found", [("default", None), ("partner", "101")])
def test_within_an_account_never_finds_another_accounts_resource(trusted: EngineLookup, account: str,
                                                                 found: str | None) -> None:
    assert trusted.within(account).identified("Location", "PARTNER0101") == found
    assert trusted.within(account).identified_all("Location", ["PARTNER0101"]) == {"PARTNER0101": found}


@pytest.mark.parametrize("query", [
    pytest.param("_lastUpdated=ge2000-01-01", id="string"),
    pytest.param([("_lastUpdated", "ge2000-01-01")], id="pairs"),
    pytest.param({"_lastUpdated": "ge2000-01-01"}, id="dict"),
])
def test_one_raises_ambiguous_lookup_in_every_form(trusted: EngineLookup, query: Any) -> None:
    with pytest.raises(AmbiguousLookup, match=r"Practitioner\?_lastUpdated=ge2000-01-01 matches several"):
        trusted.one("Practitioner", query)


@pytest.mark.parametrize("account", ["default", "partner"])
def test_identified_all_answers_as_identified_for_each_code(ctx: ServerContext, trusted: EngineLookup,
                                                            account: str) -> None:
    """Every unit's code, unknown ones, a bare uuid and a urn:uuid: one (matched by a form the resource shows
    otherwise): the batch's answer is each code's own."""
    with ctx.db.connect() as conn:
        rows = conn.execute(ctx.registry.providers["Location"].table.select()).mappings().all()
    codes = [r["source_ref"] for r in rows] + ["nope", "KvNOePwHFy", str(rows[0]["uuid"]),
                                                f"urn:uuid:{rows[1]['uuid']}"]
    kept = trusted.within(account)
    each = {code: kept.identified("Location", code) for code in codes}
    assert kept.identified_all("Location", codes) == each
    assert sum(1 for v in each.values() if v is not None) >= 3
    assert each["nope"] is None


@pytest.mark.parametrize("resource_type", ["Location", "Organization"])
@pytest.mark.parametrize("account", ["default", "partner"])
def test_identified_all_answers_as_identified_in_each_system(trusted: EngineLookup, account: str,
                                                             resource_type: str) -> None:
    """Every identifier every resource of the account shows (a Location's code, its urn:uuid:, its aliases; an
    Organization's), and the bare uuids, asked of each system they are shown in and of none, in one batch each: the
    batch's answer is each value's own (a side table's values, another system's codes, a form a resource does not
    show)."""
    kept = trusted.within(account)
    shown = {(i["system"], i["value"]) for r in kept.search(resource_type, "_lastUpdated=ge2000-01-01")
             for i in r.get("identifier", ())}
    bare = {v.removeprefix("urn:uuid:") for _, v in shown if v.startswith("urn:uuid:")}
    values = sorted({v for _, v in shown} | bare | {"nope"})
    if account == "partner" and resource_type == "Location":
        assert {"OU_PARTNER_103", "Post Kati", f"urn:uuid:{ALIASED.uuid}"} <= set(values)
    assert shown, resource_type
    for system in [None, *sorted({s for s, _ in shown}), "https://elsewhere.example.org/sid"]:
        each = {v: kept.identified(resource_type, v, system=system) for v in values}
        assert kept.identified_all(resource_type, values, system=system) == each, system
        assert any(each.values()) == (system != "https://elsewhere.example.org/sid"), system


@pytest.mark.parametrize("page", [1, 2, 5])
def test_a_batch_reads_its_matches_page_after_page(trusted: EngineLookup, monkeypatch: pytest.MonkeyPatch,
                                                   page: int) -> None:
    """A batch whose matches pass a statement's page reads the next rows after the last id, until none is left."""
    kept = trusted.within("partner")
    values = ["PARTNER0100", "PARTNER0101", "DD0000000011", "OU_PARTNER_103", f"urn:uuid:{ALIASED.uuid}", "nope"]
    each = {value: kept.identified("Location", value) for value in values}
    monkeypatch.setattr(lookup_module, "BATCH_PAGE", page)
    assert kept.identified_all("Location", values) == each
    assert sum(1 for v in each.values() if v is not None) == 5


@pytest.mark.parametrize("form", ["identified", "identified_all"])
def test_a_code_held_by_several_is_ambiguous_in_every_form(trusted: EngineLookup, form: str) -> None:
    with pytest.raises(AmbiguousLookup, match="DD0000000011"):
        if form == "identified":
            trusted.identified("Location", "DD0000000011")
        else:
            trusted.identified_all("Location", ["KvNOePwHFyH", "DD0000000011"])


@pytest.mark.parametrize("values, system", [([""], None), (["x"], "")], ids=["empty-value", "empty-system"])
def test_identified_all_refuses_a_blank(trusted: EngineLookup, values: list[str], system: str | None) -> None:
    with pytest.raises(InvalidRequest, match="needs a value"):
        trusted.identified_all("Location", values, system=system)


@contextmanager
def statements(ctx: ServerContext) -> Iterator[list[str]]:
    """The statements sent to the context's database meanwhile."""
    sent: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    event.listen(ctx.db, "before_cursor_execute", count)
    try:
        yield sent
    finally:
        event.remove(ctx.db, "before_cursor_execute", count)


@pytest.mark.parametrize("known", [0, 2, 9], ids=["none-known", "two-known", "nine-known"])
def test_identified_all_resolves_thousands_of_codes_in_a_few_statements(ctx: ServerContext, trusted: EngineLookup,
                                                                         known: int) -> None:
    """2,500 codes, `known` of them real (spread over the batches), the others unknown: at most three statements
    per batch of 1,000 (its matches with their stored bodies, the rows without one, the re-ask of the values no
    match shows), and a snapshot of the data if it expired meanwhile; not one per code (2,500) nor per 100 (25)."""
    with ctx.db.connect() as conn:
        rows = conn.execute(ctx.registry.providers["Location"].table.select().order_by("id")).mappings().all()
    real = {str(r["source_ref"]): str(r["id"]) for r in rows
            if r["source_ref"] and r["source_ref"] != SHARED_CODE.source_ref}  # that one is ambiguous
    assert len(real) >= known
    codes = [f"CODE{n:05d}" for n in range(2500 - known)]
    for n, code in enumerate(sorted(real)[:known]):
        codes.insert(n * 61 % len(codes), code)
    ctx.freshness.expire()
    with statements(ctx) as snapshot:  # what taking a snapshot of the data costs, at most once below
        trusted.ids("Location", {"_id": "1"})
    with statements(ctx) as sent:
        found = trusted.identified_all("Location", codes)
    assert {code: found[code] for code in real if code in found} == {code: real[code] for code in codes
                                                                     if code in real}
    assert sum(1 for v in found.values() if v is not None) == known
    assert len(sent) <= 3 * 3 + len(snapshot), [s[:80] for s in sent]  # 3 batches


def test_identified_all_takes_more_values_than_a_client_may_send(trusted: EngineLookup) -> None:
    """A client's `identifier=` holds at most MAX_VALUES values; a look-up's batch ten times that (in-process)."""
    codes = [f"CODE{n:05d}" for n in range(BATCH_VALUES)] + ["KvNOePwHFyH"]
    with pytest.raises(InvalidRequest, match="too many values"):
        trusted.search("Location", [("identifier", ",".join(codes))])
    assert trusted.identified_all("Location", codes)["KvNOePwHFyH"] == "30"
    assert BATCH_VALUES > MAX_VALUES
