"""The plugin registry: entry points, settings toggles, start-up failures and every hook."""
from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pluggy
import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table
from starlette.testclient import TestClient

import plugins.orgunits.location
from server import ConfigError, ResourceProvider, SearchParam, StaticProvider, StringTarget, hookimpl
from server import hookspecs
from server.app import create_app
from server.access.mint import mint_token
from server.access.tokens import Principal
from server.engine.context import ServerContext, create_context
from server.errors import FhirError
from server.declare.interaction import Interaction
from server.plugins import available_plugins, get_plugin_manager
from server.access.tenancy import AccessScope
from server.settings import Settings
from tests.support.contexts import SECRET, make_settings


def settings_with(small_ctx: ServerContext, tmp_path: Path, **sections: Any) -> Settings:
    sections["auth"] = {"secret": SECRET, **sections.get("auth", {})}
    return make_settings(small_ctx.settings.database_url, tmp_path, **sections)


def client_for(settings: Settings, small_ctx: ServerContext, extra: list[tuple[str, object]] | None = None) -> TestClient:
    client = TestClient(create_app(settings, extra_plugins=extra or (), db=small_ctx.db))
    client.headers["Authorization"] = f"Bearer {mint_token(settings)}"
    return client


def test_location_is_loaded_through_the_entry_point_group(small_ctx: ServerContext) -> None:
    assert available_plugins()["location"] == "plugins.orgunits.location"
    assert small_ctx.pm.get_plugin("location") is plugins.orgunits.location
    assert list(small_ctx.registry.providers) == ["CodeSystem", "Location", "OperationDefinition", "Organization",
                                                  "StructureDefinition"]


def test_no_global_manager_at_import() -> None:
    import server.plugins as module

    assert not [v for v in vars(module).values() if v.__class__.__name__ == "PluginManager"]


def test_disabled_plugin_contributes_no_routes_and_no_capabilities(small_ctx: ServerContext, tmp_path: Path) -> None:
    settings = settings_with(small_ctx, tmp_path, plugins={"location": {"enabled": False}})
    client = client_for(settings, small_ctx)
    assert client.get("/fhir/Location").json()["issue"][0]["code"] == "not-supported"
    assert client.get("/fhir/Location/30").status_code == 404
    assert client.get("/fhir/Location/20/$children").status_code == 404
    statement = client.get("/fhir/metadata").json()
    assert "Location" not in [r["type"] for r in statement["rest"][0]["resource"]]
    every_off = {name: {"enabled": False} for name in ("location", "organization", "canonical")}
    bare = client_for(settings_with(small_ctx, tmp_path, plugins=every_off), small_ctx)
    assert "resource" not in bare.get("/fhir/metadata").json()["rest"][0]


@pytest.mark.parametrize("plugins_section, words", [
    pytest.param({"nosuch": {"enabled": True}}, "not installed", id="unknown-plugin"),
    pytest.param({"location": {"config": {"status_map": {"NEW": "open"}}}}, "plugin location is misconfigured", id="bad-status-map"),
    pytest.param({"location": {"config": {"physical_types": {"HF": "xx"}}}}, "xx", id="bad-physical-type"),
    pytest.param({"location": {"config": {"colour": "red"}}}, "colour", id="unknown-key"),
    pytest.param({"location": {"enabled": "yes"}}, "enabled", id="enabled-not-bool"),
    pytest.param({"location": {"settings": {}}}, "expected keys", id="wrong-section-key"),
])
def test_misconfigured_plugins_fail_at_start_up(small_ctx: ServerContext, tmp_path: Path,
                                                plugins_section: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        create_app(settings_with(small_ctx, tmp_path, plugins=plugins_section), db=small_ctx.db)


def test_plugin_config_overrides_the_mapping(small_ctx: ServerContext, tmp_path: Path) -> None:
    config = {"status_map": {"NEW": "active"}, "physical_types": {"HF": "si"}, "default_physical_type": "area"}
    client = client_for(settings_with(small_ctx, tmp_path, plugins={"location": {"config": config}}), small_ctx)
    dispensaire = client.get("/fhir/Location/32").json()  # NEW, HF
    assert dispensaire["status"] == "active"
    assert dispensaire["physicalType"]["coding"][0]["code"] == "si"
    assert client.get("/fhir/Location/20").json()["physicalType"]["coding"][0]["code"] == "area"
    assert [e["resource"]["id"] for e in client.get("/fhir/Location?status=active&_count=100").json()["entry"]] == \
        ["1", "2", "3", "10", "11", "20", "30", "32"]


class StrayHook:
    @hookimpl
    def no_such_hook(self, settings: Settings) -> None: ...


def test_stray_hook_implementation_fails_at_start_up(small_ctx: ServerContext, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no_such_hook"):
        get_plugin_manager(settings_with(small_ctx, tmp_path), [("stray", StrayHook())])


class DuplicateLocation:
    @hookimpl
    def register_resource_providers(self, settings: Settings) -> list[ResourceProvider]:
        return plugins.orgunits.location.register_resource_providers(settings)


def test_duplicate_resource_type_fails_at_start_up(small_ctx: ServerContext, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="already provided"):
        create_context(settings_with(small_ctx, tmp_path), [("dup", DuplicateLocation())], db=small_ctx.db)


class NamedProvider:
    def __init__(self, resource_type: str, static: bool) -> None:
        self.resource_type, self.static = resource_type, static

    @hookimpl
    def register_resource_providers(self, settings: Settings) -> list[ResourceProvider | StaticProvider]:
        if self.static:
            return [StaticProvider(self.resource_type, lambda: [])]
        return [ResourceProvider(self.resource_type, colours, colours.c.id, tuple(colours.c),
                                 lambda row: {"resourceType": self.resource_type, "id": str(row["id"])})]


@pytest.mark.parametrize(("resource_type", "static", "refused"), [
    pytest.param("Endpont", False, True, id="a-typo"),
    pytest.param("Organisation", True, True, id="a-typo-static"),
    pytest.param("HumanName", False, True, id="a-data-type"),
    pytest.param("Endpoint", False, False, id="a-resource-type"),
    pytest.param("Basic", True, False, id="a-resource-type-static"),
])
def test_a_provider_of_no_fhir_resource_type_fails_at_start_up(small_ctx: ServerContext, tmp_path: Path,
                                                               resource_type: str, static: bool,
                                                               refused: bool) -> None:
    """A misspelled type would be served under its own URL and listed in the CapabilityStatement, which no
    validator or client accepts (a platform-team walk of 2026-12-01)."""
    plugin = [("named", NamedProvider(resource_type, static))]
    if not refused:
        made = create_context(settings_with(small_ctx, tmp_path), plugin, db=small_ctx.db)
        assert resource_type in made.registry.providers
        return
    with pytest.raises(ConfigError, match=f"plugin named: '{resource_type}' is not a FHIR resource type"):
        create_context(settings_with(small_ctx, tmp_path), plugin, db=small_ctx.db)


class Rendering:
    def __init__(self, to_resource: Any) -> None:
        self.to_resource = to_resource

    @hookimpl
    def register_resource_providers(self, settings: Settings) -> list[ResourceProvider]:
        return [ResourceProvider("Basic", colours, colours.c.id, tuple(colours.c), self.to_resource,
                                 search_params=(SearchParam("name", "string",
                                                            (StringTarget(colours.c.norm, colours.c.name),), "Name"),))]


@pytest.mark.parametrize(("to_resource", "fault"), [
    pytest.param(lambda row: {"resourceType": "Basic", "id": str(row["id"])}, None, id="right"),
    pytest.param(lambda row: {"resourceType": "Organization", "id": str(row["id"])}, "gave 'Organization'",
                 id="another-type"),
    pytest.param(lambda row: {"resourceType": "Basic", "id": f"x{row['id']}"}, "gave id 'x1'", id="another-id"),
    pytest.param(lambda row: {"resourceType": "Basic"}, "gave id None", id="no-id"),
    pytest.param(lambda row: ["Basic"], "gave 'list'", id="not-an-object"),
])
def test_a_provider_rendering_a_wrong_resource_answers_500_and_is_logged(
        small_ctx: ServerContext, tmp_path: Path, caplog: pytest.LogCaptureFixture, to_resource: Any,
        fault: str | None) -> None:
    """What `to_resource` gives is published only as the resource of its type and row: never another type, or
    a search entry whose fullUrl names one id and its resource another (a platform-team walk of 2026-12-01)."""
    with small_ctx.db.begin() as conn:
        colours.create(conn, checkfirst=True)
        conn.execute(colours.delete())
        conn.execute(colours.insert(), [{"id": 1, "name": "Rouge", "norm": "rouge"}])
    client = client_for(settings_with(small_ctx, tmp_path), small_ctx, [("rendering", Rendering(to_resource))])
    for url in ("/fhir/Basic/1", "/fhir/Basic?name=rouge"):
        answer = client.get(url)
        if fault is None:
            assert answer.status_code == 200, answer.text
            continue
        assert answer.status_code == 500 and answer.json()["resourceType"] == "OperationOutcome", answer.text
        assert fault not in answer.text  # the provider's fault is the operator's to read, in the log
        assert any(fault in record.getMessage() or fault in (record.exc_text or "") or
                   (record.exc_info and fault in str(record.exc_info[1])) for record in caplog.records), url
        caplog.clear()


# -- a second provider in one small class: the promise made to platform teams --------------------

colours = Table("colour_test", MetaData(), Column("id", Integer, primary_key=True), Column("name", String),
                Column("norm", String))


class ColourProvider:
    @hookimpl
    def register_resource_providers(self, settings: Settings) -> list[ResourceProvider]:
        return [ResourceProvider(
            resource_type="Basic", table=colours, id_column=colours.c.id, columns=tuple(colours.c),
            to_resource=lambda row: {"resourceType": "Basic", "id": str(row["id"]),
                                     "code": {"text": row["name"]}},
            search_params=(SearchParam("name", "string", (StringTarget(colours.c.norm, colours.c.name),), "Colour"),),
        )]


def test_a_provider_declared_in_a_few_lines_gets_every_interaction(small_ctx: ServerContext, tmp_path: Path) -> None:
    with small_ctx.db.begin() as conn:
        colours.create(conn, checkfirst=True)
        conn.execute(colours.delete())
        conn.execute(colours.insert(), [{"id": 1, "name": "Rouge", "norm": "rouge"}, {"id": 2, "name": "Vert", "norm": "vert"}])
    client = client_for(settings_with(small_ctx, tmp_path), small_ctx, [("colours", ColourProvider())])
    assert client.get("/fhir/Basic/2").json()["code"]["text"] == "Vert"
    bundle = client.get("/fhir/Basic?name=ROU").json()
    assert bundle["total"] == 1 and bundle["entry"][0]["fullUrl"] == "http://testserver/fhir/Basic/1"
    types = [r["type"] for r in client.get("/fhir/metadata").json()["rest"][0]["resource"]]
    assert types[:2] == ["Basic", "CodeSystem"] and "Location" in types
    assert client.get("/fhir/Basic?name:exact=rouge").json()["total"] == 0


# -- the per-request hooks -------------------------------------------------------------------------

class DenyChildren:
    @hookimpl
    def authorize(self, principal: Principal, interaction: Interaction, settings: Settings) -> str | None:
        if interaction.operation == "children":
            return "children are not for this caller"
        return None


def test_authorize_hook_denial_is_403(small_ctx: ServerContext, tmp_path: Path) -> None:
    client = client_for(settings_with(small_ctx, tmp_path), small_ctx, [("deny", DenyChildren())])
    response = client.get("/fhir/Location/20/$children")
    assert response.status_code == 403 and "children are not for this caller" in response.text
    assert client.get("/fhir/Location/20").status_code == 200


class GroupScope:
    """An IdP that names districts in a `groups` claim ("district:10") instead of org_unit_roots."""

    @hookimpl
    def access_scope(self, principal: Principal, settings: Settings) -> AccessScope | None:
        groups = principal.claims.get("groups")
        if not isinstance(groups, list):
            return None  # the core default decides
        return AccessScope(roots=tuple(g.split(":", 1)[1] for g in groups if g.startswith("district:")))


def test_access_scope_hook_maps_other_claims_to_a_scope(small_ctx: ServerContext, tmp_path: Path) -> None:
    client = client_for(settings_with(small_ctx, tmp_path), small_ctx, [("groups", GroupScope())])
    scoped = {"Authorization": f"Bearer {mint_token(small_ctx.settings, extra={'groups': ['district:11']})}"}
    body = client.get("/fhir/Location", headers=scoped).json()
    assert [e["resource"]["id"] for e in body["entry"]] == ["11"] and body["total"] == 1
    assert client.get("/fhir/Location/10", headers=scoped).status_code == 404
    assert client.get("/fhir/Location").json()["total"] == 9  # no groups claim: the whole pyramid


class Teapot(FhirError):
    status, code = 409, "conflict"


class TranslateLookupError:
    @hookimpl
    def translate_exception(self, exception: BaseException, interaction: Interaction | None) -> FhirError | None:
        if isinstance(exception, LookupError):
            return Teapot(f"translated during {interaction.kind if interaction else '?'}")
        return None


def test_translate_exception_hook(small_ctx: ServerContext, tmp_path: Path) -> None:
    client = client_for(settings_with(small_ctx, tmp_path), small_ctx, [("translate", TranslateLookupError())])
    provider = client.app.state.ctx.registry.get("Location")
    original = provider.to_resource

    def explode(row: Any) -> dict[str, Any]:
        raise LookupError("x")

    object.__setattr__(provider, "to_resource", explode)
    try:
        response = client.get("/fhir/Location/32")  # rendered per request (no stored body: it closes in 2999)
    finally:
        object.__setattr__(provider, "to_resource", original)
    assert response.status_code == 409
    assert response.json()["issue"][0] == {"severity": "error", "code": "conflict", "diagnostics": "translated during read"}


class Publisher:
    @hookimpl
    def update_capability_statement(self, statement: dict[str, Any], settings: Settings) -> None:
        statement["publisher"] = "Ministère de la Santé"


def test_update_capability_statement_hook(small_ctx: ServerContext, tmp_path: Path) -> None:
    client = client_for(settings_with(small_ctx, tmp_path), small_ctx, [("publisher", Publisher())])
    assert client.get("/fhir/metadata").json()["publisher"] == "Ministère de la Santé"


def test_blocked_extra_plugin_is_not_registered(small_ctx: ServerContext, tmp_path: Path) -> None:
    settings = settings_with(small_ctx, tmp_path, plugins={"publisher": {"enabled": False}})
    client = client_for(settings, small_ctx, [("publisher", Publisher())])
    assert client.get("/fhir/metadata").json()["publisher"] != "Ministère de la Santé"


# -- documentation and a plugin from outside this repository ---------------------------------------

def _specified() -> pluggy.PluginManager:
    """A plugin manager holding the hook specifications of server.hookspecs and nothing else."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


HOOKSPECS = sorted(name for name, caller in vars(_specified().hook).items()
                   if isinstance(caller, pluggy.HookCaller) and caller.spec is not None)


def _test_plugins() -> Iterator[tuple[str, object]]:
    """Every module of the test packages, and every class defined in one (test plugins are either), by name."""
    root = Path(__file__).resolve().parents[1]
    for path in sorted(root.rglob("*.py")):
        if not all((folder / "__init__.py").is_file() for folder in path.parents if folder.is_relative_to(root)):
            continue  # not in a package of the tests: a third-party distribution the tests install (tests/proof/site)
        parts = path.relative_to(root.parent).with_suffix("").parts
        module = importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        yield module.__name__, module
        yield from ((f"{module.__name__}.{c.__qualname__}", c) for c in vars(module).values()
                    if inspect.isclass(c) and c.__module__ == module.__name__)


@pytest.fixture(scope="module")
def implemented() -> dict[str, list[str]]:
    """For each hook, the test plugins whose implementation pluggy accepts against its specification."""
    pm = _specified()
    for name, plugin in _test_plugins():
        pm.register(plugin, name)  # a wrong signature raises here: pluggy checks it against the specification
    return {hook: [impl.plugin_name for impl in getattr(pm.hook, hook).get_hookimpls()] for hook in HOOKSPECS}


def test_the_hookspecs_are_found() -> None:
    assert len(HOOKSPECS) >= 10 and "register_resource_providers" in HOOKSPECS and "access_scope" in HOOKSPECS


@pytest.mark.parametrize("name", HOOKSPECS)
def test_every_hookspec_is_documented_and_implemented_in_a_test(name: str, implemented: dict[str, list[str]]) -> None:
    spec = getattr(_specified().hook, name).spec
    assert spec is not None and inspect.getdoc(spec.function), f"the hookspec {name} has no docstring"
    readme = (Path(__file__).parents[2] / "plugins" / "README.md").read_text(encoding="utf-8")
    assert f"### {name}" in readme, f"plugins/README.md has no section for {name}"
    assert implemented[name], f"no test plugin implements the hook {name}"


THIRD_PARTY = '''
from sqlalchemy import Column, Integer, MetaData, String, Table

from server import ConfigError, ResourceProvider, hookimpl

endpoints = Table("acme_endpoint", MetaData(), Column("id", Integer, primary_key=True), Column("address", String))


@hookimpl
def register_resource_providers(settings):
    config = dict(settings.plugin_config("acme"))
    status = config.get("status", "active")
    if status not in ("active", "off"):
        raise ConfigError(f"status must be active or off, not {status!r}")
    return [ResourceProvider(
        resource_type="Endpoint", table=endpoints, id_column=endpoints.c.id, columns=tuple(endpoints.c),
        to_resource=lambda row: {
            "resourceType": "Endpoint", "id": str(row["id"]), "status": status,
            "connectionType": {"system": "http://terminology.hl7.org/CodeSystem/endpoint-connection-type",
                               "code": "hl7-fhir-rest"},
            "payloadType": [{"text": "org units"}], "address": row["address"]},
    )]
'''


@pytest.fixture
def third_party(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An 'installed' distribution in its own directory: a module plus a dist-info with the entry point."""
    site = tmp_path / "site"
    (site / "acme_fhir").mkdir(parents=True)
    (site / "acme_fhir" / "__init__.py").write_text(THIRD_PARTY, encoding="utf-8")
    info = site / "acme_fhir-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-fhir\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[orgunit_fhir]\nacme = acme_fhir\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    return site


def test_third_party_plugin_from_another_directory(third_party: Path, small_ctx: ServerContext,
                                                   tmp_path: Path) -> None:
    assert available_plugins()["acme"] == "acme_fhir"
    import acme_fhir  # type: ignore[import-not-found]

    with small_ctx.db.begin() as conn:
        acme_fhir.endpoints.create(conn, checkfirst=True)
        conn.execute(acme_fhir.endpoints.delete())
        conn.execute(acme_fhir.endpoints.insert(), [{"id": 7, "address": "https://hie.example.org/fhir"}])
    configured = client_for(settings_with(small_ctx, tmp_path, plugins={"acme": {"config": {"status": "off"}}}),
                            small_ctx)
    endpoint = configured.get("/fhir/Endpoint/7").json()
    assert endpoint["address"] == "https://hie.example.org/fhir" and endpoint["status"] == "off"
    assert configured.get("/fhir/Endpoint?_id=7").json()["total"] == 1
    assert "Endpoint" in [r["type"] for r in configured.get("/fhir/metadata").json()["rest"][0]["resource"]]
    disabled = client_for(settings_with(small_ctx, tmp_path, plugins={"acme": {"enabled": False}}), small_ctx)
    assert disabled.get("/fhir/Endpoint/7").status_code == 404
    with pytest.raises(ConfigError, match="plugin acme is misconfigured: status must be"):
        create_app(settings_with(small_ctx, tmp_path, plugins={"acme": {"config": {"status": "x"}}}), db=small_ctx.db)


def test_two_distributions_naming_one_plugin_load_the_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As pluggy did: the first distribution on the path that names plugin `twin` is loaded, the other skipped."""
    for n, site in enumerate((tmp_path / "first", tmp_path / "second")):
        (site / f"twin_{n}").mkdir(parents=True)
        (site / f"twin_{n}" / "__init__.py").write_text(f"ORDER = {n}\n", encoding="utf-8")
        info = site / f"twin_{n}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: twin-{n}\nVersion: 1.0\n", encoding="utf-8")
        (info / "entry_points.txt").write_text(f"[orgunit_fhir]\ntwin = twin_{n}\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "second"))
    monkeypatch.syspath_prepend(str(tmp_path / "first"))
    pm = get_plugin_manager(make_settings("sqlite://", tmp_path))
    assert pm.get_plugin("twin").ORDER == 0
    assert available_plugins()["twin"] == "twin_0"
