"""The plugin manager factory: hookspecs, core defaults, core plugins, entry-point plugins (each checked against
the plugin API version it states), settings toggles; and which plugin a failure happened in."""
from __future__ import annotations

import logging
import traceback
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import import_module
from importlib.metadata import EntryPoint, entry_points
from types import TracebackType

import pluggy

from server import defaults, hookspecs
from server.declare.api import PLUGIN_API, STATED, Compatibility, compatibility, stated_version
from server.errors import ConfigError
from server.settings import Settings

log = logging.getLogger("orgunit_fhir.plugins")

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


def _installed() -> dict[str, EntryPoint]:
    """The installed plugins' entry points by name: of two distributions naming one plugin, the first on the path
    (as pluggy's loader took it)."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep)
    return found


def available_plugins() -> dict[str, str]:
    return {name: ep.value for name, ep in _installed().items()}


class Plugins(pluggy.PluginManager):
    """A plugin manager that knows the entry points installed when it was made (found once: a scan reads the
    metadata of every installed distribution, milliseconds each time)."""

    def __init__(self, installed: Mapping[str, str]) -> None:
        super().__init__(hookspecs.PROJECT)
        self.installed = dict(installed)


def get_plugin_manager(settings: Settings, extra_plugins: Iterable[tuple[str, object]] = ()) -> pluggy.PluginManager:
    """A new manager for these settings; `extra_plugins` (name, module-or-object) serve tests and embedders."""
    found = _installed()
    pm = Plugins({name: ep.value for name, ep in found.items()})
    pm.add_hookspecs(hookspecs)
    extra = dict(extra_plugins)
    known = set(found) | set(extra) | set(CORE_PLUGINS)
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
    for name, entry in found.items():  # one at a time: a failure names its plugin
        if pm.get_plugin(name) is not None or pm.is_blocked(name):
            continue
        try:
            pm.register(entry.load(), name=name)
        except Exception as exc:  # an entry point that does not import (a declaration refused at import: ConfigError)
            raise ConfigError(f"plugin {name} ({entry.value}) failed to load: {exc}") from exc
    for name, plugin in extra.items():
        if not pm.is_blocked(name):
            pm.register(plugin, name=name)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise ConfigError(f"plugin hook error: {exc}") from exc
    for name, plugin in pm.list_name_plugin():
        if plugin is not None:
            plugin_compatibility(pm, name)  # an incompatible plugin stops here, named (its deprecations: Extensions)
    return pm


def plugin_compatibility(pm: pluggy.PluginManager, name: str) -> Compatibility:
    """What plugin `name` may use (ConfigError naming it when it cannot run here). An installed plugin is checked
    against the version it states; the server's own plugins, and an embedder's (`extra_plugins`) that state none,
    are of this version."""
    plugin = pm.get_plugin(name)
    installed = pm.installed if isinstance(pm, Plugins) else available_plugins()
    if name in installed or stated_version(plugin) is not None:
        return compatibility(name, plugin)
    return Compatibility(name, PLUGIN_API, True, ())


def deprecations(pm: pluggy.PluginManager, name: str) -> list[str]:
    """What plugin `name` is warned of at start-up (a version it does not state); the old forms it uses are
    warned of where they are met (server.extensions: a load format's old `load`)."""
    found = plugin_compatibility(pm, name)
    return [] if found.stated else [found.deprecation(STATED)]


def warn(message: str) -> None:
    """A deprecation: a DeprecationWarning (Python's filters decide whether it shows) and a log line."""
    warnings.warn(message, DeprecationWarning, stacklevel=3)
    log.warning(message)


@dataclass(frozen=True)
class Blame:
    """The plugin whose code an exception came from, and its innermost frame there."""

    plugin: str
    frame: str  # `file:line in function`

    def describe(self, exc: BaseException) -> str:
        text = str(exc).strip().splitlines()
        return (f"plugin {self.plugin} failed: {type(exc).__name__}{f': {text[0]}' if text else ''} (at {self.frame}); "
                f"a fault of the plugin {self.plugin}, not of orgunit-fhir: report it to its maintainers")


def plugin_packages() -> dict[str, str]:
    """The package (or top module) of each installed plugin's entry point -> the plugin's name."""
    found: dict[str, str] = {}
    for name, target in available_plugins().items():
        module = target.partition(":")[0]
        found.setdefault(module.rpartition(".")[0] or module, name)
    return found


def blame(exc: BaseException, packages: dict[str, str] | None = None) -> Blame | None:
    """The installed plugin whose code raised `exc` (its innermost frame in a plugin's package, through the
    exception's causes), or None when no plugin code is on its traceback."""
    packages = plugin_packages() if packages is None else packages
    visited: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in visited:
        visited.add(id(current))
        found = _innermost(current.__traceback__, packages)
        if found is not None:
            return found
        current = current.__cause__ or current.__context__
    return None


def _innermost(tb: TracebackType | None, packages: dict[str, str]) -> Blame | None:
    found: Blame | None = None
    for frame, line in traceback.walk_tb(tb):
        module = str(frame.f_globals.get("__name__", ""))
        for package, plugin in packages.items():
            if module == package or module.startswith(package + "."):
                found = Blame(plugin, f"{frame.f_code.co_filename}:{line} in {frame.f_code.co_name}")
    return found

