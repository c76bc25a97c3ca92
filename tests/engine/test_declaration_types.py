"""A declaration's field of the wrong type is refused when its hook returns it (start-up, `check-config`), naming the
plugin, the declaration, the field and the type it declares (trial of issue 41, finding 4: `TokenTarget(codes=
"owner")` was served, and every search on it answered 500). A well-typed one, lists for tuples included, passes."""
from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, select

from server import (
    Command,
    ConfigError,
    LoadFormat,
    LoadReport,
    Operation,
    ReferenceTarget,
    ResourceProvider,
    SearchParam,
    StringTarget,
    Tenancy,
    TokenTarget,
    Via,
    hookimpl,
)
from server.declare.registry import Registry
from server.extensions import Extensions
from server.plugins import get_plugin_manager
from server.settings import Settings

things = Table("typed_thing", MetaData(), Column("id", Integer, primary_key=True), Column("owner", String),
               Column("name", String), Column("name_norm", String), Column("site", Integer))
OWNER = TokenTarget(things.c.owner)


def _provider(*params: SearchParam, **declared: Any) -> ResourceProvider:
    return ResourceProvider(**{"resource_type": "Basic", "table": things, "id_column": things.c.id,
                               "columns": tuple(things.c), "to_resource": lambda row: {"resourceType": "Basic"},
                               "search_params": params, **declared})


def _owner(target: TokenTarget) -> SearchParam:
    return SearchParam("owner", "token", (target,), "the owner")


class Providers:
    def __init__(self, provider: ResourceProvider) -> None:
        self.provider = provider

    @hookimpl
    def register_resource_providers(self, settings: Settings) -> list[ResourceProvider]:
        return [self.provider]


class Declares:
    """A plugin returning `declaration` from the hook `hook`."""

    def __init__(self, hook: str, declaration: object) -> None:
        setattr(self, hook, hookimpl(specname=hook)(lambda settings: [declaration]))


def _run(settings: Settings) -> int:
    return 0


def _collect(plugin: object) -> None:
    settings = Settings()
    pm = get_plugin_manager(settings, [("acme", plugin)])
    Extensions.collect(pm, settings)
    Registry.collect(pm, settings)


BROKEN: list[Any] = [
    pytest.param(Providers(_provider(_owner(TokenTarget(things.c.owner, codes="owner")))),  # type: ignore[arg-type]
                 "plugin acme: register_resource_providers returned a mistyped declaration: ResourceProvider 'Basic'"
                 ".search_params[0] (SearchParam 'owner').targets[0] (TokenTarget).codes must be "
                 "Mapping[str, tuple[Any, ...]] | None, got str 'owner'", id="token-codes-a-str"),
    pytest.param(Providers(_provider(_owner(TokenTarget(things.c.owner, codes={"owner": "owner"})))),  # type: ignore[dict-item]
                 "(TokenTarget).codes['owner'] must be tuple[Any, ...], got str 'owner'", id="token-codes-value-a-str"),
    pytest.param(Providers(_provider(SearchParam("owner", "token", OWNER, "the owner"))),  # type: ignore[arg-type]
                 "(SearchParam 'owner').targets must be tuple[Any, ...], got TokenTarget", id="targets-not-a-tuple"),
    pytest.param(Providers(_provider(SearchParam("name", "string", (StringTarget("name_norm", things.c.name),), "n"))),  # type: ignore[arg-type]
                 "(StringTarget).normalized must be ColumnElement[Any], got str 'name_norm'", id="column-named-as-text"),
    pytest.param(Providers(_provider(SearchParam("site", "reference", (ReferenceTarget(things.c.site, ("Location",)),), "s"))),  # type: ignore[arg-type]
                 "(ReferenceTarget).resource_type must be str, got tuple ('Location',)", id="reference-type-a-tuple"),
    pytest.param(Providers(_provider(references={"site": ("Location",)})),  # type: ignore[dict-item]
                 "ResourceProvider 'Basic'.references['site'] must be str, got tuple", id="references-value-a-tuple"),
    pytest.param(Providers(_provider(columns="id")),  # type: ignore[arg-type]
                 "ResourceProvider 'Basic'.columns must be tuple[ColumnElement[Any], ...], got str 'id'",
                 id="columns-a-str"),
    pytest.param(Providers(_provider(tenancy=Tenancy(via=Via("site", "Location", reverse="no")))),  # type: ignore[arg-type]
                 "ResourceProvider 'Basic'.tenancy (Tenancy).via (Via 'Location').reverse must be bool, got str 'no'",
                 id="via-reverse-a-str"),
    pytest.param(Providers(_provider(tenancy=Tenancy(things.c.site, "select site from typed_thing"))),  # type: ignore[arg-type]
                 "(Tenancy).partitions must be Select[Any] | None, got str", id="partitions-as-sql-text"),
    pytest.param(Providers(_provider(operations=(Operation("x", None, "d", "u", handler=lambda call: {},
                                                           levels="type"),))),  # type: ignore[arg-type]
                 "(Operation 'x').levels must be frozenset[OperationLevel], got str 'type'", id="operation-levels-a-str"),
    pytest.param(Declares("register_load_formats", LoadFormat("x", "h", lambda call: LoadReport(), dry_run="yes")),  # type: ignore[arg-type]
                 "plugin acme: register_load_formats returned a mistyped declaration: LoadFormat 'x'.dry_run must be "
                 "bool, got str 'yes'", id="load-format-dry-run-a-str"),
    pytest.param(Declares("register_commands", Command("x", "h", "configure", _run)),  # type: ignore[arg-type]
                 "plugin acme: register_commands returned a mistyped declaration: Command 'x'.configure must be "
                 "Callable[[argparse.ArgumentParser], None], got str 'configure'", id="command-configure-a-str"),
]


@pytest.mark.parametrize("plugin, words", BROKEN)
def test_a_mistyped_declaration_is_refused_naming_the_plugin_the_field_and_its_type(plugin: object,
                                                                                    words: str) -> None:
    with pytest.raises(ConfigError) as refused:
        _collect(plugin)
    assert words in str(refused.value)


WELL_TYPED: list[Any] = [
    pytest.param(_provider(_owner(TokenTarget(things.c.owner, codes={"owner": ("owner", "OWNER")}))), id="codes"),
    pytest.param(ResourceProvider("Basic", things, things.c.id, list(things.c),  # type: ignore[arg-type]
                                  lambda row: {}, search_params=[_owner(OWNER)]), id="lists-for-tuples"),
    pytest.param(_provider(_owner(OWNER), tenancy=Tenancy(things.c.site, select(things.c.site, things.c.name,
                                                                                  things.c.owner))), id="tenancy"),
    pytest.param(_provider(operations=(Operation("x", None, "d", "u", handler=lambda call: {},
                                                 levels={"type"}),)), id="levels-a-set"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("provider", WELL_TYPED)
def test_a_well_typed_declaration_passes(provider: ResourceProvider) -> None:
    _collect(Providers(provider))


def test_a_declaration_check_names_the_plugin() -> None:
    """The registry's own checks (not types) name the plugin too."""
    twice = _provider(_owner(OWNER), _owner(OWNER))
    with pytest.raises(ConfigError, match="plugin acme: provider Basic: duplicate search parameter names"):
        _collect(Providers(twice))


def test_every_shipped_declaration_is_well_typed() -> None:
    settings = Settings()
    pm = get_plugin_manager(settings)
    Extensions.collect(pm, settings)
    assert sorted(Registry.collect(pm, settings).providers) == [
        "CodeSystem", "Location", "OperationDefinition", "Organization", "StructureDefinition"]

