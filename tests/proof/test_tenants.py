"""A provider scoped through references without partitions of its own (the proof package's HealthcareService,
PractitionerRole and Practitioner) has no account but the one its references name. A purge never hands one account's
rows to another: once the account `partner` is purged, its services, roles and practitioners (whose references name
its Locations only, now erased) stay out of sight of the account left, which is then the only one (they were shown
to it: the engine gave a caller of the only account every row). Rows referring to nothing at all stay seen by the
only account's callers; a row shared by both accounts stays seen by the one left. Both backends."""
from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from plugins.orgunits.admin import remove_account
from plugins.orgunits.records import UnitRecord
from plugins.orgunits.writer import ensure_data_source, ensure_source_version, ensure_types, write_units
from server.app import create_app
from server.contract import load_files
from server.contract.answers import entries
from server.contract.context import contract_context
from server.engine.context import ServerContext
from plugins.orgunits.contract_samples import SUBJECT as ORGUNITS
from tests.proof.contract_samples import SUBJECT as PROOF
from tests.support.contexts import bearer
from tests.support.data import NOW, TYPES
from tests.support.proof import SERVICES_UPDATE, WORKERS_UPDATE

PARTNER_UNITS = (UnitRecord(100, "Partner Land", "COUNTRY", "VALID", source_ref="PARTNER0100"),
                 UnitRecord(101, "Partner Clinic", "CSPS", "VALID", source_ref="PARTNER0101", parent_id=100))
# added to the proof's last files (a load of them drops what they do not list)
SERVICES = [{"id": 20, "name": "Partner service", "active": True, "category": "17", "locations": [101]},
            {"id": 21, "name": "Shared service", "active": True, "category": "17", "locations": [101, 30]}]
PRACTITIONERS = [{"id": 20, "name": "Partner Nurse"}]
ROLES = [{"id": 20, "practitioner": 20, "facilities": ["PARTNER0101"]}]


def _with_partner(path: Path, added: dict[str, list[dict[str, object]]]) -> dict[str, object]:
    content = json.loads(path.read_text(encoding="utf-8"))
    return {key: [*content[key], *rows] for key, rows in added.items()}


@pytest.fixture
def api(database_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, ServerContext]]:
    with contract_context(database_url, tmp_path / "var", (ORGUNITS, PROOF)) as ctx:
        with ctx.db.begin() as conn:
            source = ensure_data_source(conn, "Partner MoH", now=NOW, account="partner")
            ensure_types(conn, TYPES, account="partner")
            write_units(conn, PARTNER_UNITS, ensure_source_version(conn, source, 1), NOW + timedelta(days=1))
        for name, content in (("services-json", _with_partner(SERVICES_UPDATE, {"services": SERVICES})),
                              ("workers-json", _with_partner(WORKERS_UPDATE, {"practitioners": PRACTITIONERS,
                                                                              "roles": ROLES}))):
            path = tmp_path / f"{name}.json"
            path.write_text(json.dumps(content), encoding="utf-8")
            load_files(ctx.settings, name, path)
        ctx.freshness.expire()
        with TestClient(create_app(ctx.settings, context=ctx), base_url="http://testserver") as client:
            yield client, ctx


def _seen(client: TestClient, headers: dict[str, str]) -> dict[str, object]:
    """What a token sees of the partner's rows: each one's read, vread and history, and the searches' ids."""
    seen: dict[str, object] = {}
    for path in ("HealthcareService/20", "HealthcareService/21", "HealthcareService/6", "PractitionerRole/20",
                 "Practitioner/20"):
        seen[path] = (client.get(f"/fhir/{path}", headers=headers).status_code,
                      client.get(f"/fhir/{path}/_history/1", headers=headers).status_code,
                      client.get(f"/fhir/{path}/_history", headers=headers).status_code)
    for rtype, ids in (("HealthcareService", {"20", "21", "6"}), ("PractitionerRole", {"20"}),
                       ("Practitioner", {"20"})):
        searched = client.get(f"/fhir/{rtype}?_count=100", headers=headers).json()
        walked = client.get(f"/fhir/{rtype}/_history?_count=100", headers=headers).json()
        seen[rtype] = ({rid for _, rid in entries(searched)} & ids,
                       {e["fullUrl"].rsplit("/", 1)[1] for e in walked.get("entry", ())} & ids)
    return seen


SEEN = (200, 200, 200)
UNSEEN = (404, 404, 404)


# (the account whose token asks, before the purge, after it)
@pytest.mark.parametrize(("account", "before", "after"), [
    pytest.param("default", {
        "HealthcareService/20": UNSEEN, "HealthcareService/21": SEEN, "HealthcareService/6": UNSEEN,
        "PractitionerRole/20": UNSEEN, "Practitioner/20": UNSEEN,
        "HealthcareService": ({"21"}, {"21"}), "PractitionerRole": (set(), set()), "Practitioner": (set(), set()),
    }, {
        # the partner's rows stay out of sight; a row at no Location is the only account's
        "HealthcareService/20": UNSEEN, "HealthcareService/21": SEEN, "HealthcareService/6": SEEN,
        "PractitionerRole/20": UNSEEN, "Practitioner/20": UNSEEN,
        "HealthcareService": ({"21", "6"}, {"21", "6"}), "PractitionerRole": (set(), set()),
        "Practitioner": (set(), set()),
    }, id="the-account-left-never-gets-the-purged-accounts-rows"),
    pytest.param("partner", {
        "HealthcareService/20": SEEN, "HealthcareService/21": SEEN, "HealthcareService/6": UNSEEN,
        "PractitionerRole/20": SEEN, "Practitioner/20": SEEN,
        "HealthcareService": ({"20", "21"}, {"20", "21"}), "PractitionerRole": ({"20"}, {"20"}),
        "Practitioner": ({"20"}, {"20"}),
    }, {
        "HealthcareService/20": UNSEEN, "HealthcareService/21": UNSEEN, "HealthcareService/6": UNSEEN,
        "PractitionerRole/20": UNSEEN, "Practitioner/20": UNSEEN,
        "HealthcareService": (set(), set()), "PractitionerRole": (set(), set()), "Practitioner": (set(), set()),
    }, id="the-purged-account-sees-nothing"),
])
def test_a_purge_hands_no_row_of_a_provider_without_partitions_to_the_account_left(
        api: tuple[TestClient, ServerContext], account: str, before: dict[str, object],
        after: dict[str, object]) -> None:
    client, ctx = api
    headers = bearer(ctx.settings, account=account)
    assert _seen(client, headers) == before
    with ctx.db.begin() as conn:
        remove_account(conn, "partner", force=True, now=NOW + timedelta(days=2), purge=True)
    ctx.freshness.expire()
    assert _seen(client, headers) == after
