"""`$export` is the engine's, for every table-backed provider: over the contract suite's subjects (the shipped
org-unit providers and the third-party proof package's versioned, unrendered HealthcareService, scoped through a
reference), each type's export holds exactly its sample resources, byte for byte as reads answer them, and a
subtree token's export exactly what that token sees. On both backends."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from starlette.testclient import TestClient

from server.contract import Samples
from server.contract.context import contract_context
from server.engine.context import ServerContext
from server.declare.provider import ResourceProvider
from server.settings import BulkSettings
from plugins.orgunits.contract_samples import SUBJECT as ORGUNITS
from tests.proof.contract_samples import SUBJECT as PROOF
from tests.support.bulk import export, lines
from tests.support.contexts import bearer
from tests.support.fixtures import client_fixture, context_fixture

SAMPLES = {s.resource_type: s for s in (*ORGUNITS.samples, *PROOF.samples)}


@contextmanager
def exporting(url: str, var: Path) -> Iterator[ServerContext]:
    """Every contract subject's samples, exported in files of 3 resources."""
    with contract_context(url, var, (ORGUNITS, PROOF)) as context:
        yield replace(context, settings=replace(context.settings, bulk=BulkSettings(file_resources=3)))


ctx = context_fixture(exporting)
api = client_fixture()


TABLE_BACKED = {"HealthcareService", "Location", "Organization", "Practitioner", "PractitionerRole"}  # canonical: static, not exported


def test_every_table_backed_provider_is_exported(api: TestClient, ctx: ServerContext) -> None:
    headers = bearer(ctx.settings)
    assert {o["type"] for o in export(api, headers=headers)["output"]} == TABLE_BACKED == {
        t for t in SAMPLES if isinstance(ctx.registry.providers.get(t), ResourceProvider)}


@pytest.mark.parametrize("samples", [pytest.param(s, id=s.resource_type) for s in SAMPLES.values()
                                     if s.resource_type in TABLE_BACKED])
def test_each_type_exports_its_resources_as_reads_answer_them(api: TestClient, ctx: ServerContext,
                                                              samples: Samples) -> None:
    headers = bearer(ctx.settings, account=samples.account)
    rtype = samples.resource_type
    found = export(api, f"/fhir/{rtype}/$export", headers)
    got = lines(api, found["output"], headers).get(rtype, [])
    ids = [orjson.loads(line)["id"] for line in got]
    assert set(ids) == samples.ids and len(ids) == len(samples.ids)
    for rid, line in zip(ids, got):
        assert api.get(f"/fhir/{rtype}/{rid}", headers=headers).content == line, rid
    for scope in samples.scopes:
        scoped = bearer(ctx.settings, account=samples.account, org_unit_roots=list(scope.roots))
        got = lines(api, export(api, f"/fhir/{rtype}/$export", scoped)["output"], scoped).get(rtype, [])
        assert {orjson.loads(line)["id"] for line in got} == scope.sees - samples.deleted, scope.roots


def test_since_covers_every_provider(api: TestClient, ctx: ServerContext) -> None:
    headers = bearer(ctx.settings)
    found = export(api, headers=headers, _since="1990-01-01T00:00:00Z")
    assert {o["type"] for o in found["output"]} == TABLE_BACKED
    deleted = {orjson.loads(b)["entry"][0]["request"]["url"] for b in lines(api, found["deleted"], headers).get(
        "Bundle", [])}
    assert deleted == {f"{t}/{i}" for t, s in SAMPLES.items() if t in TABLE_BACKED for i in s.deleted
                       if s.account == "default"}


@pytest.mark.parametrize("roots", sorted({s.roots for t, samples in SAMPLES.items() if t in TABLE_BACKED
                                          for s in samples.scopes}))
def test_since_lists_a_deletion_to_whoever_saw_the_resource(api: TestClient, ctx: ServerContext,
                                                            roots: tuple[str, ...]) -> None:
    """Issue 36: a subtree token's `$export?_since` lists the deletions of what it saw (a practitioner deleted with
    its roles included: it was deleted for no one), nothing of what it did not; and (issue 37) what left its view
    (a service moved out of its region)."""
    headers = bearer(ctx.settings, org_unit_roots=list(roots))
    found = export(api, headers=headers, _since="1990-01-01T00:00:00Z")
    deleted = {orjson.loads(b)["entry"][0]["request"]["url"] for b in lines(api, found["deleted"], headers).get(
        "Bundle", [])}
    declared = {t: scope for t, s in SAMPLES.items() if t in TABLE_BACKED for scope in s.scopes if scope.roots == roots}
    assert {d for d in deleted if d.split("/")[0] in declared} == {
        f"{t}/{i}" for t, scope in declared.items() for i in (SAMPLES[t].deleted & scope.sees) | set(scope.departures)}
