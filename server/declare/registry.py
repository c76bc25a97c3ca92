"""Providers by resource type, built once at start-up from the plugins' hook results."""
from __future__ import annotations

import functools
import hashlib
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson
import pluggy

from server.declare import instants
from server.errors import ConfigError, ResourceTypeNotSupported
from server.declare.provider import (
    AnyProvider,
    ResourceProvider,
    StaticProvider,
)
from server.declare.declared import declared
from server.params.param import SearchParam
from server.settings import Settings


def _without_references(to_resource: Callable[[Any], dict[str, Any]],
                        elements: frozenset[str]) -> Callable[[Any], dict[str, Any]]:
    def unlinked(value: Any) -> dict[str, Any] | None:
        """The Reference without its `reference` (None when nothing else is left: display, identifier...)."""
        if not isinstance(value, dict) or "reference" not in value:
            return value
        return {k: v for k, v in value.items() if k != "reference"} or None

    def render(row: Any) -> dict[str, Any]:
        resource = to_resource(row)
        for element in elements:
            value = resource.get(element)
            kept = [r for r in map(unlinked, value) if r] if isinstance(value, list) else unlinked(value)
            if kept:
                resource[element] = kept
            elif element in resource:
                del resource[element]
        return resource

    return render


def _link(provider: ResourceProvider, served: frozenset[str]) -> ResourceProvider:
    """References to a type no provider serves are neither written nor searchable."""
    dangling = frozenset(e for e, rtype in provider.references.items() if rtype not in served)
    params = tuple(p for p in provider.search_params if not p.referenced_types or p.referenced_types & served)
    prerendered = provider.prerendered
    if prerendered is not None:  # the stored bodies must name what besides the provider made them
        prerendered = replace(prerendered, fingerprint=f"{prerendered.fingerprint};engine={_engine_rendering()};"
                                                       f"without={','.join(sorted(dangling))}")
    if not dangling:
        return replace(provider, search_params=params, prerendered=prerendered)
    return replace(provider, search_params=params, to_resource=_without_references(provider.to_resource, dangling),
                   prerendered=prerendered)


@functools.cache
def _engine_rendering() -> str:
    """The engine code and library a stored body's bytes also depend on (instants, stripped references, JSON)."""
    digest = hashlib.sha256(orjson.__version__.encode())
    for module in (instants, sys.modules[__name__]):
        digest.update(Path(module.__file__ or "").read_bytes())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Referrer:
    """A reference parameter, `name` of `provider`, that refers to a type (Registry.referrers)."""

    provider: ResourceProvider
    name: str
    param: SearchParam

    @property
    def key(self) -> str:
        return f"{self.provider.resource_type}:{self.name}"


@dataclass(frozen=True)
class Registry:
    providers: Mapping[str, AnyProvider]

    @classmethod
    def collect(cls, pm: pluggy.PluginManager, settings: Settings) -> Registry:
        providers: dict[str, AnyProvider] = {}
        plugins: dict[str, str] = {}
        for plugin, provider in declared(pm, "register_resource_providers", settings, (ResourceProvider, StaticProvider)):
            provider.check()
            if provider.resource_type in providers:
                raise ConfigError(f"plugin {plugin}: resource type {provider.resource_type} is already provided")
            providers[provider.resource_type] = provider
            plugins[provider.resource_type] = plugin
        served = frozenset(providers)
        for rtype, provider in providers.items():  # scoped through a type nobody serves: it would serve nothing
            via = provider.tenancy.via if isinstance(provider, ResourceProvider) and provider.tenancy else None
            if via is not None and via.resource_type not in served:
                raise ConfigError(
                    f"plugin {plugins[rtype]}: {rtype} is scoped through {via.resource_type} (its {via.param!r} "
                    f"reference), which no enabled plugin serves: enable the plugin that serves "
                    f"{via.resource_type}, or disable {plugins[rtype]} too")
        linked = {t: _link(p, served) if isinstance(p, ResourceProvider) else p for t, p in providers.items()}
        return cls(dict(sorted(linked.items())))

    def get(self, resource_type: str) -> AnyProvider:
        provider = self.providers.get(resource_type)
        if provider is None:
            raise ResourceTypeNotSupported(f"resource type {resource_type!r} is not supported by this server")
        return provider

    def __iter__(self) -> Iterator[AnyProvider]:
        return iter(self.providers.values())

    def referrers(self, resource_type: str) -> tuple[Referrer, ...]:
        """Every reference parameter (of a provider searched by parameters) that refers to `resource_type`, in the
        registry's order: what _revinclude and _has can walk back. Computed once for all types."""
        return self._referrers.get(resource_type, ())

    @functools.cached_property
    def _referrers(self) -> Mapping[str, tuple[Referrer, ...]]:
        found: dict[str, list[Referrer]] = {}
        for provider in self.table_backed:
            for name, param in provider.params_by_name.items():
                for rtype in sorted(param.referenced_types):
                    found.setdefault(rtype, []).append(Referrer(provider, name, param))
        return {rtype: tuple(referrers) for rtype, referrers in found.items()}

    @functools.cached_property
    def table_backed(self) -> tuple[ResourceProvider, ...]:
        """The providers whose resources live in tables (not static ones), in the registry's order."""
        return tuple(p for p in self if isinstance(p, ResourceProvider))
