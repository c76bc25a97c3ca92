"""What the enabled plugins add besides providers, collected once: migration chains (the schema), commands,
load formats, demo data, browser pages and server-wide operations."""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import pluggy

from server.declare.api import LOAD_CALL, takes_old_load
from server.declare.extensions import Command, DemoData, LoadCall, LoadFormat, LoadReport
from server.declare.provider import Operation
from server.errors import ConfigError
from server.html.web import WebAssets, WebPage
from server.declare.declared import declared
from server.plugins import deprecations, get_plugin_manager, plugin_compatibility, warn
from server.settings import Settings
from server.storage.migrate import Migrations, Schema

ENGINE_COMMANDS = frozenset({"serve", "demo", "load", "render", "migrate", "check-config", "token"})


def _unique(kind: str, items: list[tuple[str, str, object]], taken: frozenset[str] = frozenset()) -> dict[str, object]:
    found: dict[str, object] = {}
    for plugin, name, item in items:
        if name in found or name in taken:
            raise ConfigError(f"plugin {plugin}: {kind} {name!r} is already defined")
        found[name] = item
    return found


@dataclass(frozen=True)
class Extensions:
    schema: Schema
    commands: Mapping[str, Command]
    load_formats: Mapping[str, LoadFormat]
    demos: tuple[DemoData, ...]
    web: tuple[tuple[str, WebPage | WebAssets], ...] = ()  # (plugin, page or assets), checked by html_routes
    operations: Mapping[str, Operation] = field(default_factory=dict)  # server-wide, by name (server.engine.operations)
    format_plugins: Mapping[str, str] = field(default_factory=dict)  # load format -> the plugin declaring it
    deprecated: tuple[str, ...] = ()  # a warning per old form a plugin relies on (check-config shows them)

    @classmethod
    def collect(cls, pm: pluggy.PluginManager, settings: Settings) -> Extensions:
        chains = declared(pm, "register_migrations", settings, Migrations)  # (plugin, chain): messages name both
        commands = _unique("command", [(p, c.name, c) for p, c in declared(pm, "register_commands", settings, Command)],
                           ENGINE_COMMANDS)
        deprecated = [notice for name, plugin in pm.list_name_plugin() if plugin is not None
                      for notice in deprecations(pm, name)]
        declared_formats = [(p, _current_load(pm, p, f, deprecated)) for p, f in
                            declared(pm, "register_load_formats", settings, LoadFormat)]
        formats = _unique("load format", [(p, f.name, f) for p, f in declared_formats])
        demos = tuple(d for _, d in declared(pm, "register_demo_data", settings, DemoData))
        web = tuple(declared(pm, "register_web_pages", settings, (WebPage, WebAssets)))
        operations = _unique("operation", [(p, o.name, o) for p, o in
                                           declared(pm, "register_operations", settings, Operation)])
        for name, op in operations.items():
            assert isinstance(op, Operation)
            if op.handler is None or not op.levels or not op.levels <= {"system", "type"}:
                raise ConfigError(f"operation ${name}: a server-wide operation has a handler and serves the system "
                                  "and/or the type level")
        for notice in deprecated:  # each command and server start says it once (check-config: WARN lines)
            warn(notice)
        return cls(Schema.of(chains), commands, formats, demos, web, operations,  # type: ignore[arg-type]
                   {f.name: p for p, f in declared_formats}, tuple(deprecated))


def _current_load(pm: pluggy.PluginManager, plugin: str, fmt: LoadFormat, deprecated: list[str]) -> LoadFormat:
    """A load format whose `load` takes the plugin API 1.0 form (engine, path, args, progress): called through a
    shim, with a deprecation naming the plugin, while its version keeps that form; refused, named, when not."""
    if not takes_old_load(fmt.load):
        return fmt
    found = plugin_compatibility(pm, plugin)
    if not found.allows(LOAD_CALL):
        raise ConfigError(f"plugin {plugin}: load format {fmt.name!r} takes load(engine, path, args, progress), "
                          f"the form of plugin API 1.0, but the plugin states {found.version}. "
                          f"Migrating: {LOAD_CALL.migrating}")
    message = found.deprecation(LOAD_CALL, f" (its load format {fmt.name!r})")
    deprecated.append(message)
    old = fmt.load

    def load(call: LoadCall) -> LoadReport:
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        return old(call.engine, call.path, call.args, call.progress)  # type: ignore[call-arg]

    return replace(fmt, load=load)


def load_extensions(settings: Settings) -> Extensions:
    return Extensions.collect(get_plugin_manager(settings), settings)
