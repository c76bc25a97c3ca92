"""The provider contract's checks, as pytest tests: every registered provider, over HTTP, against its subjects'
samples, on SQLite and PostgreSQL. Read; search by every declared parameter; paging (the next links visit each
match once); `_include` and `_revinclude` for every reference parameter; `_history` and vread when versioned (404
when not); scoping (an id outside the caller's scope is a 404 like an unknown id, a subtree-limited token sees
exactly its part, another account sees nothing); the CapabilityStatement entry (every parameter, operation, include
and interaction declared); OperationOutcome errors (unknown id 404, bad value 400, unknown parameter 400 with
`Prefer: handling=strict`, and without it unless `fhir.unknown_parameters: ignore`).

The plugin (server.contract.plugin) collects this module when --fhir-contract names subjects; a test module of
one's own runs it too by `from server.contract.checks import *` and naming its FHIR_CONTRACT_SUBJECTS. The fixtures
here are what such a module may override (`contract_postgres`, to give the PostgreSQL server)."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from starlette.testclient import TestClient

from server import ReferenceTarget, ResourceProvider, StaticProvider
from server.access.mint import mint_token
from server.app import create_app
from server.contract.answers import entries, every_page, fhir_path, outcome_code
from server.contract.context import contract_context, scratch_database, sqlite_url
from server.contract.options import POSTGRES_OPTION, context_of, database_prefix, postgres_server, subjects_of
from server.contract.samples import Samples, Scope, Search, Subject
from server.declare.declared import declared
from server.engine.context import ServerContext
from server.engine.searches import lookup
from server.storage.backend import Postgres, Sqlite

UNKNOWN_IDS = ("999999999", "no-such-id")  # and each sample's hidden ids
STRICT = {"Prefer": "handling=strict"}
LENIENT = {"Prefer": "handling=lenient"}


def _refuses_unknown(client: TestClient) -> bool:
    """Whether the server under contract refuses unknown parameters unless asked to be lenient."""
    return client.app.state.ctx.settings.fhir.unknown_parameters == "refuse"  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def contract_postgres(pytestconfig: pytest.Config) -> str | None:
    """The PostgreSQL server the PostgreSQL cases make a scratch database on: --fhir-contract-postgres or
    ORGUNIT_FHIR_CONTRACT_POSTGRES (None: those cases are skipped)."""
    return postgres_server(pytestconfig)


@pytest.fixture(scope="module", params=[Sqlite.name, pytest.param(Postgres.name, marks=pytest.mark.postgres)])
def contract_database(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh database on each backend, for the module."""
    if request.param == Sqlite.name:
        yield sqlite_url(tmp_path_factory.mktemp("contract"))
        return
    server = request.getfixturevalue("contract_postgres")
    if server is None:
        pytest.skip(f"no PostgreSQL server: give {POSTGRES_OPTION}=postgresql://user@host:5432/postgres")
    with scratch_database(server, database_prefix(request.config)) as url:
        yield url


@pytest.fixture(scope="module")
def contract_subjects(request: pytest.FixtureRequest) -> tuple[Subject, ...]:
    return subjects_of(request.config, request.module)


@pytest.fixture(scope="module")
def contract_context_subjects(request: pytest.FixtureRequest) -> tuple[Subject, ...]:
    """The subjects loaded as context (before the checked ones), never checked."""
    return context_of(request.config, request.module)


@pytest.fixture(scope="module")
def contract_ctx(contract_database: str, contract_subjects: tuple[Subject, ...],
                 contract_context_subjects: tuple[Subject, ...],
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerContext]:
    """Every subject's plugins enabled and sample data loaded: the context subjects' first, then the checked ones'."""
    with contract_context(contract_database, tmp_path_factory.mktemp("var"),
                          (*contract_context_subjects, *contract_subjects)) as ctx:
        yield ctx


@pytest.fixture(scope="module")
def contract_api(contract_ctx: ServerContext) -> Iterator[TestClient]:
    """A client of the app whose token sees the whole of the database's first account."""
    with TestClient(create_app(contract_ctx.settings, context=contract_ctx), base_url="http://testserver") as client:
        client.headers["Authorization"] = f"Bearer {mint_token(contract_ctx.settings)}"
        yield client


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A check runs once per case its arguments name: `samples` each sampled type (with `search`, each of its
    searches; with `scope`, each of its scopes), `tenanted` each sampled type whose resources belong to an account."""
    names = set(metafunc.fixturenames)
    if not names & {"samples", "tenanted"}:
        return
    every = [s for subject in subjects_of(metafunc.config, metafunc.module) for s in subject.samples]
    if "search" in names:
        metafunc.parametrize(("samples", "search"), [pytest.param(s, x, id=f"{s.resource_type}-{x.param}={x.value}")
                                                     for s in every for x in s.searches])
    elif "scope" in names:
        metafunc.parametrize(("samples", "scope"), [pytest.param(s, x, id=f"{s.resource_type}-{'+'.join(x.roots)}")
                                                    for s in every for x in s.scopes])
    elif "tenanted" in names:
        metafunc.parametrize("tenanted", [pytest.param(s, id=s.resource_type) for s in every if s.tenanted])
    else:
        metafunc.parametrize("samples", [pytest.param(s, id=s.resource_type) for s in every])


def _provider(ctx: ServerContext, samples: Samples) -> ResourceProvider | None:
    provider = ctx.registry.get(samples.resource_type)
    return provider if isinstance(provider, ResourceProvider) else None


def _declared(ctx: ServerContext, samples: Samples) -> set[str]:
    provider = _provider(ctx, samples)
    return set(provider.params_by_name) if provider is not None else {"_id", "url"}


def _references(ctx: ServerContext, samples: Samples) -> list[tuple[Search, str, str]]:
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


def test_every_provider_of_the_subjects_has_samples(contract_ctx: ServerContext,
                                                    contract_subjects: tuple[Subject, ...]) -> None:
    """Each type a checked subject's plugins serve has Samples, and each sampled type is served; the providers of
    other plugins (installed, or of the context subjects) are context: their samples are optional."""
    plugins = {name for subject in contract_subjects for name in subject.plugins}
    served = {p.resource_type for name, p in declared(contract_ctx.pm, "register_resource_providers",
                                                      contract_ctx.settings, (ResourceProvider, StaticProvider))
              if name in plugins and p.resource_type in contract_ctx.registry.providers}
    sampled = {s.resource_type for subject in contract_subjects for s in subject.samples}
    assert served <= sampled, f"give Samples for {', '.join(sorted(served - sampled))} (served by the subjects' plugins)"
    assert sampled <= set(contract_ctx.registry.providers), \
        f"Samples of types not served: {', '.join(sorted(sampled - set(contract_ctx.registry.providers)))}"


#: the parameters a provider declares without naming them in its search_params, and what declares each
DERIVED = {"_id": "every provider", "_lastUpdated": "last_updated= (or its Versioning's last_updated)"}


def test_samples_cover_every_declared_search_parameter(contract_ctx: ServerContext, samples: Samples) -> None:
    """A Search for each parameter the provider declares, those the engine derives from a declaration (DERIVED)
    included; the failure names the ones missing."""
    sampled = {s.param.split(":")[0] for s in samples.searches}
    missing = sorted(_declared(contract_ctx, samples) - sampled)
    derived = "".join(f"; {name} comes with {DERIVED[name]}" for name in missing if name in DERIVED)
    assert not missing, (f"give a Search for every declared parameter of {samples.resource_type} (missing: "
                         f"{', '.join(missing)}{derived})")


def test_read(contract_api: TestClient, samples: Samples) -> None:
    for rid in sorted(samples.ids):
        resource = contract_api.get(fhir_path(samples.resource_type, rid)).json()
        assert (resource["resourceType"], resource["id"]) == (samples.resource_type, rid)
    for rid in sorted(samples.deleted):
        assert outcome_code(contract_api.get(fhir_path(samples.resource_type, rid)), 410) == "deleted"


def test_search_by_each_parameter(contract_api: TestClient, samples: Samples, search: Search) -> None:
    bundle = contract_api.get(fhir_path(samples.resource_type),
                              params={search.param: search.value, "_count": "100"}).json()
    found = {rid for _, rid in entries(bundle)}
    assert search.finds in found
    assert found <= samples.ids  # never a deleted resource
    assert bundle["total"] == len(found)


def test_the_look_up_finds_what_the_search_finds(contract_api: TestClient, contract_ctx: ServerContext,
                                                samples: Samples, search: Search) -> None:
    """What a loader of another plugin finds (server.declare.lookup, a trusted caller's) is what a client's search
    finds, and what no token sees (`Samples.hidden`) besides."""
    pages = every_page(contract_api, fhir_path(samples.resource_type, query=urlencode({search.param: search.value})))
    found = {rid for page in pages for _, rid in entries(page)}
    looked = set(lookup(contract_ctx).ids(samples.resource_type, [(search.param, search.value)]))
    assert found <= looked and looked - found <= samples.hidden


def _callers(ctx: ServerContext, subjects: tuple[Subject, ...], samples: Samples) -> list[tuple[str, dict[str, Any]]]:
    """The callers a scope's query is checked for: (name, claims besides `scope`): the account's whole view, each
    subtree of the samples, and one whose other types are each narrowed by a query scope (their first sampled
    search); the scopes of that last one on other types go in `scope` with the checked one's."""
    callers: list[tuple[str, dict[str, Any]]] = [("unrestricted", {})]
    callers += [(f"roots {'+'.join(x.roots)}", {"roots": list(x.roots)}) for x in samples.scopes]
    narrowed = [f"system/{s.resource_type}.rs?{urlencode({s.searches[0].param: s.searches[0].value})}"
                for subject in subjects for s in subject.samples
                if s.resource_type != samples.resource_type and s.searches and _provider(ctx, s) is not None]
    if narrowed:
        callers.append(("query-scoped", {"narrowed": narrowed}))
    return callers


def test_a_scope_with_the_search_as_its_query_sees_its_matches_only(contract_api: TestClient,
                                                                     contract_ctx: ServerContext,
                                                                     contract_subjects: tuple[Subject, ...],
                                                                     samples: Samples, search: Search) -> None:
    """SMART v2 granular scopes: a token granted `system/<type>.rs?<the search>` sees, of the type, exactly what the
    search returns to the same caller granted `system/<type>.rs` (one compile path: its look-ups, chains and
    `:missing` among what that caller sees), for a caller seeing the whole account, one limited to each sampled
    subtree and one whose other types are narrowed by query scopes (a type searched in memory cannot apply a query:
    the token is refused, 401)."""
    rtype, query = samples.resource_type, urlencode({search.param: search.value})
    others = [f"system/{t}.rs" for t in sorted(contract_ctx.registry.providers) if t != rtype]
    for name, claims in _callers(contract_ctx, contract_subjects, samples):
        narrowed = claims.get("narrowed", [])
        base = {"account": samples.account, **({"roots": claims["roots"]} if "roots" in claims else {})}
        around = [n for n in narrowed if not n.startswith(f"system/{rtype}.")] + \
            [o for o in others if not any(n.startswith(o + "?") for n in narrowed)]
        searching = _headers(contract_ctx, **base, extra={"scope": " ".join([f"system/{rtype}.rs", *around])})
        scoped = _headers(contract_ctx, **base, extra={"scope": " ".join([f"system/{rtype}.rs?{query}", *around])})
        answer = contract_api.get(fhir_path(rtype), headers=scoped)
        if _provider(contract_ctx, samples) is None:
            assert outcome_code(answer, 401) == "login"
            return
        found = {rid for page in every_page(contract_api, fhir_path(rtype, query=query), searching)
                 for _, rid in entries(page)}
        seen = {rid for page in every_page(contract_api, fhir_path(rtype, query="_count=3"), scoped)
                for _, rid in entries(page)}
        assert seen == found, f"{name}: the scope's query sees {sorted(seen)}, its search finds {sorted(found)}"
        for rid in sorted(samples.ids):
            status = contract_api.get(fhir_path(rtype, rid), headers=scoped).status_code
            assert status == (200 if rid in found else 404), (name, rid)
        for rid, versions in samples.versions.items():  # a query is proven on the current row only
            if rid in found:
                history = contract_api.get(fhir_path(rtype, rid, "_history"), headers=scoped).json()
                assert [_version(e) for e in history["entry"]] == [(rid, versions[0])], (name, rid)


@pytest.mark.parametrize("count", [1, 2])
def test_paging_visits_each_match_once(contract_api: TestClient, samples: Samples, count: int) -> None:
    pages = every_page(contract_api, fhir_path(samples.resource_type, query=f"_count={count}"))
    seen = [rid for page in pages for _, rid in entries(page)]
    assert len(seen) == len(set(seen)) and set(seen) == samples.ids
    assert all(len(entries(page)) <= count for page in pages) and pages[0]["total"] == len(samples.ids)


def test_include_and_revinclude_every_reference_parameter(contract_api: TestClient, contract_ctx: ServerContext,
                                                          tenanted: Samples) -> None:
    rtype = tenanted.resource_type
    for search, target, target_id in _references(contract_ctx, tenanted):
        forward = contract_api.get(fhir_path(rtype), params={"_id": search.finds,
                                                              "_include": f"{rtype}:{search.param}"})
        assert (target, target_id) in entries(forward.json(), "include"), search
        back = contract_api.get(fhir_path(target), params={"_id": target_id,
                                                            "_revinclude": f"{rtype}:{search.param}"})
        assert (rtype, search.finds) in entries(back.json(), "include"), search


def test_history_and_vread(contract_api: TestClient, contract_ctx: ServerContext, tenanted: Samples) -> None:
    rtype, samples = tenanted.resource_type, tenanted
    provider = _provider(contract_ctx, samples)
    assert provider is not None
    if provider.versioning is None:
        assert not samples.versions
        assert outcome_code(contract_api.get(fhir_path(rtype, min(samples.ids), "_history")), 404) == "not-found"
        return
    assert samples.versions, "a versioned provider gives the versions of a few ids"
    for rid, versions in samples.versions.items():
        history = contract_api.get(fhir_path(rtype, rid, "_history")).json()
        assert [_version(e) for e in history["entry"]] == [(rid, v) for v in versions]
        for vid in versions:
            answer = contract_api.get(fhir_path(rtype, rid, "_history", vid))
            if rid in samples.deleted and vid == versions[0]:
                assert outcome_code(answer, 410) == "deleted"
            else:
                assert answer.status_code == 200 and answer.json()["meta"]["versionId"] == vid
        if rid not in samples.deleted:
            assert contract_api.get(fhir_path(rtype, rid)).json()["meta"]["versionId"] == versions[0]
    pages = every_page(contract_api, fhir_path(rtype, "_history", query="_count=2"))
    pairs = [_version(e) for page in pages for e in page.get("entry", ())]
    walked = [([_version(e) for e in page.get("entry", ())], [link["url"].partition("?")[2] for link in page["link"]
                                                              if link["relation"] == "next"]) for page in pages]
    assert len(pairs) == len(set(pairs)) == pages[0]["total"], f"each page's (id, version) and next link: {walked}"
    assert {(rid, v) for rid, vs in samples.versions.items() for v in vs} <= set(pairs)


def test_a_subtree_token_sees_only_its_part(contract_api: TestClient, contract_ctx: ServerContext, samples: Samples,
                                           scope: Scope) -> None:
    rtype, headers = samples.resource_type, _headers(contract_ctx, roots=list(scope.roots))
    pages = every_page(contract_api, fhir_path(rtype, query="_count=2"), headers)
    assert {rid for page in pages for _, rid in entries(page)} == scope.sees - samples.deleted
    for rid in sorted(samples.ids | samples.deleted):
        answer = contract_api.get(fhir_path(rtype, rid), headers=headers)
        expected = (410 if rid in samples.deleted else 200) if rid in scope.sees else 404
        assert answer.status_code == expected, (rid, answer.text)
    for rid, every in samples.versions.items():  # its history and versions: those it sees, the others unknown
        seen = scope.versions.get(rid, every if rid in scope.sees else ())
        left = scope.departures.get(rid, ())
        history = contract_api.get(fhir_path(rtype, rid, "_history"), headers=headers)
        if not seen:
            assert outcome_code(history, 404) == "not-found"
        else:
            assert history.status_code == 200, history.text
            shown = [(e["response"]["etag"], e["request"]["method"]) for e in history.json()["entry"]]
            assert [etag for etag, _ in shown] == [f'W/"{v}"' for v in seen]
            assert [etag[3:-1] for etag, method in shown if method == "DELETE" and etag[3:-1] in left] == list(left)
        for vid in every:
            answer = contract_api.get(fhir_path(rtype, rid, "_history", vid), headers=headers)
            if vid not in seen:
                assert outcome_code(answer, 404) == "not-found"
            elif vid in left:
                assert outcome_code(answer, 410) == "deleted", (rid, vid)
            else:
                assert answer.status_code == (410 if rid in samples.deleted and vid == every[0] else 200), answer.text


def test_another_account_sees_nothing(contract_api: TestClient, contract_ctx: ServerContext,
                                      tenanted: Samples) -> None:
    """Nothing of the account, whatever the interaction: no match, no read, no kept version (its history and each
    vread are 404 as an unknown id's), nothing in the type's history."""
    rtype, headers = tenanted.resource_type, _headers(contract_ctx, account=f"not-{tenanted.account}")
    provider = _provider(contract_ctx, tenanted)
    assert provider is None or provider.tenancy is not None, (
        f"{rtype} declares no tenancy, so every caller sees it: its Samples say tenanted=True (the default); say "
        "tenanted=False, or declare the provider's Tenancy")
    assert contract_api.get(fhir_path(rtype), headers=headers).json()["total"] == 0
    for rid in sorted(tenanted.ids | tenanted.deleted):
        assert outcome_code(contract_api.get(fhir_path(rtype, rid), headers=headers), 404) == "not-found"
    for rid, versions in tenanted.versions.items():
        assert outcome_code(contract_api.get(fhir_path(rtype, rid, "_history"), headers=headers), 404) == "not-found"
        for vid in versions:
            answer = contract_api.get(fhir_path(rtype, rid, "_history", vid), headers=headers)
            assert outcome_code(answer, 404) == "not-found", (rid, vid)
    if tenanted.versions:
        pages = every_page(contract_api, fhir_path(rtype, "_history", query="_count=50"), headers)
        assert not [e for page in pages for e in page.get("entry", ())]


def _deletions_walked(api: TestClient, rtype: str, headers: dict[str, str]) -> set[str]:
    """The ids a walk of the type's history since the epoch holds a DELETE entry for."""
    pages = every_page(api, fhir_path(rtype, "_history", query="_since=1970-01-01T00:00:00Z&_count=2"), headers)
    return {e["request"]["url"].rsplit("/", 1)[-1] for page in pages for e in page.get("entry", ())
            if e["request"]["method"] == "DELETE"}


def test_a_deletion_is_seen_by_whoever_saw_the_resource(contract_api: TestClient, contract_ctx: ServerContext,
                                                         tenanted: Samples) -> None:
    """A deleted resource answers 410 and is a DELETE in its own history and in the type's `_history?_since` to every
    caller who could read its last live version: a token of the whole account always, a subtree token whose `sees`
    holds it; to the others it is unknown (404, no entry)."""
    rtype = tenanted.resource_type
    if not tenanted.deleted or _provider(contract_ctx, tenanted) is None:
        return
    callers = [(frozenset(tenanted.deleted), frozenset(), _headers(contract_ctx, account=tenanted.account))]
    callers += [(scope.sees & tenanted.deleted, frozenset(scope.departures),
                 _headers(contract_ctx, roots=list(scope.roots))) for scope in tenanted.scopes]
    for seeing, left, headers in callers:
        for rid in sorted(tenanted.deleted):
            answer = contract_api.get(fhir_path(rtype, rid), headers=headers)
            if rid not in seeing:
                assert outcome_code(answer, 404) == "not-found", rid
                continue
            assert outcome_code(answer, 410) == "deleted", rid
            history = contract_api.get(fhir_path(rtype, rid, "_history"), headers=headers).json()
            assert history["entry"][0]["request"]["method"] == "DELETE", rid
        # and what left its view: a DELETE at the instant it left (issue 37: a sync copy converges)
        assert _deletions_walked(contract_api, rtype, headers) == seeing | left


def test_capability_entry_lists_everything_declared(contract_api: TestClient, contract_ctx: ServerContext,
                                                    samples: Samples) -> None:
    statement = contract_api.get(fhir_path("metadata")).json()
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
    references = {f"{samples.resource_type}:{p.name}" for p in provider.params_by_name.values()
                  if p.type == "reference"}
    assert references <= set(entry.get("searchInclude", ()))


def test_errors_are_operation_outcomes(contract_api: TestClient, samples: Samples) -> None:
    rtype = samples.resource_type
    for rid in (*UNKNOWN_IDS, *sorted(samples.hidden)):
        assert outcome_code(contract_api.get(fhir_path(rtype, rid)), 404) == "not-found"
    for name, value in samples.bad_values:
        outcome_code(contract_api.get(fhir_path(rtype), params={name: value}), 400)
    outcome_code(contract_api.get(fhir_path(rtype), params={"no-such-parameter": "x"}, headers=STRICT), 400)
    refused = _refuses_unknown(contract_api)  # fhir.unknown_parameters: refuse (the default)
    plain = contract_api.get(fhir_path(rtype), params={"no-such-parameter": "x"})
    assert plain.status_code == (400 if refused else 200), plain.text
    lenient = contract_api.get(fhir_path(rtype), params={"no-such-parameter": "x"}, headers=LENIENT)
    assert lenient.status_code == 200, lenient.text


# what `from server.contract.checks import *` brings into a test module: the checks (every one: a test says so),
# their fixtures and their cases
__all__ = [
    "contract_api", "contract_context_subjects", "contract_ctx", "contract_database", "contract_postgres",
    "contract_subjects",
    "pytest_generate_tests",
    "test_a_subtree_token_sees_only_its_part", "test_another_account_sees_nothing",
    "test_capability_entry_lists_everything_declared", "test_errors_are_operation_outcomes",
    "test_every_provider_of_the_subjects_has_samples", "test_history_and_vread",
    "test_include_and_revinclude_every_reference_parameter", "test_paging_visits_each_match_once", "test_read",
    "test_the_look_up_finds_what_the_search_finds", "test_a_scope_with_the_search_as_its_query_sees_its_matches_only",
    "test_a_deletion_is_seen_by_whoever_saw_the_resource",
    "test_samples_cover_every_declared_search_parameter", "test_search_by_each_parameter",
]
