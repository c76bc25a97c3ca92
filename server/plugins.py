"""The plugin manager factory: hookspecs, core defaults, entry-point plugins, settings toggles."""
from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import entry_points

import pluggy

from server import defaults, hookspecs
from server.errors import ConfigError
from server.settings import Settings

ENTRY_POINT_GROUP = hookspecs.PROJECT
CORE_PLUGIN = "core-defaults"


def available_plugins() -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def get_plugin_manager(settings: Settings, extra_plugins: Iterable[tuple[str, object]] = ()) -> pluggy.PluginManager:
    """A new manager for these settings; `extra_plugins` (name, module-or-object) serve tests and embedders."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    extra = dict(extra_plugins)
    known = set(available_plugins()) | set(extra)
    unknown = sorted(set(settings.plugins) - known)
    if unknown:
        raise ConfigError(
            f"settings.yaml names plugin(s) {', '.join(unknown)} that are not installed; "
            f"installed: {', '.join(sorted(known)) or 'none'}"
        )
    for name in settings.disabled_plugins():
        pm.set_blocked(name)
    pm.register(defaults, name=CORE_PLUGIN)
    try:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    except Exception as exc:  # an entry point that does not import
        raise ConfigError(f"a plugin in entry-point group {ENTRY_POINT_GROUP!r} failed to load: {exc}") from exc
    for name, plugin in extra.items():
        if not pm.is_blocked(name):
            pm.register(plugin, name=name)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise ConfigError(f"plugin hook error: {exc}") from exc
    return pm

