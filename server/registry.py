"""Providers by resource type, built once at start-up from the plugins' hook results."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pluggy

from server.errors import ConfigError, ResourceTypeNotSupported
from server.provider import ResourceProvider
from server.settings import Settings


@dataclass(frozen=True)
class Registry:
    providers: Mapping[str, ResourceProvider]

    @classmethod
    def collect(cls, pm: pluggy.PluginManager, settings: Settings) -> Registry:
        providers: dict[str, ResourceProvider] = {}
        for impl in pm.hook.register_resource_providers.get_hookimpls():
            try:
                declared = impl.function(settings=settings) or ()
            except ConfigError as exc:
                raise ConfigError(f"plugin {impl.plugin_name} is misconfigured: {exc}") from exc
            for provider in declared:
                if not isinstance(provider, ResourceProvider):
                    raise ConfigError(f"plugin {impl.plugin_name} returned {provider!r}, not a ResourceProvider")
                provider.check()
                if provider.resource_type in providers:
                    raise ConfigError(f"plugin {impl.plugin_name}: resource type {provider.resource_type} is already provided")
                providers[provider.resource_type] = provider
        return cls(dict(sorted(providers.items())))

    def get(self, resource_type: str) -> ResourceProvider:
        provider = self.providers.get(resource_type)
        if provider is None:
            raise ResourceTypeNotSupported(f"resource type {resource_type!r} is not supported by this server")
        return provider

    def __iter__(self) -> Iterator[ResourceProvider]:
        return iter(self.providers.values())
