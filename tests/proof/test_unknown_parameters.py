"""Issue 41 item 4: a search parameter the server does not know (a removed one: `Practitioner?location=` gave way to
`_has:PractitionerRole:practitioner:location=`) is refused by default (fhir.unknown_parameters: refuse), naming
it, rather than answering the whole directory; `Prefer: handling=lenient` or `ignore` answer without it, the
Bundle's warning entry kept. A `_` name FHIR does not define (fhirpy's `_totalMethod`) is a result control, never a
filter: ignored with the warning. Both backends, over the proof package's health workers."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from starlette.testclient import TestClient

from plugins.orgunits.contract_samples import SUBJECT as ORGUNITS
from server.app import create_app
from server.contract.context import contract_context, installed
from server.engine.context import ServerContext
from server.errors import ConfigError
from server.settings import parse_settings
from tests.proof.contract_samples import SUBJECT as PROOF
from tests.support.contexts import bearer
from tests.support.proof import SITE


@pytest.fixture(scope="module")
def ctx(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerContext]:
    with contract_context(backend_url, tmp_path_factory.mktemp("var"), (ORGUNITS, PROOF)) as made:
        yield made


@pytest.fixture(scope="module")
def clients(ctx: ServerContext) -> Iterator[dict[str, TestClient]]:
    made: dict[str, TestClient] = {}
    with installed([SITE]):
        for setting in ("refuse", "ignore"):
            settings = replace(ctx.settings, fhir=replace(ctx.settings.fhir, unknown_parameters=setting))
            client = TestClient(create_app(settings, db=ctx.db), base_url="http://testserver")
            client.headers.update(bearer(settings))
            made[setting] = client.__enter__()
        yield made
        for client in made.values():
            client.__exit__(None, None, None)


def _outcomes(bundle: dict[str, Any]) -> list[dict[str, Any]]:
    return [e["resource"] for e in bundle.get("entry", ()) if e["search"]["mode"] == "outcome"]


def _matches(bundle: dict[str, Any]) -> int:
    return sum(1 for e in bundle.get("entry", ()) if e["search"]["mode"] == "match")


@pytest.mark.parametrize("setting, prefer, status", [
    pytest.param("refuse", None, 400, id="refuse-default"),
    pytest.param("refuse", "handling=lenient", 200, id="refuse-lenient"),
    pytest.param("refuse", "handling=strict", 400, id="refuse-strict"),
    pytest.param("ignore", None, 200, id="ignore"),
    pytest.param("ignore", "handling=lenient", 200, id="ignore-lenient"),
    pytest.param("ignore", "handling=strict", 400, id="ignore-strict"),
])
def test_a_removed_parameter_never_answers_the_whole_directory_unasked(clients: dict[str, TestClient], setting: str,
                                                                       prefer: str | None, status: int) -> None:
    answer = clients[setting].get("/fhir/Practitioner", params={"location": "657"},
                                  headers={"Prefer": prefer} if prefer else {})
    assert answer.status_code == status, answer.text
    if status == 400:
        issue = answer.json()["issue"][0]
        assert "unknown search parameter 'location' for Practitioner" in issue["diagnostics"]
        return
    bundle = answer.json()
    assert _matches(bundle) == 4  # every practitioner: not filtered, and the Bundle says so
    [outcome] = _outcomes(bundle)
    assert outcome["issue"][0]["severity"] == "warning" and "location" in outcome["issue"][0]["diagnostics"]


@pytest.mark.parametrize("setting", ["refuse", "ignore"])
def test_another_servers_result_control_is_ignored_with_the_warning(clients: dict[str, TestClient],
                                                                    setting: str) -> None:
    """fhirpy's `.count()` sends `_totalMethod=count` (an Aidbox control): not a filter, so not refused."""
    answer = clients[setting].get("/fhir/Practitioner", params={"_totalMethod": "count", "name": "claire"})
    assert answer.status_code == 200, answer.text
    assert _matches(answer.json()) == 1 and "_totalMethod" in _outcomes(answer.json())[0]["issue"][0]["diagnostics"]


@pytest.mark.parametrize("param", ["_filter", "_text", "_tag", "_list"])
def test_a_fhir_filter_the_server_lacks_is_refused(clients: dict[str, TestClient], param: str) -> None:
    assert clients["refuse"].get("/fhir/Practitioner", params={param: "x"}).status_code == 400


@pytest.mark.parametrize("setting, words", [("refuse", "refused (400 naming it) unless Prefer: handling=lenient"),
                                            ("ignore", "ignored (a warning OperationOutcome")])
def test_the_capability_statement_says_which(clients: dict[str, TestClient], setting: str, words: str) -> None:
    assert words in clients[setting].get("/fhir/metadata").json()["rest"][0]["documentation"]


def test_an_unknown_setting_is_refused() -> None:
    with pytest.raises(ConfigError, match="fhir.unknown_parameters must be refuse or ignore"):
        parse_settings({"fhir": {"unknown_parameters": "warn"}})
