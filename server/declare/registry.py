"""Providers by resource type, built once at start-up from the plugins' hook results."""
from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import logging
import textwrap
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson
import pluggy
from fhir.resources.R4B import get_fhir_model_class
from fhir.resources.R4B.resource import Resource

from server.declare import instants
from server.errors import ConfigError, ResourceTypeNotSupported
from server.declare.provider import (
    AnyProvider,
    ResourceProvider,
    StaticProvider,
)
from server.declare.declared import declared
from server.params.types.reference import ReferenceTarget
from server.params.param import SearchParam
from server.params.types.reference import Hierarchy
from server.settings import Settings

log = logging.getLogger("orgunit_fhir.plugins")


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


def _checked(resource_type: str, id_key: str,
             to_resource: Callable[[Any], dict[str, Any]]) -> Callable[[Any], dict[str, Any]]:
    """`to_resource` refusing what would publish a wrong resource: another type, or an id other than its row's (the
    engine names a resource by its row's id: a search's fullUrl, a reference, the stored body's key)."""
    def render(row: Any) -> dict[str, Any]:
        resource = to_resource(row)
        if not isinstance(resource, dict) or resource.get("resourceType") != resource_type:
            found = resource.get("resourceType") if isinstance(resource, dict) else type(resource).__name__
            raise ValueError(f"provider {resource_type}: to_resource gave {found!r} where a {resource_type} was due")
        rid = row.get(id_key) if isinstance(row, Mapping) else None
        if rid is not None and resource.get("id") != str(rid):
            raise ValueError(f"provider {resource_type}: to_resource gave id {resource.get('id')!r} for the row of "
                             f"id {str(rid)!r} (the id is the row's, as a string)")
        return resource

    return render


def _hierarchy(provider: ResourceProvider) -> Hierarchy | None:
    """The tree of the provider's resources: the path of its self-reference, else its subtree tenancy's; None."""
    own = (t.path for p in provider.search_params for t in p.targets if isinstance(t, ReferenceTarget)
           and t.resource_type == provider.resource_type and t.path is not None)
    path = next(own, None)
    if path is None and provider.tenancy is not None and provider.tenancy.subtree is not None:
        path = provider.tenancy.subtree.path
    return None if path is None else Hierarchy(provider.resource_type, provider.table, provider.id_column, path)


def _in_trees(param: SearchParam, trees: Mapping[str, Hierarchy]) -> SearchParam:
    """The parameter whose references to a type with a tree (and no path of their own) know it: :below, :above."""
    if not any(isinstance(t, ReferenceTarget) and t.path is None and t.resource_type in trees for t in param.targets):
        return param
    return replace(param, targets=tuple(
        replace(t, hierarchy=trees[t.resource_type])
        if isinstance(t, ReferenceTarget) and t.path is None and t.resource_type in trees else t
        for t in param.targets))


def _link(provider: ResourceProvider, served: frozenset[str], trees: Mapping[str, Hierarchy]) -> ResourceProvider:
    """References to a type no provider serves are neither written nor searchable; those to a type with a tree
    (`trees`) are searched by it too (:below, :above)."""
    dangling = frozenset(e for e, rtype in provider.references.items() if rtype not in served)
    params = tuple(_in_trees(p, trees) for p in provider.search_params
                   if not p.referenced_types or p.referenced_types & served)
    prerendered = provider.prerendered
    if prerendered is not None:  # the stored bodies must name what besides the provider made them
        prerendered = replace(prerendered, fingerprint=f"{prerendered.fingerprint};engine={_engine_rendering()};"
                                                       f"without={','.join(sorted(dangling))}")
    to_resource = _without_references(provider.to_resource, dangling) if dangling else provider.to_resource
    return replace(provider, search_params=params, prerendered=prerendered,
                   to_resource=_checked(provider.resource_type, provider.id_column.key, to_resource))


@functools.cache
def _engine_rendering() -> str:
    """The engine code and library a stored body's bytes also depend on (instants, stripped references, JSON): the
    code itself, not its text (a comment, a docstring or a blank line changes no byte rendered, and re-rendering
    every stored body for one would stop splicing until `render` runs)."""
    digest = hashlib.sha256(orjson.__version__.encode())
    for code in (inspect.getsource(instants), inspect.getsource(_without_references)):
        digest.update(code_of(code).encode())
    return digest.hexdigest()[:16]


def code_of(source: str) -> str:
    """What Python runs of `source`: its syntax tree without docstrings (comments and layout are not in it)."""
    tree = ast.parse(textwrap.dedent(source))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def _is_resource_type(name: str) -> bool:
    """A FHIR R4 resource type (not a data type, not a typo)."""
    try:
        return issubclass(get_fhir_model_class(name), Resource)
    except (ValueError, KeyError, ImportError):
        return False


def _check_references(plugin: str, provider: AnyProvider, served: frozenset[str]) -> None:
    """A reference to no FHIR resource type (a typo: `Organisation`) is refused at start-up; one to a type no
    enabled plugin serves is left out of every resource and search, and said once (a plugin disabled on purpose)."""
    if not isinstance(provider, ResourceProvider):
        return
    named = [(f"its {element!r} element", rtype) for element, rtype in provider.references.items()]
    named += [(f"its {param.name!r} search parameter", target.resource_type) for param in provider.search_params
              for target in param.targets if isinstance(target, ReferenceTarget)]
    via = provider.tenancy.via if provider.tenancy is not None else None
    named += [("its tenancy.via", via.resource_type)] if via is not None else []
    for where, rtype in named:
        if rtype not in served and not _is_resource_type(rtype):
            raise ConfigError(f"plugin {plugin}: {provider.resource_type} refers to {rtype!r} ({where}), which is no "
                              "FHIR R4 resource type: a typo?")
    for where, rtype in named:
        if rtype not in served:
            log.warning("plugin %s: %s refers to %s (%s), which no enabled plugin serves: that reference is left "
                        "out of its resources and searches", plugin, provider.resource_type, rtype, where)


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
            try:
                provider.check()
            except ConfigError as exc:  # the declaration's mistake, named by the plugin that made it
                raise ConfigError(f"plugin {plugin}: {exc}") from exc
            if not _is_resource_type(provider.resource_type):  # a typo would publish a type no client knows
                raise ConfigError(f"plugin {plugin}: {provider.resource_type!r} is not a FHIR resource type (a "
                                  "typo? a resource of a kind FHIR has no type for is published as Basic)")
            if provider.resource_type in providers:
                raise ConfigError(f"plugin {plugin}: resource type {provider.resource_type} is already provided")
            providers[provider.resource_type] = provider
            plugins[provider.resource_type] = plugin
        served = frozenset(providers)
        for rtype, provider in providers.items():
            _check_references(plugins[rtype], provider, served)
        for rtype, provider in providers.items():  # scoped through a type nobody serves: it would serve nothing
            via = provider.tenancy.via if isinstance(provider, ResourceProvider) and provider.tenancy else None
            if via is not None and via.resource_type not in served:
                raise ConfigError(
                    f"plugin {plugins[rtype]}: {rtype} is scoped through {via.resource_type} (its {via.param!r} "
                    f"reference), which no enabled plugin serves: enable the plugin that serves "
                    f"{via.resource_type}, or disable {plugins[rtype]} too")
            referrer = providers.get(via.resource_type) if via is not None and via.reverse else None
            param = referrer.params_by_name.get(via.param) if isinstance(referrer, ResourceProvider) else None
            if via is not None and via.reverse and (param is None or rtype not in param.referenced_types):
                raise ConfigError(f"plugin {plugins[rtype]}: {rtype} is scoped through {via.resource_type} the "
                                  f"other way round, but {via.resource_type} has no reference search parameter "
                                  f"{via.param!r} to {rtype}")
        trees = {t: tree for t, p in providers.items()
                 if isinstance(p, ResourceProvider) and (tree := _hierarchy(p)) is not None}
        linked = {t: _link(p, served, trees) if isinstance(p, ResourceProvider) else p for t, p in providers.items()}
        return cls(dict(sorted(linked.items())))

    def get(self, resource_type: str) -> AnyProvider:
        provider = self.providers.get(resource_type)
        if provider is None:
            raise ResourceTypeNotSupported(f"resource type {resource_type!r} is not supported by this server")
        return provider

    def __iter__(self) -> Iterator[AnyProvider]:
        return iter(self.providers.values())

    def scoped_through(self, resource_type: str) -> tuple[AnyProvider, ...]:
        """The other providers whose data decides which rows of `resource_type` a caller sees: the type its tenancy
        goes `via`, and on along their own `via`s (a role through its Locations; a practitioner through its roles,
        then their Locations). What is kept per data generation of the type (counts) depends on theirs too."""
        found: list[AnyProvider] = []
        provider = self.providers.get(resource_type)
        while isinstance(provider, ResourceProvider) and provider.tenancy is not None and \
                provider.tenancy.via is not None:
            provider = self.providers.get(provider.tenancy.via.resource_type)
            if provider is None or provider.resource_type in {resource_type, *(f.resource_type for f in found)}:
                break
            found.append(provider)
        return tuple(found)

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
