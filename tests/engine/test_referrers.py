"""Reference parameters are known by what they refer to (SearchParam.referenced_types), computed once, and the
registry lists once which parameters refer to each type (Registry.referrers): what _revinclude, _has and the
CapabilityStatement say."""
from __future__ import annotations

import pytest

from server.declare.registry import Registry
from server.engine.capabilities import _includes
from server.params.param import SearchParam
from server.params.types.reference import ReferenceTarget
from server.params.types.string import StringTarget
from server.plugins import get_plugin_manager
from tests.support.contexts import make_settings


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    tmp = tmp_path_factory.mktemp("referrers")
    settings = make_settings(f"sqlite:///{tmp}/x.db", tmp)
    return Registry.collect(get_plugin_manager(settings, ()), settings)


@pytest.mark.parametrize("rtype, referrers", [
    pytest.param("Location", ["Location:partof"], id="a-self-reference"),
    pytest.param("Organization", ["Location:organization", "Organization:partof"], id="from-another-type-and-itself"),
    pytest.param("CodeSystem", [], id="a-static-type"),
    pytest.param("Patient", [], id="a-type-not-served"),
])
def test_the_referrers_of_a_type(registry: Registry, rtype: str, referrers: list[str]) -> None:
    assert [r.key for r in registry.referrers(rtype)] == referrers


def test_the_referrers_are_what_the_parameters_say(registry: Registry) -> None:
    for rtype in registry.providers:
        assert [(r.provider.resource_type, r.name) for r in registry.referrers(rtype)] == [
            (p.resource_type, name) for p in registry.table_backed for name, param in p.params_by_name.items()
            if any(isinstance(t, ReferenceTarget) and t.resource_type == rtype for t in param.targets)]


def test_the_capability_statement_lists_them_as_revinclude(registry: Registry) -> None:
    location = registry.providers["Location"]
    assert _includes(location, registry) == (["Location:partof", "Location:organization"], ["Location:partof"])


@pytest.mark.parametrize("targets, referenced", [
    pytest.param((ReferenceTarget(None, "Location"),), {"Location"}, id="one-type"),  # type: ignore[arg-type]
    pytest.param((ReferenceTarget(None, "Location"), ReferenceTarget(None, "Organization")),  # type: ignore[arg-type]
                 {"Location", "Organization"}, id="two-types"),
    pytest.param((StringTarget(None, None),), set(), id="not-a-reference"),  # type: ignore[arg-type]
])
def test_referenced_types(targets: tuple[object, ...], referenced: set[str]) -> None:
    param = SearchParam("p", "reference" if referenced else "string", targets, "")
    assert param.referenced_types == referenced
    assert param.referenced_types is param.referenced_types  # computed once
    assert [t.resource_type for t in param.targets_to("Location")] == (["Location"] if referenced else [])
