"""The proof of issue 13: a third-party provider package (tests/proof/site/healthcare_services) written only
against `from server import ...`, found through its entry point, with its own tables and migration chain, a load
format and a command, a versioned resource, a multi-valued reference with _include, and scoping through a
reference to Location. It also passes the contract suite (tests/contract)."""
from __future__ import annotations

import argparse
import ast
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import server
from server.access.mint import mint_token
from server.cli.data import load_call
from server.contract.answers import entries
from server.contract.context import contract_context, installed
from server.engine.context import ServerContext
from server.declare.registry import Registry
from server.extensions import load_extensions
from server.declare.progress import Progress
from server.plugins import available_plugins, get_plugin_manager
from server.errors import ConfigError
from server.settings import parse_settings
from plugins.orgunits.contract_samples import SUBJECT as ORGUNITS
from tests.proof.contract_samples import SUBJECT as PROOF
from tests.support.fixtures import client_fixture, context_fixture
from tests.support.live import CLI, _env
from tests.support.proof import PLUGINS, SERVICES, SERVICES_UPDATE, SITE

PACKAGE = SITE / "healthcare_services"


def _imports(path: Path) -> Iterator[tuple[str, list[str]]]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield node.module or "", [alias.name for alias in node.names]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_package_imports_only_the_public_surface(path: Path) -> None:
    for module, names in _imports(path):
        assert module.split(".")[0] != "plugins", module
        if module.split(".")[0] == "server":
            assert module == "server" and set(names) <= set(server.__all__), (module, names)


def test_found_through_its_entry_point_and_toggled_by_settings(tmp_path: Path) -> None:
    with installed([SITE]):
        assert available_plugins()["healthcare_services"] == "healthcare_services.provider"
        for enabled in (True, False):
            settings = parse_settings({"plugins": {"healthcare_services": {"enabled": enabled}}})
            registry = Registry.collect(get_plugin_manager(settings), settings)
            extensions = load_extensions(settings)
            assert ("HealthcareService" in registry.providers) is enabled
            assert ("healthcare_services" in [c.name for c in extensions.schema.chains]) is enabled
            assert ("services-json" in extensions.load_formats, "services" in extensions.commands) == (enabled, enabled)


def test_scoped_through_a_type_nobody_serves_fails_loudly(tmp_path: Path) -> None:
    """HealthcareService is seen through its Locations: with the location plugin disabled it would serve nothing,
    silently. Start-up and check-config refuse it instead, naming both."""
    with installed([SITE]):
        settings = parse_settings({"plugins": {"healthcare_services": {"enabled": True}, "location": False}})
        with pytest.raises(ConfigError, match=r"healthcare_services: HealthcareService is scoped through Location"):
            Registry.collect(get_plugin_manager(settings), settings)
        path = tmp_path / "settings.yaml"
        path.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\nplugins:\n  healthcare_services:\n"
                        f"    enabled: true\n  location: false\n", encoding="utf-8")
        env = {**_env(), "PYTHONPATH": os.pathsep.join([_env()["PYTHONPATH"], str(SITE)])}
        done = subprocess.run([*CLI, "check-config", "--settings", str(path), "--database",
                               f"sqlite:///{tmp_path / 'none.db'}"], capture_output=True, text=True, env=env,
                              timeout=300)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "FAIL  plugins and auth: plugin healthcare_services: HealthcareService is scoped through Location" \
            in done.stdout


ctx = context_fixture(lambda url, var: contract_context(url, var, (ORGUNITS, PROOF)))
api = client_fixture(authorized=True)


def _get(api: TestClient, url: str, **params: Any) -> dict[str, Any]:
    answer = api.get(url, params=params)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_its_own_migration_chain_is_at_its_head(ctx: ServerContext) -> None:
    with ctx.db.connect() as conn:
        assert ctx.extensions.schema.current(conn)["healthcare_services"] == "hs0003"


def test_loading_the_same_file_again_changes_nothing(ctx: ServerContext) -> None:
    fmt = ctx.extensions.load_formats["services-json"]
    report = fmt.load(load_call(ctx.settings, ctx.db, str(SERVICES_UPDATE), argparse.Namespace(), Progress("load")))
    assert (report.inserted, report.updated, report.unchanged, report.deleted) == (0, 0, 7, 0)


def test_each_change_is_a_version(api: TestClient) -> None:
    first, second = (_get(api, f"/fhir/HealthcareService/2/_history/{v}") for v in (1, 2))
    assert first["name"] == "Vaccination Boromo" and first["location"] == [{"reference": "Location/10"}]
    assert second["name"] == "Vaccination et PEV Boromo"
    assert second["location"] == [{"reference": "Location/10"}, {"reference": "Location/20"}]
    history = _get(api, "/fhir/HealthcareService/7/_history")
    assert [e["request"]["method"] for e in history["entry"]] == ["DELETE", "POST"]
    assert api.get("/fhir/HealthcareService/7").status_code == 410


@pytest.mark.parametrize(("value", "found"), [
    pytest.param("Location/20", {"1", "2"}, id="either-location"),
    pytest.param("3", {"3", "4"}, id="bare-id"),
    pytest.param("Location/32", set(), id="deleted-service-left-out"),
    pytest.param("Location/3,Location/10", {"2", "3", "4"}, id="or"),
])
def test_search_by_a_multi_valued_reference(api: TestClient, value: str, found: set[str]) -> None:
    bundle = _get(api, "/fhir/HealthcareService", location=value)
    assert {rid for _, rid in entries(bundle)} == found and bundle["total"] == len(found)


def test_include_and_revinclude_over_the_side_table(api: TestClient) -> None:
    forward = _get(api, "/fhir/HealthcareService", _id="1,4", _include="HealthcareService:location")
    assert sorted(entries(forward, "include")) == [("Location", "20"), ("Location", "3"), ("Location", "30")]
    back = _get(api, "/fhir/Location", _id="20", _revinclude="HealthcareService:location")
    assert sorted(entries(back, "include")) == [("HealthcareService", "1"), ("HealthcareService", "2")]
    both = _get(api, "/fhir/HealthcareService", _id="5", _include="HealthcareService:organization")
    assert entries(both, "include") == [("Organization", "1")]


def test_a_subtree_token_includes_only_the_locations_it_sees(api: TestClient, ctx: ServerContext) -> None:
    headers = {"Authorization": f"Bearer {mint_token(ctx.settings, roots=['Location/10'])}"}
    bundle = api.get("/fhir/HealthcareService", params={"_id": "4", "_include": "HealthcareService:location"},
                     headers=headers).json()
    assert entries(bundle) == [("HealthcareService", "4")]
    assert entries(bundle, "include") == [("Location", "30")]  # Location/3 is outside the subtree


@pytest.fixture
def settings_file(tmp_path: Path) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\nplugins:\n  healthcare_services:\n    enabled: true\n",
                    encoding="utf-8")
    return path


def _cli(*args: str, settings: Path, database: str) -> str:
    env = {**_env(), "PYTHONPATH": os.pathsep.join([_env()["PYTHONPATH"], str(SITE)])}
    done = subprocess.run([*CLI, *args, "--settings", str(settings), "--database", database], check=False,
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_the_load_format_and_the_command_on_the_command_line(settings_file: Path, database_url: str) -> None:
    assert PLUGINS["healthcare_services"]["enabled"]
    assert "8 inserted, 0 updated, 0 unchanged" in _cli("load", "services-json", str(SERVICES), settings=settings_file,
                                                        database=database_url)
    assert "services: 8 (7 active), 0 deleted, 9 location links" in _cli("services", "summary",
                                                                         settings=settings_file, database=database_url)
    assert "0 inserted, 2 updated, 5 unchanged, 1 deleted" in _cli(
        "load", "services-json", str(SERVICES_UPDATE), settings=settings_file, database=database_url)
    assert "services: 7 (6 active), 1 deleted, 10 location links" in _cli("services", "summary",
                                                                         settings=settings_file, database=database_url)


def _summary(answer: Any) -> dict[str, Any]:
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["resourceType"] == "Parameters"
    out: dict[str, Any] = {}
    for p in body["parameter"]:
        if p["name"] == "category":
            out.setdefault("category", {})[p["part"][0]["valueCode"]] = p["part"][1]["valueInteger"]
        else:
            out[p["name"]] = p["valueInteger"]
    return out


@pytest.mark.parametrize(("claims", "expected"), [
    # the whole account: service 6, at no Location, too (issue 36)
    pytest.param({}, {"total": 7, "active": 6, "category": {"14": 1, "17": 3, "27": 1, "35": 2}}, id="account"),
    pytest.param({"roots": ["Location/10"]}, {"total": 4, "active": 4, "category": {"17": 2, "35": 2}}, id="subtree"),
    pytest.param({"account": "elsewhere"}, {"total": 0, "active": 0}, id="another-account"),
])
def test_an_operation_with_its_own_handler_keeps_to_the_callers_scope(api: TestClient, ctx: ServerContext,
                                                                      claims: dict[str, Any],
                                                                      expected: dict[str, Any]) -> None:
    headers = {"Authorization": f"Bearer {mint_token(ctx.settings, **claims)}"}
    assert _summary(api.get("/fhir/HealthcareService/$summary", headers=headers)) == expected
    assert _summary(api.get("/fhir/HealthcareService/$summary/", params={"_format": "json"}, headers=headers)) \
        == expected


@pytest.mark.parametrize(("url", "headers", "status"), [
    pytest.param("/fhir/HealthcareService/1/$summary", {}, 404, id="type-level-only"),
    pytest.param("/fhir/HealthcareService/$nothing", {}, 404, id="unknown-operation"),
    pytest.param("/fhir/Location/$children", {}, 404, id="search-operation-needs-an-instance"),
    pytest.param("/fhir/HealthcareService/$summary?x=1", {"Prefer": "handling=strict"}, 400, id="strict"),
])
def test_operation_errors(api: TestClient, url: str, headers: dict[str, str], status: int) -> None:
    answer = api.get(url, headers=headers)
    assert answer.status_code == status and answer.json()["resourceType"] == "OperationOutcome", answer.text


def test_an_operation_answers_in_xml_too(api: TestClient) -> None:
    answer = api.get("/fhir/HealthcareService/$summary", params={"_format": "xml"})
    assert answer.status_code == 200 and "<Parameters xmlns=\"http://hl7.org/fhir\">" in answer.text


def _directory(answer: Any) -> tuple[int, list[str], set[str]]:
    assert answer.status_code == 200, answer.text
    bundle = answer.json()
    assert bundle["type"] == "searchset"
    return bundle["total"], [e["resource"]["id"] for e in bundle.get("entry", ())], \
        {link["relation"] for link in bundle["link"]}


@pytest.mark.parametrize(("claims", "total"), [
    pytest.param({}, 7, id="account"),
    pytest.param({"roots": ["Location/10"]}, 4, id="subtree"),
    pytest.param({"account": "elsewhere"}, 0, id="another-account"),
])
def test_a_system_level_operation_of_the_package_pages_what_the_caller_sees(api: TestClient, ctx: ServerContext,
                                                                            claims: dict[str, Any], total: int) -> None:
    """`[base]/$service-directory` (tests/proof/site/healthcare_services/directory.py): declared by the package,
    answered, paged and scoped by the engine; no engine file names it."""
    headers = {"Authorization": f"Bearer {mint_token(ctx.settings, **claims)}"}
    everything = _directory(api.get("/fhir/$service-directory", headers=headers))
    assert everything[0] == total and len(everything[1]) == total
    pages: list[str] = []
    for skip in range(0, total, 2):
        found, ids, links = _directory(api.get("/fhir/$service-directory", params={"_count": 2, "_skip": skip},
                                               headers=headers))
        assert found == total and ("next" in links) is (skip + 2 < total)
        pages += ids
    assert pages == everything[1]
    for rid in everything[1]:
        assert api.get(f"/fhir/HealthcareService/{rid}", headers=headers).status_code == 200


@pytest.mark.parametrize(("scope", "status"), [
    pytest.param("system/HealthcareService.r", 200, id="read"),
    pytest.param("system/*.read", 200, id="v1-every-type"),
    pytest.param("system/HealthcareService.s", 403, id="search-only"),
    pytest.param("system/Location.rs", 403, id="another-type"),
])
def test_the_system_level_operation_needs_the_scope_it_declares(api: TestClient, ctx: ServerContext, scope: str,
                                                                status: int) -> None:
    token = mint_token(ctx.settings, extra={"scope": f"{scope} {ctx.settings.auth.permission}"})
    answer = api.get("/fhir/$service-directory", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == status, answer.text
    if status == 403:
        assert "system/HealthcareService.r" in answer.json()["issue"][0]["diagnostics"]


def test_the_system_level_operation_is_in_the_capability_statement(api: TestClient) -> None:
    listed = {o["name"]: o["definition"] for o in api.get("/fhir/metadata").json()["rest"][0]["operation"]}
    assert listed["service-directory"] == "https://healthcare-services.example.org/OperationDefinition/service-directory"
