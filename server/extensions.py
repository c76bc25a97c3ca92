"""What the enabled plugins add besides providers, collected once: migration chains (the schema), commands,
load formats, demo data, browser pages and server-wide operations."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pluggy

from server.declare.extensions import Command, DemoData, LoadFormat
from server.declare.provider import Operation
from server.errors import ConfigError
from server.html.web import WebAssets, WebPage
from server.declare.declared import declared
from server.plugins import get_plugin_manager
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

    @classmethod
    def collect(cls, pm: pluggy.PluginManager, settings: Settings) -> Extensions:
        chains = declared(pm, "register_migrations", settings, Migrations)  # (plugin, chain): messages name both
        commands = _unique("command", [(p, c.name, c) for p, c in declared(pm, "register_commands", settings, Command)],
                           ENGINE_COMMANDS)
        formats = _unique("load format", [(p, f.name, f) for p, f in
                                          declared(pm, "register_load_formats", settings, LoadFormat)])
        demos = tuple(d for _, d in declared(pm, "register_demo_data", settings, DemoData))
        web = tuple(declared(pm, "register_web_pages", settings, (WebPage, WebAssets)))
        operations = _unique("operation", [(p, o.name, o) for p, o in
                                           declared(pm, "register_operations", settings, Operation)])
        for name, op in operations.items():
            assert isinstance(op, Operation)
            if op.handler is None or not op.levels or not op.levels <= {"system", "type"}:
                raise ConfigError(f"operation ${name}: a server-wide operation has a handler and serves the system "
                                  "and/or the type level")
        return cls(Schema.of(chains), commands, formats, demos, web, operations)  # type: ignore[arg-type]


def load_extensions(settings: Settings) -> Extensions:
    return Extensions.collect(get_plugin_manager(settings), settings)
