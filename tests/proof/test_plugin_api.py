"""Issue 41 item 1: the plugin API carries a version; a package written against an older one runs with a warning
naming it while its old forms are kept, is refused naming it, the change and the migration note once they are not,
and a failure in its code is reported as its own (its name and frame), never as the server's bug.

The legacy package (tests/proof/legacy_site/legacy_services) is the proof package as it was before
`LoadFormat.load(call)` (git df50b28^), renamed so that it can sit beside the current one."""
from __future__ import annotations

import os
import subprocess
import types
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import server
from server.app import create_app
from server.contract.context import installed
from server.declare import api
from server.declare.extensions import LoadFormat, LoadReport
from server.errors import ConfigError
from server.extensions import Extensions
from server.plugins import blame, get_plugin_manager
from server.settings import parse_settings
from tests.support.contexts import bearer
from tests.support.live import CLI, _env
from tests.support.proof import SERVICES

LEGACY = Path(__file__).resolve().parent / "legacy_site"


def _plugin(version: object) -> types.ModuleType:
    module = types.ModuleType("some_plugin")
    if version is not None:
        module.PLUGIN_API = version  # type: ignore[attr-defined]
    return module


@pytest.mark.parametrize("version, refused", [
    pytest.param(api.PLUGIN_API, None, id="current"),
    pytest.param(None, None, id="unstated-is-1.0-kept-one-minor"),
    pytest.param("1.0", None, id="previous-minor-kept"),
    pytest.param("1.2", "needs a newer orgunit-fhir", id="newer-minor"),
    pytest.param("2.0", "needs a newer orgunit-fhir", id="newer-major"),
    pytest.param("0.9", "another major version", id="older-major"),
    pytest.param("1", "not a version `major.minor`", id="not-major-minor"),
    pytest.param("1.x", "not a version `major.minor`", id="not-digits"),
    pytest.param(1.1, r"1.1, not a string: write the version as one", id="a-number"),  # 1.10 would read as 1.1
    pytest.param(1, "= 1, not a string", id="a-whole-number"),
])
def test_a_plugin_is_checked_against_the_version_it_states(version: object, refused: str | None) -> None:
    if refused is None:
        found = api.compatibility("some_plugin", _plugin(version))
        assert found.stated is (version is not None)
        assert (api.LOAD_CALL in found.kept) is (found.version != api.PLUGIN_API)
    else:
        with pytest.raises(ConfigError, match=f"plugin some_plugin .*{refused}"):
            api.compatibility("some_plugin", _plugin(version))


def test_a_change_whose_old_form_is_gone_refuses_naming_the_change_and_its_migration(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The next minor version: the 1.1 forms are no longer kept, so a 1.0 plugin is refused with each note."""
    monkeypatch.setattr(api, "PLUGIN_API", "1.2")
    with pytest.raises(ConfigError) as raised:
        api.compatibility("some_plugin", _plugin("1.0"))
    text = str(raised.value)
    assert "plugin some_plugin was written for plugin API 1.0, this server's is 1.2" in text
    assert f"Migrating: {api.LOAD_CALL.migrating}" in text and "load(call)" in text


@pytest.mark.parametrize("load, old", [
    pytest.param(lambda engine, path, args, progress: LoadReport(), True, id="1.0-form"),
    pytest.param(lambda call: LoadReport(), False, id="load-call"),
    pytest.param(lambda call, extra=None: LoadReport(), False, id="load-call-with-option"),
])
def test_the_old_load_form_is_told_by_its_signature(load: object, old: bool) -> None:
    assert api.takes_old_load(load) is old  # type: ignore[arg-type]


class _StatesCurrentButLoadsOld:
    PLUGIN_API = api.PLUGIN_API

    @server.hookimpl
    def register_load_formats(self, settings: object) -> list[LoadFormat]:
        return [LoadFormat("old-form", "a format", lambda engine, path, args, progress: LoadReport())]


def test_a_plugin_stating_the_current_version_with_the_old_load_is_refused_at_start_up() -> None:
    settings = parse_settings({})
    pm = get_plugin_manager(settings, [("stale_plugin", _StatesCurrentButLoadsOld())])
    with pytest.raises(ConfigError, match=r"plugin stale_plugin: load format 'old-form' takes load\(engine, path, "
                                          r"args, progress\).*states 1\.1\. Migrating: take one parameter"):
        Extensions.collect(pm, settings)


def test_server_exports_its_plugin_api_version() -> None:
    assert server.PLUGIN_API == api.PLUGIN_API and "PLUGIN_API" in server.__all__


def _settings_file(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(f"server:\n  data_dir: {tmp_path / 'var'}\ndatabase:\n  url: {url}\n"
                    "plugins:\n  legacy_services: {enabled: true}\n", encoding="utf-8")
    return path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**_env(), "PYTHONPATH": os.pathsep.join([_env()["PYTHONPATH"], str(LEGACY)])}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=300)


def test_a_package_of_the_previous_api_runs_with_warnings_naming_it(backend_url: str, tmp_path: Path) -> None:
    """check-config warns (exit 0), naming the package and each migration note; `load` runs its old `load`
    through the shim with the same warning, and the services are served."""
    settings = _settings_file(tmp_path, backend_url)
    assert _cli("migrate", "--settings", str(settings)).returncode == 0
    checked = _cli("check-config", "--settings", str(settings))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    warned = [line for line in checked.stdout.splitlines() if line.startswith("WARN")]
    assert len(warned) == 2, checked.stdout
    assert all("plugin legacy_services (states no plugin API version: taken as 1.0)" in line for line in warned)
    assert f"Migrating: {api.STATED.migrating}" in warned[0]
    assert "(its load format 'services-json')" in warned[1] and f"Migrating: {api.LOAD_CALL.migrating}" in warned[1]
    assert _cli("demo", "--size", "50", "--settings", str(settings)).returncode == 0
    loaded = _cli("load", "services-json", str(SERVICES), "--settings", str(settings))
    assert loaded.returncode == 0, loaded.stderr
    assert "load services-json: 8 inserted" in loaded.stderr
    assert "plugin legacy_services" in loaded.stderr and "load(call)" in loaded.stderr
    with installed([LEGACY]), pytest.warns(DeprecationWarning, match="plugin legacy_services"):
        app = create_app(parse_settings({"server": {"data_dir": str(tmp_path / "var")}, "database": {"url": backend_url},
                                         "auth": {"secret": "x" * 32},
                                         "plugins": {"legacy_services": {"enabled": True}}}))
        with TestClient(app) as client:
            found = client.get("/fhir/HealthcareService", params={"_summary": "count"}, headers=bearer(app.state.ctx.settings))
            assert found.json()["total"] == 8, found.text


BROKEN = """PLUGIN_API = "1.1"
from server import LoadFormat, LoadReport, hookimpl


def _ratio(count):
    return 100 / count


def load(call):
    return LoadReport(inserted=_ratio(0))


@hookimpl
def register_load_formats(settings):
    return [LoadFormat("broken", "a format whose code fails", load)]
"""


def test_a_failure_in_a_plugins_code_names_the_plugin_and_its_frame(tmp_path: Path) -> None:
    """A load format whose own code raises: the command line names the plugin and its innermost frame, and does
    not call it a bug of the server."""
    site = tmp_path / "site"
    (site / "broken_plugin").mkdir(parents=True)
    (site / "broken_plugin" / "__init__.py").write_text(BROKEN, encoding="utf-8")
    (site / "broken_plugin-0.1.dist-info").mkdir()
    (site / "broken_plugin-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\n"
                                                                   "Version: 0.1\n", encoding="utf-8")
    (site / "broken_plugin-0.1.dist-info" / "entry_points.txt").write_text(
        "[orgunit_fhir]\nbroken_plugin = broken_plugin\n", encoding="utf-8")
    env = {**_env(), "PYTHONPATH": os.pathsep.join([_env()["PYTHONPATH"], str(site)])}
    done = subprocess.run([*CLI, "load", "broken", str(tmp_path), "--database", f"sqlite:///{tmp_path / 'db.sqlite'}"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1
    assert "a bug: please report it" not in done.stderr, done.stderr
    assert "plugin broken_plugin failed: ZeroDivisionError: division by zero (at " in done.stderr, done.stderr
    assert "broken_plugin/__init__.py:6 in _ratio" in done.stderr, done.stderr


def test_blame_finds_the_innermost_plugin_frame() -> None:
    def plugin_code() -> None:
        raise KeyError("x")

    try:
        plugin_code()
    except KeyError as exc:
        found = blame(exc, {__name__: "this_plugin"})
        assert found is not None and found.plugin == "this_plugin" and "in plugin_code" in found.frame
        assert blame(exc, {"elsewhere": "other"}) is None


def _site(tmp_path: Path, name: str, code: str) -> Path:
    """A package `name` installed in a directory of its own (its entry point `name`)."""
    site = tmp_path / f"site-{name}"
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text(code, encoding="utf-8")
    (site / f"{name}-0.1.dist-info").mkdir()
    (site / f"{name}-0.1.dist-info" / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
                                                             encoding="utf-8")
    (site / f"{name}-0.1.dist-info" / "entry_points.txt").write_text(f"[orgunit_fhir]\n{name} = {name}\n",
                                                                    encoding="utf-8")
    return site


@pytest.mark.parametrize("version, words", [
    pytest.param("2.0", "plugin future_plugin was written for plugin API 2.0, this server's is 1.1: it needs a newer "
                        "orgunit-fhir", id="newer"),
    pytest.param("one", "plugin future_plugin states PLUGIN_API = 'one', not a version", id="malformed"),
])
def test_check_config_refuses_an_incompatible_plugin_naming_it(tmp_path: Path, version: str, words: str) -> None:
    site = _site(tmp_path, "future_plugin", f'PLUGIN_API = "{version}"\n')
    env = {**_env(), "PYTHONPATH": os.pathsep.join([_env()["PYTHONPATH"], str(site)])}
    done = subprocess.run([*CLI, "check-config", "--database", f"sqlite:///{tmp_path / 'db.sqlite'}"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert words in done.stderr, done.stderr


BOOM = '''PLUGIN_API = "1.1"
from server import Operation, hookimpl


def _handler(call):
    return {"resourceType": "Parameters", "parameter": [{"name": "x", "valueInteger": 1 // 0}]}


@hookimpl
def register_operations(settings):
    return [Operation("boom", None, "fails", "http://example.org/OperationDefinition/boom", handler=_handler,
                      levels=frozenset({"system"}))]
'''


def test_a_request_failing_in_a_plugins_code_is_logged_naming_it(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    site = _site(tmp_path, "boom_plugin", BOOM)
    with installed([site]):
        settings = parse_settings({"server": {"data_dir": str(tmp_path / "var")},
                                   "database": {"url": f"sqlite:///{tmp_path / 'db.sqlite'}"},
                                   "auth": {"secret": "x" * 32}})
        app = create_app(settings)
        app.state.ctx.extensions.schema.upgrade(app.state.ctx.db)
        with TestClient(app, raise_server_exceptions=False) as client:
            answer = client.get("/fhir/$boom", headers=bearer(settings))
    assert answer.status_code == 500
    assert "plugin" not in answer.text  # the caller is told the request id only
    logged = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert any("plugin boom_plugin failed: ZeroDivisionError: integer division or modulo by zero (at " in line
               and "boom_plugin/__init__.py:6 in _handler" in line for line in logged), logged
