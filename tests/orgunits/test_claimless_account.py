"""Issue 36, item 1: the account a token without an account claim sees is recorded, not derived. Set by the first data
source, moved by `accounts rename`, kept when that account is removed or purged: its tokens then get 403 naming it,
never the next tenant's data; `remove` (dry run too), `load`, `token` and `serve` say which tokens change. Played
through the command line in process, with the same token bytes before and after and no restart, on both backends."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from plugins.orgunits.claimless import recorded
from server.cli import serve
from server.contract.context import installed
from server.engine.context import create_context
from server.settings import load_settings
from server.storage.db import create_db_engine
from tests.support.bulk import ASYNC
from tests.support.operator import (
    DHIS2_SAMPLE,
    LAKELAND,
    LAKELAND_CSV,
    LAKELAND_UNITS,
    Operator,
    operator,
    settings_path,
)
from tests.support.proof import SITE

__all__ = ["operator", "settings_path"]  # fixtures

DEMO_UNITS = 20
SL_UNITS = 32  # tests/fixtures/dhis2_sierra_leone_sample.json
REFUSED = "account 'default', which tokens without an account claim see, was removed"
DEMO = ("demo", "--size", str(DEMO_UNITS))
SL_SAMPLE = ("load", "dhis2", str(DHIS2_SAMPLE), "--account", "sl-sample")
LAKELAND_DEFAULT = ("load", "mapped", str(LAKELAND_CSV), "--mapping", str(LAKELAND))
PURGE_DEMO = ("data-sources", "remove", "Demo", "--account", "default", "--force", "--purge")

# what the claimless token read of sl-sample after the purge: each (path, headers); {sl} is a unit of sl-sample
READS: dict[str, tuple[str, dict[str, str]]] = {
    "location-search": ("/fhir/Location", {}),
    "location-read": ("/fhir/Location/{sl}", {}),
    "location-history": ("/fhir/Location/_history", {}),
    "organization-search": ("/fhir/Organization", {}),
    "type-code-system": ("/fhir/CodeSystem/org-unit-type", {}),
    "export": ("/fhir/$export", ASYNC),
}


def _two_accounts(operator: Operator) -> None:
    """The issue's server: Demo (account default, the first), then DHIS2 (account sl-sample)."""
    operator.ok(*DEMO)
    operator.ok(*SL_SAMPLE)


def _total(client: TestClient) -> int:
    answer = client.get("/fhir/Location", params={"_summary": "count"})
    assert answer.status_code == 200, answer.text
    return int(answer.json()["total"])


def _recorded(operator: Operator) -> str | None:
    engine = create_db_engine(load_settings(operator.settings_path, operator.url))
    try:
        with engine.connect() as conn:
            return recorded(conn)
    finally:
        engine.dispose()


def _set_default_account(operator: Operator, account: str) -> None:
    text = operator.settings_path.read_text(encoding="utf-8")
    operator.settings_path.write_text(text.replace("auth:\n", f"auth:\n  default_account: {account}\n"),
                                      encoding="utf-8")


@pytest.mark.parametrize("undo", [
    pytest.param(PURGE_DEMO, id="data-source-purge"),
    pytest.param(("accounts", "remove", "default", "--force", "--purge"), id="account-purge"),
])
def test_a_purge_never_hands_claimless_tokens_to_another_account(operator: Operator, undo: tuple[str, ...]) -> None:
    _two_accounts(operator)
    with operator.consumer(account="sl-sample") as partner:
        sl_ids = {e["resource"]["id"] for e in partner.get("/fhir/Location", params={"_count": 100}).json()["entry"]}
        assert len(sl_ids) == SL_UNITS
    sl = min(sl_ids)
    with operator.consumer() as client, operator.consumer(account="sl-sample") as partner:  # one token each throughout
        assert _total(client) == DEMO_UNITS and client.get(f"/fhir/Location/{sl}").status_code == 404
        said = operator.ok(*undo)
        assert "tokens without an account claim get 403 naming account 'default'" in said, said
        assert "tokens with the account claim 'default' see nothing" in said
        client.app.state.ctx.freshness.expire()  # a running server looks again within a second
        partner.app.state.ctx.freshness.expire()
        answers = {name: client.get(path.format(sl=sl), headers=headers) for name, (path, headers) in READS.items()}
        assert {name: (answer.status_code, answer.text[:200]) for name, answer in answers.items()
                if answer.status_code != 403 or REFUSED not in answer.json()["issue"][0]["diagnostics"]} == {}
        assert _total(partner) == SL_UNITS  # sl-sample's own tokens are untouched
    with operator.consumer(account="default") as named:
        assert _total(named) == 0


@pytest.mark.parametrize("undo", [
    pytest.param(("data-sources", "remove", "Demo", "--account", "default", "--force"), id="data-source-remove"),
    pytest.param(("accounts", "remove", "default", "--force"), id="account-remove"),
])
def test_a_removal_shows_claimless_tokens_its_deletions_never_another_account(operator: Operator,
                                                                              undo: tuple[str, ...]) -> None:
    """Removed (not purged), the account's deletions stay published to its tokens, claimless ones included: their
    copies drop its units (issue 37 item 2: a removal published no deletion to them); never sl-sample's data."""
    _two_accounts(operator)
    with operator.consumer(account="sl-sample") as partner:
        sl_ids = {e["resource"]["id"] for e in partner.get("/fhir/Location", params={"_count": 100}).json()["entry"]}
    with operator.consumer() as client, operator.consumer(account="default") as named:
        since = client.get("/fhir/Location/_history", params={"_count": 1}).json()["meta"]["lastUpdated"]
        said = operator.ok(*undo)
        assert ("tokens with the account claim 'default' and tokens without an account claim (they see this account) "
                "see its units as deleted") in said, said
        for consumer in (client, named):
            consumer.app.state.ctx.freshness.expire()
            assert _total(consumer) == 0
            assert consumer.get("/fhir/Location/1").status_code == 410
            assert consumer.get(f"/fhir/Location/{min(sl_ids)}").status_code == 404
            history = consumer.get("/fhir/Location/_history", params={"_since": since, "_count": 100}).json()
            gone = {e["request"]["url"].rsplit("/", 1)[1] for e in history["entry"]}
            assert {e["request"]["method"] for e in history["entry"]} == {"DELETE"}
            assert len(gone) == DEMO_UNITS and not gone & sl_ids


@pytest.mark.parametrize("path", [
    pytest.param("/fhir/HealthcareService", id="search"),
    pytest.param("/fhir/HealthcareService/9", id="read"),
    pytest.param("/fhir/HealthcareService/_history", id="history"),
    pytest.param("/fhir/HealthcareService/9/_history/1", id="vread"),
])
def test_a_third_party_type_scoped_through_location_answers_403_too(operator: Operator, tmp_path: Path,
                                                                     path: str) -> None:
    """The proof package (tests/proof/site): a service at one of sl-sample's units, which the token without the
    claim never saw, stays out of its reach after the purge."""
    text = operator.settings_path.read_text(encoding="utf-8")
    operator.settings_path.write_text(text + "plugins:\n  healthcare_services:\n    enabled: true\n", encoding="utf-8")
    with installed([SITE]):
        _two_accounts(operator)
        with operator.consumer(account="sl-sample") as partner:
            sl = partner.get("/fhir/Location", params={"_count": 1}).json()["entry"][0]["resource"]["id"]
        services = tmp_path / "services.json"
        services.write_text(json.dumps({"services": [{"id": 9, "name": "Clinique SL", "category": "17",
                                                      "organization": 2, "locations": [int(sl)]}]}), encoding="utf-8")
        operator.ok("load", "services-json", str(services))
        with operator.consumer() as client, operator.consumer(account="sl-sample") as partner:
            assert client.get(path).status_code in (200, 404) and "Clinique SL" not in client.get(path).text
            assert "Clinique SL" in partner.get(path).text
            operator.ok(*PURGE_DEMO)
            client.app.state.ctx.freshness.expire()
            answer = client.get(path)
            assert answer.status_code == 403 and REFUSED in answer.json()["issue"][0]["diagnostics"], answer.text


@pytest.mark.parametrize("before, argv, says, never", [
    pytest.param((), PURGE_DEMO,
                 ["purged data source default/Demo", "tokens with the account claim 'default' see nothing",
                  "tokens without an account claim get 403 naming account 'default', the account they see (recorded "
                  "when it was first loaded)", "auth.default_account"], ["if done"], id="purge-the-claimless-account"),
    pytest.param((), (*PURGE_DEMO, "--dry-run"),
                 ["would purge data source default/Demo", "if done: tokens with the account claim 'default' see "
                  "nothing", "if done: tokens without an account claim get 403 naming account 'default'"], [],
                 id="dry-run"),
    pytest.param((), ("accounts", "remove", "default", "--force", "--dry-run"),
                 ["would remove account 'default'", "if done: tokens with the account claim 'default' and tokens "
                  "without an account claim (they see this account) see its units as deleted",
                  "purged, tokens without an account claim get 403 naming it"], [], id="account-remove-dry-run"),
    pytest.param((), ("accounts", "remove", "sl-sample", "--force", "--purge"),
                 ["tokens with the account claim 'sl-sample' see nothing"], ["without an account claim"],
                 id="another-account"),
    pytest.param((("load", "dhis2", str(DHIS2_SAMPLE), "--account", "default", "--data-source", "Second"),),
                 ("data-sources", "remove", "Demo", "--account", "default", "--force", "--purge"),
                 ["tokens with the account claim 'default' and tokens without an account claim (they see this "
                  "account) keep seeing its other data source (Second)"], ["403", "see nothing"],
                 id="the-account-keeps-a-data-source"),
])
def test_a_removal_says_which_tokens_change(operator: Operator, before: tuple[tuple[str, ...], ...],
                                            argv: tuple[str, ...], says: list[str], never: list[str]) -> None:
    _two_accounts(operator)
    for command in before:
        operator.ok(*command)
    listed = operator.accounts()
    said = operator.ok(*argv)
    assert [words for words in says if words not in said] == [], said
    assert [words for words in never if words in said] == [], said
    if "--dry-run" in argv:
        assert operator.accounts() == listed and _recorded(operator) == "default"
        with operator.consumer() as client:
            assert _total(client) == DEMO_UNITS


@pytest.mark.parametrize("default_account, says, claimless_sees", [
    pytest.param("sl-sample", [], SL_UNITS, id="another-account"),
    pytest.param("default", ["tokens without an account claim see nothing either: auth.default_account names "
                             "'default'"], 0, id="the-purged-account"),
])
def test_auth_default_account_decides_for_tokens_without_the_claim(operator: Operator, default_account: str,
                                                                   says: list[str], claimless_sees: int) -> None:
    _two_accounts(operator)
    _set_default_account(operator, default_account)
    said = operator.ok(*PURGE_DEMO)
    assert [words for words in says if words not in said] == [] and "403" not in said, said
    with operator.consumer() as client:
        assert _total(client) == claimless_sees


@pytest.mark.parametrize("loads, first, says, claimless_sees", [
    pytest.param([DEMO, SL_SAMPLE], "default",
                 "tokens without an account claim still see account 'default', the first loaded", DEMO_UNITS,
                 id="demo-first"),
    pytest.param([SL_SAMPLE, LAKELAND_DEFAULT], "sl-sample",
                 "created account 'sl-sample' and its data source 'DHIS2': the first of this database, which tokens "
                 "without an account claim see", SL_UNITS, id="load-first"),
    pytest.param([(*SL_SAMPLE, "--dry-run"), LAKELAND_DEFAULT], "default",
                 "created account 'default' and its data source 'Lakeland MFL': the first of this database",
                 LAKELAND_UNITS, id="a-dry-run-records-nothing"),
])
def test_the_first_data_source_records_its_account(operator: Operator, loads: list[tuple[str, ...]], first: str,
                                                   says: str, claimless_sees: int) -> None:
    said = "\n".join(operator.ok(*argv) for argv in loads)
    assert says in said, said
    assert _recorded(operator) == first
    with operator.consumer() as client:
        assert _total(client) == claimless_sees


@pytest.mark.parametrize("before, rename, says, recorded_after, claimless_sees", [
    pytest.param((), ("default", "partner"), "tokens without an account claim keep seeing this data: 'partner' is now "
                 "the account recorded for them", "partner", DEMO_UNITS, id="the-claimless-account"),
    pytest.param((), ("sl-sample", "partner"), "tokens without an account claim are unchanged (they see account "
                 "'default')", "default", DEMO_UNITS, id="another-account"),
    pytest.param((PURGE_DEMO,), ("sl-sample", "partner"), "tokens without an account claim are unchanged: refused "
                 "(403), account 'default', the one recorded for them, holds no data source", "default", None,
                 id="another-account-after-the-purge"),
    pytest.param((PURGE_DEMO,), ("sl-sample", "default"), "tokens without an account claim now see this data: "
                 "'default' is the account recorded for them (its data sources were purged)", "default", SL_UNITS,
                 id="into-the-purged-claimless-account"),
])
def test_an_account_rename_moves_the_record(operator: Operator, before: tuple[tuple[str, ...], ...],
                                            rename: tuple[str, str], says: str, recorded_after: str,
                                            claimless_sees: int | None) -> None:
    _two_accounts(operator)
    for command in before:
        operator.ok(*command)
    with operator.consumer() as client:  # the same token bytes before and after
        said = operator.ok("accounts", "rename", *rename)
        assert says in said, said
        client.app.state.ctx.freshness.expire()
        if claimless_sees is None:
            assert client.get("/fhir/Location").status_code == 403
        else:
            assert _total(client) == claimless_sees
    assert _recorded(operator) == recorded_after


@pytest.mark.parametrize("account, says", [
    pytest.param("kenya", "tokens without an account claim get 403 naming account 'default', the first loaded, which "
                 "holds no data source", id="another-account"),
    pytest.param("default", "tokens without an account claim see it: the account recorded for them", id="it-again"),
])
def test_a_load_after_the_purge_says_what_tokens_without_the_claim_see(operator: Operator, account: str,
                                                                        says: str) -> None:
    _two_accounts(operator)
    operator.ok(*PURGE_DEMO)
    said = operator.load_lakeland("--account", account)
    assert says in said, said
    with operator.consumer() as client:
        answer = client.get("/fhir/Location", params={"_summary": "count"})
        assert (answer.status_code, answer.json().get("total")) == ((403, None) if account == "kenya" else (200, 34))


@pytest.mark.parametrize("before, says", [
    pytest.param((), "a token without --account sees account 'default', the first loaded", id="both-accounts"),
    pytest.param((PURGE_DEMO,), f"this token is refused (403): the token names no account and {REFUSED}",
                 id="the-first-purged"),
])
def test_token_says_what_a_token_without_account_sees(operator: Operator, before: tuple[tuple[str, ...], ...],
                                                      says: str) -> None:
    _two_accounts(operator)
    for command in before:
        operator.ok(*command)
    assert says in operator.ok("token")


def test_serve_prints_no_token_that_would_be_refused(operator: Operator, capsys: pytest.CaptureFixture[str]) -> None:
    _two_accounts(operator)
    operator.ok(*PURGE_DEMO)
    settings = load_settings(operator.settings_path, operator.url)
    ctx = create_context(settings)
    try:
        capsys.readouterr()
        serve._banner(settings, ctx, "127.0.0.1", 8000)
        printed = capsys.readouterr().out
    finally:
        ctx.db.dispose()
    if operator.url.startswith("postgresql"):  # a production log gets no token
        assert "from your identity provider" in printed
        return
    assert f"(no local token: the token names no account and {REFUSED}" in printed, printed
    assert "orgunit-fhir token --account NAME`, accounts: sl-sample" in printed and "valid for" not in printed
