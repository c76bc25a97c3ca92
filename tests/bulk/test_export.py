"""Bulk Data `$export` over the two-account universe of tests.support.scoping, on both backends: the kick-off's
parameters, the status and the manifest, files byte-identical to reads and split at bulk.file_resources, exactly
what each caller may read, the data at transactionTime (a load committing during the export appears in none of its
files; `_since` then returns exactly what it changed), jobs shared by the workers, expiry."""
from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from plugins.orgunits.writer import write_units
from server.app import create_app
from server.bulk import runner as bulk_runner
from server.bulk.files import directory
from server.bulk.jobs import now
from server.engine.context import ServerContext
from server.settings import BulkSettings
from server.storage.db import writing_engine
from tests.support.bulk import ASYNC, NDJSON, held, service, deleted_ids, export, kick_off, lines, manifest, versions
from tests.support.contexts import bearer, pyramid_context
from tests.support.fixtures import client_fixture, context_fixture
from tests.support.data import UNITS
from tests.support.scoping import ALPHA, BETA_V2, load_alpha, load_beta
from tests.support.sync import paused_load

ALPHA_HEADERS = {"account": "alpha"}
PER_FILE = 4


def exporting(url: str, var: Path) -> ServerContext:
    """The two-account universe, exported in files of PER_FILE resources."""
    context = pyramid_context(url, var, load_alpha, load_beta)
    bulk = BulkSettings(file_resources=PER_FILE, max_running=50)
    return replace(context, settings=replace(context.settings, bulk=bulk))


ctx = context_fixture(exporting)
api = client_fixture()


def search_ids(api: TestClient, headers: dict[str, str], rtype: str) -> set[str]:
    bundle = api.get(f"/fhir/{rtype}", params={"_count": 100}, headers=headers).json()
    assert bundle["total"] == len(bundle.get("entry", []))
    return {e["resource"]["id"] for e in bundle.get("entry", [])}


@pytest.mark.parametrize("path, params, headers, status, says", [
    pytest.param("/fhir/$export", {}, {"Prefer": ""}, 400, "Prefer: respond-async", id="without-respond-async"),
    pytest.param("/fhir/$export", {"_outputFormat": "text/csv"}, {}, 400, "_outputFormat", id="output-format"),
    pytest.param("/fhir/$export", {"_type": "Patient"}, {}, 400, "not exported", id="type-not-served"),
    pytest.param("/fhir/$export", {"_type": "CodeSystem"}, {}, 400, "not exported", id="type-canonical"),
    pytest.param("/fhir/Location/$export", {"_type": "Organization"}, {}, 400, "Location only", id="type-other-level"),
    pytest.param("/fhir/$export", {"_elements": "id"}, {}, 400, "_elements", id="elements-not-supported"),
    pytest.param("/fhir/$export", {"_since": "yesterday"}, {}, 400, "_since", id="since-malformed"),
    pytest.param("/fhir/$export", {"_since": "2025-01-01T00:00:00"}, {}, 400, "no zone", id="since-zoneless"),
    pytest.param("/fhir/$export", {"_since": ""}, {}, 400, "_since is empty", id="since-empty"),
    pytest.param("/fhir/$export", [("_since", "2025-01-01T00:00:00Z"), ("_since", "2026-01-01T00:00:00Z")], {}, 400,
                 "more than once", id="since-repeated"),
    pytest.param("/fhir/Patient/$export", {}, {}, 404, "not supported", id="level-type-not-served"),
    pytest.param("/fhir/CodeSystem/$export", {}, {}, 404, "not exported", id="level-canonical"),
    pytest.param("/fhir/$export", {}, {"Accept": "text/csv"}, 406, "", id="accept"),
    pytest.param("/fhir/$export-status/0123456789abcdef0123456789abcdef", {}, {}, 404, "no export job",
                 id="status-unknown-job"),
    pytest.param("/fhir/$export-status/..%2F..%2Fetc", {}, {}, 404, "", id="status-not-a-job-id"),
    pytest.param("/fhir/$export-file/0123456789abcdef0123456789abcdef/Location-1.ndjson", {}, {}, 404,
                 "no export job", id="file-unknown-job"),
])
def test_kick_off_refuses_what_it_cannot_honour(api: TestClient, ctx: ServerContext, path: str,
                                                params: Any, headers: dict[str, str], status: int,
                                                says: str) -> None:
    answer = api.get(path, params=params, headers={**ASYNC, **bearer(ctx.settings, **ALPHA_HEADERS), **headers})
    assert answer.status_code == status, answer.text
    assert answer.json()["resourceType"] == "OperationOutcome" and says in answer.text


@pytest.mark.parametrize("method", ["DELETE", "POST", "PUT"])
def test_other_methods_are_not_allowed(api: TestClient, ctx: ServerContext, method: str) -> None:
    status = kick_off(api, headers=bearer(ctx.settings, **ALPHA_HEADERS))
    for url in ("/fhir/$export", status):
        answer = api.request(method, url, headers={**ASYNC, **bearer(ctx.settings, **ALPHA_HEADERS)})
        assert answer.status_code == 405 and set(answer.headers["allow"].split(", ")) == {"GET", "HEAD"}, answer.text


def test_lenient_handling_ignores_what_is_not_supported(api: TestClient, ctx: ServerContext) -> None:
    found = export(api, headers={**bearer(ctx.settings, **ALPHA_HEADERS), "Prefer": "respond-async, handling=lenient"},
                   _type="Location,Patient", _elements="id")
    assert {o["type"] for o in found["output"]} == {"Location"}


def test_system_export_is_every_resource_the_caller_reads_byte_for_byte(api: TestClient, ctx: ServerContext) -> None:
    headers = bearer(ctx.settings, **ALPHA_HEADERS)
    status = kick_off(api, headers=headers)
    assert status.startswith("http://testserver/fhir/$export-status/")
    found = manifest(api, status, headers)
    assert found["requiresAccessToken"] is True and found["request"] == "http://testserver/fhir/$export"
    assert found["deleted"] == [] and found["error"] == []
    assert [o["count"] for o in found["output"] if o["type"] == "Location"] == [4, 4, 1]  # split at PER_FILE
    exported = lines(api, found["output"], headers)
    assert set(exported) == {"Location", "Organization"}
    for rtype, got in exported.items():
        ids = [orjson.loads(line)["id"] for line in got]
        assert set(ids) == search_ids(api, headers, rtype) and len(ids) == len(set(ids)), rtype
        for rid, line in zip(ids, got):
            assert api.get(f"/fhir/{rtype}/{rid}", headers=headers).content == line, (rtype, rid)
    assert {int(i) for i in versions(exported["Location"])} == ALPHA


@pytest.mark.parametrize("claims, expected", [
    pytest.param({"account": "alpha"}, ALPHA, id="account-alpha"),
    pytest.param({"account": "beta"}, BETA_V2, id="account-beta"),
    pytest.param({"account": "alpha", "org_unit_roots": ["10"]}, {10, 20, 30, 31, 32}, id="alpha-subtree-10"),
    pytest.param({"account": "alpha", "org_unit_roots": []}, set(), id="alpha-no-roots"),
    pytest.param({"account": "gamma"}, set(), id="unknown-account"),
])
def test_an_export_holds_exactly_what_the_caller_may_read(api: TestClient, ctx: ServerContext,
                                                         claims: dict[str, Any], expected: set[int]) -> None:
    headers = bearer(ctx.settings, **claims)
    exported = lines(api, export(api, "/fhir/Location/$export", headers)["output"], headers)
    assert {int(i) for i in versions(exported.get("Location", []))} == expected
    assert {int(i) for i in search_ids(api, headers, "Location")} == expected


@pytest.mark.parametrize("scope, types", [
    pytest.param("system/Location.read", {"Location"}, id="v1-location"),
    pytest.param("system/*.rs", {"Location", "Organization"}, id="v2-every-type"),
    pytest.param("system/Organization.rs", {"Organization"}, id="v2-organization"),
])
def test_smart_scopes_narrow_the_types(api: TestClient, ctx: ServerContext, scope: str, types: set[str]) -> None:
    headers = bearer(ctx.settings, account="alpha", scope=f"{scope} service_org_units")
    assert {o["type"] for o in export(api, headers=headers)["output"]} == types
    if "Location" not in types:
        answer = api.get("/fhir/$export", params={"_type": "Location"}, headers={**ASYNC, **headers})
        assert answer.status_code == 403, answer.text


@pytest.mark.parametrize("scope, status", [
    pytest.param("system/Location.r", 202, id="read-only"),
    pytest.param("system/Location.rs", 202, id="read-and-search"),
    pytest.param("system/Location.s", 403, id="search-only"),
    pytest.param("system/Organization.rs", 403, id="another-type"),
])
def test_a_type_level_export_needs_read_on_its_type(api: TestClient, ctx: ServerContext, scope: str,
                                                    status: int) -> None:
    headers = bearer(ctx.settings, account="alpha", scope=f"{scope} service_org_units")
    answer = api.get("/fhir/Location/$export", headers={**ASYNC, **headers})
    assert answer.status_code == status, answer.text
    if status == 403:
        assert "system/Location.r" in answer.json()["issue"][0]["diagnostics"]


def test_a_job_is_its_callers_only(api: TestClient, ctx: ServerContext) -> None:
    status = kick_off(api, headers=bearer(ctx.settings, account="alpha", sub="one"))
    found = manifest(api, status, bearer(ctx.settings, account="alpha", sub="one"))
    file_url = found["output"][0]["url"]
    for other in ({"account": "beta", "sub": "one"}, {"account": "alpha", "sub": "two"},
                  {"account": "alpha", "sub": "one", "org_unit_roots": ["10"]},
                  {"account": "alpha", "sub": "one", "scope": "system/Organization.rs service_org_units"}):
        for url in (status, file_url):
            answer = api.get(url, headers={**NDJSON, **bearer(ctx.settings, **other)})
            assert answer.status_code == 404, (other, url)
    again = api.get(file_url, headers={**NDJSON, **bearer(ctx.settings, account="alpha", sub="one")})  # a new token, same caller
    assert again.status_code == 200
    assert api.get(file_url.rsplit("/", 1)[0] + "/Location-9.ndjson", headers=bearer(ctx.settings, account="alpha", sub="one")
                   ).status_code == 404
    assert api.get(file_url).status_code == 401  # requiresAccessToken


def _rename(ctx: ServerContext, ids: set[int], suffix: str) -> None:
    """A load: the units `ids` renamed (each and its children get a new version)."""
    with ctx.db.connect() as conn, conn.begin():
        version = conn.exec_driver_sql("SELECT source_version_id FROM org_unit WHERE id = 1").scalar_one()
        write_units(conn, [replace(u, name=u.name + suffix) for u in UNITS if u.id in ids], version, now())
    ctx.freshness.expire()


def test_a_load_committed_during_the_export_is_in_none_of_its_files_and_since_returns_exactly_it(
        api: TestClient, ctx: ServerContext, monkeypatch: pytest.MonkeyPatch) -> None:
    headers = bearer(ctx.settings, **ALPHA_HEADERS)
    before = export(api, headers=headers)
    before_lines = lines(api, before["output"], headers)
    release, renamed = threading.Event(), threading.Event()

    def load() -> None:  # the load commits after transactionTime, before the reads
        if not renamed.is_set():
            renamed.set()
            _rename(ctx, {20, 32}, " (during)")

    monkeypatch.setattr(bulk_runner, "resources", held(release, load))
    release.set()
    during = export(api, headers=headers)
    monkeypatch.undo()
    assert renamed.is_set()
    during_lines = lines(api, during["output"], headers)
    assert during_lines == before_lines  # the state at its transactionTime, byte for byte
    for line in during_lines["Location"]:  # the changed units as they were: their previous version, as vread gives it
        resource = orjson.loads(line)
        vread = api.get(f"/fhir/Location/{resource['id']}/_history/{resource['meta']['versionId']}", headers=headers)
        assert vread.content == line
    now_current = versions(lines(api, export(api, headers=headers)["output"], headers)["Location"])
    changed = {rid for rid, vid in now_current.items() if vid != versions(during_lines["Location"])[rid]}
    assert changed == {"20", "30", "31", "32"}  # the renamed units and the children of 20
    since = export(api, headers=headers, _since=during["transactionTime"])
    assert set(versions(lines(api, since["output"], headers).get("Location", []))) == changed
    assert {o["type"] for o in since["output"]} == {"Location"}  # no Organization changed


def test_since_lists_the_deletions(api: TestClient, ctx: ServerContext) -> None:
    headers = bearer(ctx.settings, account="beta")
    found = export(api, headers=headers, _since="2020-01-01T00:00:00Z")
    assert deleted_ids(api, found, headers) == {"Location/204"}
    assert [d["type"] for d in found["deleted"]] == ["Bundle"]
    assert deleted_ids(api, export(api, headers=headers), headers) == set()  # without _since: none listed
    assert export(api, headers=headers, _since="2999-01-01T00:00:00Z")["output"] == []


def test_a_load_open_at_the_kick_off_is_in_the_export_since_its_transaction_time(api: TestClient,
                                                                                  ctx: ServerContext) -> None:
    """A load holding the writer lock at the kick-off (its versions stamped, not committed): transactionTime is
    the sync point, before its stamp, so the files hold the state without it, and the next export `_since` that
    transactionTime has it (SQLite: the kick-off's job row waits for the load's commit)."""
    headers = bearer(ctx.settings, **ALPHA_HEADERS)
    unit = replace(next(u for u in UNITS if u.id == 3), name="Hauts-Bassins (open)")
    with writing_engine(ctx.settings) as engine, \
            paused_load(engine, [unit], data_source="Ministère de la Santé", account="alpha", version=3) as load:
        threading.Timer(0.5, load.release.set).start()
        during = export(api, headers=headers)
    ctx.freshness.expire()
    exported = lines(api, during["output"], headers)
    names = {orjson.loads(line)["id"]: orjson.loads(line)["name"] for line in exported["Location"]}
    assert names["3"] == "Hauts-Bassins"
    since = lines(api, export(api, headers=headers, _since=during["transactionTime"])["output"], headers)
    assert {orjson.loads(line)["id"]: orjson.loads(line)["name"] for line in since["Location"]}["3"] == \
        "Hauts-Bassins (open)"


def test_jobs_and_files_are_shared_by_the_workers(ctx: ServerContext) -> None:
    """Two apps (two workers) over one database and one directory: either answers the other's job."""
    headers = bearer(ctx.settings, **ALPHA_HEADERS)
    with TestClient(create_app(ctx.settings, context=ctx)) as one, TestClient(create_app(ctx.settings, context=ctx)) as two:
        status = kick_off(one, headers=headers)
        found = manifest(two, status, headers)
        assert sum(len(v) for v in lines(two, found["output"], headers).values()) == len(ALPHA) + 1


def test_a_job_expires_with_its_files(ctx: ServerContext) -> None:
    """At its expiry, however long the export took: the service's clock is moved past it, not waited for."""
    settings = replace(ctx.settings, bulk=replace(ctx.settings.bulk, expire_seconds=60))
    headers = bearer(ctx.settings, **ALPHA_HEADERS)
    app = create_app(settings, context=replace(ctx, settings=settings))
    with TestClient(app) as client:
        status = kick_off(client, headers=headers)
        manifest(client, status, headers)
        job = directory(settings) / status.rsplit("/", 1)[1]
        assert any(job.iterdir())
        expires = parsedate_to_datetime(client.get(status, headers=headers).headers["Expires"])
        clocked = service(app.state.ctx)
        clocked.clock = lambda: expires - timedelta(seconds=1)
        assert client.get(status, headers=headers).status_code == 200 and job.exists()
        clocked.clock = lambda: expires + timedelta(seconds=1)  # the header is in seconds
        assert client.get(status, headers=headers).status_code == 404
        assert not job.exists()


def test_capabilities_instantiate_bulk_data_and_the_definition_is_served(api: TestClient, ctx: ServerContext) -> None:
    statement = api.get("/fhir/metadata", headers=bearer(ctx.settings, **ALPHA_HEADERS)).json()
    assert "http://hl7.org/fhir/uv/bulkdata/CapabilityStatement/bulk-data" in statement["instantiates"]
    assert {"name": "export", "definition": "http://hl7.org/fhir/uv/bulkdata/OperationDefinition/export"}.items() <= \
        statement["rest"][0]["operation"][0].items()
    location = next(r for r in statement["rest"][0]["resource"] if r["type"] == "Location")
    own = next(o["definition"] for o in location["operation"] if o["name"] == "export")
    definition = api.get("/fhir/OperationDefinition", params={"url": own}, headers=bearer(ctx.settings, **ALPHA_HEADERS)).json()
    assert definition["entry"][0]["resource"]["code"] == "export"


def test_the_server_stopping_fails_its_running_jobs(ctx: ServerContext, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    monkeypatch.setattr(bulk_runner, "resources", held(release))
    app = create_app(ctx.settings, context=ctx)
    headers = bearer(ctx.settings, **ALPHA_HEADERS)
    with TestClient(app) as client:
        status = kick_off(client, headers=headers)
        service(ctx).stopping.set()
        release.set()
        service(ctx).join()
        answer = client.get(status, headers=headers)
    assert answer.status_code == 500 and "stopped" in answer.text


def test_past_max_running_a_kick_off_answers_429(ctx: ServerContext, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    monkeypatch.setattr(bulk_runner, "resources", held(release))
    settings = replace(ctx.settings, bulk=replace(ctx.settings.bulk, max_running=1))
    app = create_app(settings, context=replace(ctx, settings=settings))
    headers = bearer(ctx.settings, **ALPHA_HEADERS)
    with TestClient(app) as client:
        status = kick_off(client, headers=headers)
        refused = client.get("/fhir/$export", headers={**ASYNC, **headers})
        assert refused.status_code == 429 and refused.headers["retry-after"], refused.text
        release.set()
        manifest(client, status, headers)
        kick_off(client, headers=headers)  # room again
