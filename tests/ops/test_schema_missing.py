"""A server whose database lacks a table it reads (a plugin enabled and `migrate` not run: `serve` refuses to
start so, but an embedder's app does not) answers 503 saying the schema is behind and what to run, never the
"try again shortly" of a database out of reach, which would have clients retry forever."""
from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.contract.context import installed
from server.engine.context import create_context
from tests.support.contexts import SECRET, bearer, make_settings, migrate
from tests.support.proof import PLUGINS, SITE


@pytest.mark.parametrize("path", ["/fhir/HealthcareService", "/fhir/Location", "/fhir/Location/1"])
def test_a_table_missing_is_a_schema_behind_not_a_transient_failure(backend_url: str, tmp_path: Path,
                                                                    path: str) -> None:
    with installed([SITE]):
        without = make_settings(backend_url, tmp_path, auth={"secret": SECRET},
                                plugins={"healthcare_services": {"enabled": False}})
        ctx = create_context(without)
        migrate(ctx.db, without)  # the engine's and the org units' chains, not the services'
        settings = make_settings(backend_url, tmp_path, auth={"secret": SECRET}, plugins=PLUGINS)
        with TestClient(create_app(settings), base_url="http://testserver") as api:
            answer = api.get(path, headers=bearer(settings))
    assert answer.status_code == 503, answer.text
    diagnostics = answer.json()["issue"][0]["diagnostics"]
    assert "schema is behind" in diagnostics and "orgunit-fhir migrate" in diagnostics
    assert "try again shortly" not in diagnostics and "retry-after" not in answer.headers
