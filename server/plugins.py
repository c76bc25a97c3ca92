"""The plugin manager factory: hookspecs, core defaults, core plugins, entry-point plugins, settings toggles."""
from __future__ import annotations

from collections.abc import Iterable
from importlib import import_module
from importlib.metadata import entry_points

import pluggy

from server import defaults, hookspecs
from server.errors import ConfigError
from server.settings import Settings

ENTRY_POINT_GROUP = hookspecs.PROJECT
CORE_PLUGIN = "core-defaults"
# plugins that ship with the server, loaded by name as an entry point is (they sit above the engine: Bulk Data
# reads through it) and blocked by name as any plugin (settings.yaml `plugins: {bulk: false}`); a class is
# instantiated once per manager (its state is the worker's)
CORE_PLUGINS = {"bulk": "server.bulk.plugin:BulkData"}


def _core_plugin(target: str) -> object:
    module, _, attribute = target.partition(":")
    found = getattr(import_module(module), attribute) if attribute else import_module(module)
    return found() if isinstance(found, type) else found


def available_plugins() -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def get_plugin_manager(settings: Settings, extra_plugins: Iterable[tuple[str, object]] = ()) -> pluggy.PluginManager:
    """A new manager for these settings; `extra_plugins` (name, module-or-object) serve tests and embedders."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    extra = dict(extra_plugins)
    known = set(available_plugins()) | set(extra) | set(CORE_PLUGINS)
    unknown = sorted(set(settings.plugins) - known)
    if unknown:
        raise ConfigError(
            f"settings.yaml names plugin(s) {', '.join(unknown)} that are not installed; "
            f"installed: {', '.join(sorted(known)) or 'none'}"
        )
    for name in settings.disabled_plugins():
        pm.set_blocked(name)
    pm.register(defaults, name=CORE_PLUGIN)
    for name, target in CORE_PLUGINS.items():
        if not pm.is_blocked(name):
            pm.register(_core_plugin(target), name=name)
    for name, target in available_plugins().items():  # one at a time: a failure names its plugin
        try:
            pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP, name=name)
        except Exception as exc:  # an entry point that does not import (a declaration refused at import: ConfigError)
            raise ConfigError(f"plugin {name} ({target}) failed to load: {exc}") from exc
    for name, plugin in extra.items():
        if not pm.is_blocked(name):
            pm.register(plugin, name=name)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise ConfigError(f"plugin hook error: {exc}") from exc
    return pm

