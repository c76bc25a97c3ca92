"""The plugin API's version: what a plugin states it was written for (`PLUGIN_API = "major.minor"` in its entry
point's module or a package above it), the changes to the public surface since, and whether the plugin can run.

The rule (CHANGELOG.md): a minor version adds to the surface; when it changes a form a plugin uses, the old form
keeps working through that minor version, deprecated (a warning naming the plugin), and is refused from the next
one; a major version may break anything. A plugin is refused, named, when it was written for a newer version or
another major one, or when a change since its version left no old form working: the message names each change and
its migration note. A plugin that states no version was written before versions were stated: 1.0."""
from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from server.errors import ConfigError

PLUGIN_API = "1.1"
ATTRIBUTE = "PLUGIN_API"
UNSTATED = "1.0"  # the version of a plugin that states none (written before versions were stated)


@dataclass(frozen=True)
class ApiChange:
    """A change a plugin's code may meet: made in `version`; `kept`: the old form works through that minor version
    (deprecated), and from the next one it is refused."""

    version: str
    what: str
    migrating: str
    kept: bool = True


LOAD_CALL = ApiChange(
    "1.1", "LoadFormat.load(engine, path, args, progress) became load(call), a LoadCall (engine, path, args, progress, "
           "settings, registry, lookup)",
    "take one parameter, `def load(call: LoadCall) -> LoadReport`, and read call.engine, call.path, call.args and "
    "call.progress; find another plugin's resources with call.lookup, never its tables")
STATED = ApiChange(
    "1.1", "a plugin states the plugin API version it was written for",
    f'add `{ATTRIBUTE} = "{PLUGIN_API}"` to the module its entry point names (or to its package) once it follows '
    "CHANGELOG.md to this version")

# every change since 1.0 that a plugin's code meets at start-up or when called (CHANGELOG.md lists the others: a
# change of behaviour, with its migration note, that no plugin can be checked for)
CHANGES: tuple[ApiChange, ...] = (STATED, LOAD_CALL)


def parse(version: str) -> tuple[int, int]:
    major, dot, minor = version.partition(".")
    if not (dot and major.isdigit() and minor.isdigit() and major.isascii() and minor.isascii()):
        raise ValueError(version)
    return int(major), int(minor)


@dataclass(frozen=True)
class Compatibility:
    """What a plugin may use: its version, and the deprecated old forms it is allowed (each `ApiChange`)."""

    plugin: str
    version: str
    stated: bool
    kept: tuple[ApiChange, ...]

    def allows(self, change: ApiChange) -> bool:
        return change in self.kept

    def deprecation(self, change: ApiChange, detail: str = "") -> str:
        """The warning for a plugin that uses an old form the current version still keeps."""
        written = f"written for plugin API {self.version}" if self.stated else \
            f"states no plugin API version: taken as {UNSTATED}"
        major, minor = parse(change.version)
        return (f"plugin {self.plugin} ({written}){detail} relies on a form deprecated in {change.version} and refused "
                f"from {major}.{minor + 1}: {change.what}. Migrating: {change.migrating}")


def stated_version(plugin: object) -> object | None:
    """`PLUGIN_API` of the plugin's module (or the object), else of the nearest package above it that states one, as
    written (a version is a string: `compatibility` refuses anything else)."""
    found = getattr(plugin, ATTRIBUTE, None)
    if found is not None:
        return found
    name = plugin.__name__ if isinstance(plugin, ModuleType) else type(plugin).__module__
    while "." in name:
        name = name.rpartition(".")[0]
        module = sys.modules.get(name)
        if module is not None and getattr(module, ATTRIBUTE, None) is not None:
            return getattr(module, ATTRIBUTE)
    return None


def _changes_since(version: tuple[int, int]) -> list[ApiChange]:
    return [c for c in CHANGES if version < parse(c.version) <= parse(PLUGIN_API)]


def compatibility(name: str, plugin: object) -> Compatibility:
    """Whether plugin `name` runs on this server (ConfigError naming it, the changes and their migration notes when
    not), and the old forms it is still allowed."""
    stated = stated_version(plugin)
    if stated is not None and not isinstance(stated, str):  # 1.10 as a number is 1.1: never read one
        raise ConfigError(f"plugin {name} states {ATTRIBUTE} = {stated!r}, not a string: write the version as one, "
                          f"{ATTRIBUTE} = \"{PLUGIN_API}\" (this server's plugin API)")
    version = stated or UNSTATED
    current = parse(PLUGIN_API)
    try:
        wanted = parse(version)
    except ValueError:
        raise ConfigError(f"plugin {name} states {ATTRIBUTE} = {version!r}, not a version `major.minor`; this "
                          f"server's plugin API is {PLUGIN_API}") from None
    if wanted[0] != current[0] or wanted > current:
        newer = "a newer orgunit-fhir (upgrade the server)" if wanted > current else "another major version"
        raise ConfigError(f"plugin {name} was written for plugin API {version}, this server's is {PLUGIN_API}: it "
                          f"needs {newer}; see CHANGELOG.md")
    changes = _changes_since(wanted)
    broken = [c for c in changes if not c.kept or parse(c.version) < current]  # no old form left
    if broken:
        raise ConfigError(f"plugin {name} was written for plugin API {version}, this server's is {PLUGIN_API}, "
                          "which changed what it relies on: "
                          + "; ".join(f"{c.version}: {c.what} (Migrating: {c.migrating})" for c in broken))
    return Compatibility(name, version, stated is not None, tuple(changes))


def takes_old_load(load: Callable[..., Any]) -> bool:
    """Whether a LoadFormat's `load` is the 1.0 form (engine, path, args, progress) rather than load(call)."""
    try:
        parameters = inspect.signature(load).parameters.values()
    except (TypeError, ValueError):  # a callable without a signature: taken as the current form
        return False
    required = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                and p.default is p.empty]
    return len(required) == 4
