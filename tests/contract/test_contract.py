"""The provider contract: every registered provider, on both backends, against its package's samples
(tests/support/contract.py; README.md here says how to run it against your own provider)."""
from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from server.access.mint import mint_token
from server.engine.context import ServerContext
from server.declare.provider import ReferenceTarget, ResourceProvider
from tests.support.contract import (
    Samples,
    Scope,
    Search,
    all_samples,
    entries,
    every_page,
    outcome_code,
)

SAMPLES = all_samples()
UNKNOWN_IDS = ("999999999", "no-such-id")  # and each sample's hidden ids
STRICT = {"Prefer": "handling=strict"}


def by_type(*, where: Any = lambda s: True) -> list[Any]:
    return [pytest.param(s, id=s.resource_type) for s in SAMPLES if where(s)]


def searches() -> list[Any]:
    return [pytest.param(s, search, id=f"{s.resource_type}-{search.param}={search.value}")
            for s in SAMPLES for search in s.searches]


def scopes() -> list[Any]:
    return [pytest.param(s, scope, id=f"{s.resource_type}-{'+'.join(scope.roots)}") for s in SAMPLES for scope in s.scopes]


def _provider(ctx: ServerContext, samples: Samples) -> ResourceProvider | None:
    provider = ctx.registry.get(samples.resource_type)
    return provider if isinstance(provider, ResourceProvider) else None


def _declared(ctx: ServerContext, samples: Samples) -> set[str]:
    provider = _provider(ctx, samples)
    return set(provider.params_by_name) if provider is not None else {"_id", "url"}


def _references(ctx: ServerContext, samples: Samples) -> list[Any]:
    """(search, target type, target id) of each sampled search on a reference parameter without modifier."""
    provider = _provider(ctx, samples)
    out = []
    for search in samples.searches:
        param = provider.params_by_name.get(search.param) if provider is not None else None
        if param is not None and param.type == "reference":
            target = next(t for t in param.targets if isinstance(t, ReferenceTarget))
            out.append((search, target.resource_type, search.value.rsplit("/", 1)[-1]))
    return out


def _headers(ctx: ServerContext, **claims: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(ctx.settings, **claims)}"}


def _version(entry: dict[str, Any]) -> tuple[str, str]:
    """(id, version) of a history entry."""
    return entry["fullUrl"].rsplit("/", 1)[-1], entry["response"]["etag"].removeprefix('W/"').removesuffix('"')


def test_every_registered_provider_has_samples(contract_ctx: ServerContext) -> None:
    assert set(contract_ctx.registry.providers) == {s.resource_type for s in SAMPLES}


@pytest.mark.parametrize("samples", by_type())
def test_samples_cover_every_declared_search_parameter(contract_ctx: ServerContext, samples: Samples) -> None:
    sampled = {s.param.split(":")[0] for s in samples.searches}
    assert _declared(contract_ctx, samples) <= sampled, "give a Search for every declared parameter"


@pytest.mark.parametrize("samples", by_type())
def test_read(api: TestClient, samples: Samples) -> None:
    for rid in sorted(samples.ids):
        resource = api.get(f"/fhir/{samples.resource_type}/{rid}").json()
        assert (resource["resourceType"], resource["id"]) == (samples.resource_type, rid)
    for rid in sorted(samples.deleted):
        assert outcome_code(api.get(f"/fhir/{samples.resource_type}/{rid}"), 410) == "deleted"


@pytest.mark.parametrize(("samples", "search"), searches())
def test_search_by_each_parameter(api: TestClient, samples: Samples, search: Search) -> None:
    bundle = api.get(f"/fhir/{samples.resource_type}", params={search.param: search.value, "_count": "100"}).json()
    found = {rid for _, rid in entries(bundle)}
    assert search.finds in found
    assert found <= samples.ids  # never a deleted resource
    assert bundle["total"] == len(found)


@pytest.mark.parametrize("samples", by_type())
@pytest.mark.parametrize("count", [1, 2])
def test_paging_visits_each_match_once(api: TestClient, samples: Samples, count: int) -> None:
    pages = every_page(api, f"/fhir/{samples.resource_type}?_count={count}")
    seen = [rid for page in pages for _, rid in entries(page)]
    assert len(seen) == len(set(seen)) and set(seen) == samples.ids
    assert all(len(entries(page)) <= count for page in pages) and pages[0]["total"] == len(samples.ids)


@pytest.mark.parametrize("samples", by_type(where=lambda s: s.tenanted))
def test_include_and_revinclude_every_reference_parameter(api: TestClient, contract_ctx: ServerContext,
                                                          samples: Samples) -> None:
    rtype = samples.resource_type
    for search, target, target_id in _references(contract_ctx, samples):
        forward = api.get(f"/fhir/{rtype}", params={"_id": search.finds, "_include": f"{rtype}:{search.param}"})
        assert (target, target_id) in entries(forward.json(), "include"), search
        back = api.get(f"/fhir/{target}", params={"_id": target_id, "_revinclude": f"{rtype}:{search.param}"})
        assert (rtype, search.finds) in entries(back.json(), "include"), search


@pytest.mark.parametrize("samples", by_type(where=lambda s: s.tenanted))
def test_history_and_vread(api: TestClient, contract_ctx: ServerContext, samples: Samples) -> None:
    rtype = samples.resource_type
    provider = _provider(contract_ctx, samples)
    assert provider is not None
    if provider.versioning is None:
        assert not samples.versions
        assert outcome_code(api.get(f"/fhir/{rtype}/{min(samples.ids)}/_history"), 404) == "not-found"
        return
    assert samples.versions, "a versioned provider gives the versions of a few ids"
    for rid, versions in samples.versions.items():
        history = api.get(f"/fhir/{rtype}/{rid}/_history").json()
        assert [_version(e) for e in history["entry"]] == [(rid, v) for v in versions]
        for vid in versions:
            answer = api.get(f"/fhir/{rtype}/{rid}/_history/{vid}")
            if rid in samples.deleted and vid == versions[0]:
                assert outcome_code(answer, 410) == "deleted"
            else:
                assert answer.status_code == 200 and answer.json()["meta"]["versionId"] == vid
        if rid not in samples.deleted:
            assert api.get(f"/fhir/{rtype}/{rid}").json()["meta"]["versionId"] == versions[0]
    pages = every_page(api, f"/fhir/{rtype}/_history?_count=2")
    pairs = [_version(e) for page in pages for e in page.get("entry", ())]
    assert len(pairs) == len(set(pairs)) == pages[0]["total"]
    assert {(rid, v) for rid, vs in samples.versions.items() for v in vs} <= set(pairs)


@pytest.mark.parametrize(("samples", "scope"), scopes())
def test_a_subtree_token_sees_only_its_part(api: TestClient, contract_ctx: ServerContext, samples: Samples,
                                           scope: Scope) -> None:
    rtype, headers = samples.resource_type, _headers(contract_ctx, roots=list(scope.roots))
    pages = every_page(api, f"/fhir/{rtype}?_count=2", headers)
    assert {rid for page in pages for _, rid in entries(page)} == scope.sees - samples.deleted
    for rid in sorted(samples.ids | samples.deleted):
        answer = api.get(f"/fhir/{rtype}/{rid}", headers=headers)
        expected = (410 if rid in samples.deleted else 200) if rid in scope.sees else 404
        assert answer.status_code == expected, (rid, answer.text)
    versioned = [rid for rid in samples.versions if rid not in scope.sees]
    for rid in versioned:  # its history and versions too: as unknown
        assert outcome_code(api.get(f"/fhir/{rtype}/{rid}/_history", headers=headers), 404) == "not-found"
        vid = samples.versions[rid][-1]
        assert outcome_code(api.get(f"/fhir/{rtype}/{rid}/_history/{vid}", headers=headers), 404) == "not-found"


@pytest.mark.parametrize("samples", by_type(where=lambda s: s.tenanted))
def test_another_account_sees_nothing(api: TestClient, contract_ctx: ServerContext, samples: Samples) -> None:
    rtype, headers = samples.resource_type, _headers(contract_ctx, account=f"not-{samples.account}")
    assert api.get(f"/fhir/{rtype}", headers=headers).json()["total"] == 0
    for rid in sorted(samples.ids | samples.deleted):
        assert outcome_code(api.get(f"/fhir/{rtype}/{rid}", headers=headers), 404) == "not-found"


@pytest.mark.parametrize("samples", by_type())
def test_capability_entry_lists_everything_declared(api: TestClient, contract_ctx: ServerContext,
                                                    samples: Samples) -> None:
    statement = api.get("/fhir/metadata").json()
    entry = next(r for r in statement["rest"][0]["resource"] if r["type"] == samples.resource_type)
    assert _declared(contract_ctx, samples) <= {p["name"] for p in entry["searchParam"]}
    provider = _provider(contract_ctx, samples)
    if provider is None:
        return
    interactions = {i["code"] for i in entry["interaction"]}
    versioned = provider.versioning is not None
    assert {"read", "search-type"} <= interactions
    assert {"vread", "history-instance", "history-type"} <= interactions if versioned else \
        not interactions & {"vread", "history-instance", "history-type"}
    bulk = {"export"} if contract_ctx.settings.bulk.enabled else set()  # the engine's Bulk Data $export, every type
    assert {o["name"] for o in entry.get("operation", ())} == set(provider.operations_by_name) | bulk
    references = {f"{samples.resource_type}:{p.name}" for p in provider.params_by_name.values() if p.type == "reference"}
    assert references <= set(entry.get("searchInclude", ()))


@pytest.mark.parametrize("samples", by_type())
def test_errors_are_operation_outcomes(api: TestClient, samples: Samples) -> None:
    rtype = samples.resource_type
    for rid in (*UNKNOWN_IDS, *sorted(samples.hidden)):
        assert outcome_code(api.get(f"/fhir/{rtype}/{rid}"), 404) == "not-found"
    for name, value in samples.bad_values:
        outcome_code(api.get(f"/fhir/{rtype}", params={name: value}), 400)
    outcome_code(api.get(f"/fhir/{rtype}", params={"no-such-parameter": "x"}, headers=STRICT), 400)
    assert api.get(f"/fhir/{rtype}", params={"no-such-parameter": "x"}).status_code == 200  # lenient: ignored
