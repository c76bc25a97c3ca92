"""What the start-up hooks return, collected with the name of the plugin that returned it."""
from __future__ import annotations

from typing import Any, TypeVar

import pluggy

from server.declare.typed import problem
from server.errors import ConfigError
from server.settings import Settings


T = TypeVar("T")


def declared(pm: pluggy.PluginManager, hook: str, settings: Settings,
             kind: type[T] | tuple[type[Any], ...]) -> list[tuple[str, T]]:
    """Every declaration a start-up hook returns, with the name of the plugin that made it; a plugin whose settings
    are wrong (ConfigError), that returns something else than `kind`, or a declaration with a field of the wrong type
    (a str where a tuple is declared: server.declare.typed) stops the start-up, named."""
    found: list[tuple[str, T]] = []
    for impl in getattr(pm.hook, hook).get_hookimpls():
        try:
            returned = impl.function(settings=settings) or ()
        except ConfigError as exc:
            raise ConfigError(f"plugin {impl.plugin_name} is misconfigured: {exc}") from exc
        for item in returned:
            if not isinstance(item, kind):
                expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
                raise ConfigError(f"plugin {impl.plugin_name}: {hook} returned {item!r}, not a {expected}")
            mistyped = problem(item)
            if mistyped is not None:
                raise ConfigError(f"plugin {impl.plugin_name}: {hook} returned a mistyped declaration: {mistyped}")
            found.append((impl.plugin_name, item))
    return found
