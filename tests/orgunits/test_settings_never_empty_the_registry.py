"""Issue 38 item 10: settings that would empty the registry are refused, and a token naming an account that is no
more is told so. `auth.default_account: defualt` (a typo): check-config fails, serve refuses, token warns, and no token
ever gets an empty 200 for it. After `accounts rename default kenya`, a token still claiming `default` gets 403 naming
the rename (and `serve`/`check-config` name it when auth.default_account still says `default`). On SQLite and
PostgreSQL."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.operator import LAKELAND_UNITS, Operator, operator, settings_path

__all__ = ["operator", "settings_path"]  # fixtures


def with_default_account(operator: Operator, account: str) -> Operator:
    text = operator.settings_path.read_text(encoding="utf-8")
    path = operator.settings_path.with_name("settings-default-account.yaml")
    path.write_text(text.replace("auth:\n", f"auth:\n  default_account: {account}\n"), encoding="utf-8")
    return Operator(path, operator.url, operator.capsys)


@pytest.mark.parametrize("account, words", [
    pytest.param("defualt", "auth.default_account names 'defualt', which is no account of this database (accounts: "
                 "default); a typo of 'default'?: every token without an account claim would see an empty server",
                 id="a-typo"),
    pytest.param("default", "auth.default_account names account 'default', which was renamed 'kenya' (orgunit-fhir "
                 "accounts rename): tokens without an account claim would be refused; set it to the account's name "
                 "now", id="renamed"),
])
def test_a_default_account_naming_no_account_fails_check_config_and_serve(operator: Operator, account: str,
                                                                         words: str) -> None:
    operator.load_lakeland()
    if account == "default":
        operator.ok("accounts", "rename", "default", "kenya")
    configured = with_default_account(operator, account)
    status, printed, _ = configured.printed("check-config")
    assert status == 1 and f"FAIL  {words}" in printed, printed
    status, said = configured.run("serve", "--port", "8791")
    assert status == 2 and words in said, said  # refused before listening
    status, said = configured.run("token")
    assert status == 0 and words in said, said


def test_a_default_account_that_exists_passes(operator: Operator) -> None:
    operator.load_lakeland()
    configured = with_default_account(operator, "default")
    printed = configured.printed("check-config")[1]
    assert "ok    auth.default_account 'default': an account of the database" in printed


def test_a_token_claiming_a_renamed_account_is_told_never_served_empty(operator: Operator) -> None:
    operator.load_lakeland()
    operator.load_lakeland("--account", "partner")  # tokens without the claim keep seeing 'default' (recorded)
    assert "note: this token is refused (403): account 'sl' was renamed" not in operator.ok("token", "--account",
                                                                                          "default")
    operator.ok("accounts", "rename", "partner", "sl")
    said = operator.ok("token", "--account", "partner")
    assert "note: this token is refused (403): account 'partner' was renamed 'sl'" in said
    with operator.consumer(account="partner") as client:
        answer = client.get("/fhir/Location", params={"_summary": "count"})
        assert answer.status_code == 403, answer.text
        assert "the token names account 'partner', which was renamed 'sl'" in answer.text
        assert client.get("/fhir/Location/1").status_code == 403
    with operator.consumer(account="sl") as client:
        assert client.get("/fhir/Location", params={"_summary": "count"}).json()["total"] == LAKELAND_UNITS
    operator.load_lakeland("--account", "partner", "--allow-duplicate-source")  # the name is an account again
    with operator.consumer(account="partner") as client:
        assert client.get("/fhir/Location", params={"_summary": "count"}).json()["total"] == LAKELAND_UNITS


def test_a_removed_account_is_listed_as_removed(operator: Operator, tmp_path: Path) -> None:
    """A token claiming a removed account is not refused: it receives the account's deletions (410 on read, a
    DELETE in _history), so that its copy converges; `accounts list` says the account is removed."""
    operator.load_lakeland()
    operator.load_lakeland("--account", "partner", "--allow-duplicate-source")
    operator.ok("accounts", "remove", "partner", "--force")
    listed = operator.accounts()
    assert listed["partner"][:4] == ["1", "0", "0", "removed"] and listed["default"] == ["1", "34", "34"]
    assert tmp_path.exists()
