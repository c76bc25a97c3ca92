"""Issue 41 item 3: Organizations beyond data sources. `load organizations` publishes a data source's directory
(facility owners, networks, partners) as Organizations with their own ids, partOf, type and identifiers, served
under the one Organization type beside the data sources, scoped by the data source's account, versioned; a
Location's managingOrganization still names its data source. Both backends."""
from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from plugins.orgunits.organization import DIRECTORY_IDS
from server.app import create_app
from server.contract import load_files
from server.engine.context import ServerContext
from server.errors import LoadError
from tests.support.contexts import bearer, pyramid_context
from tests.support.data import NOW
from tests.support.fixtures import context_fixture
from plugins.orgunits.admin import remove_source
from plugins.orgunits.writer import ensure_data_source

GOVT = {"system": "http://terminology.hl7.org/CodeSystem/organization-type", "code": "govt", "display": "Government"}
FAITH = {"system": "http://terminology.hl7.org/CodeSystem/organization-type", "code": "cg", "display": "Community Group"}
FIRST = [{"code": "MOH", "name": "Ministry of Health", "type": GOVT},
         {"code": "CHAK", "name": "Christian Health Association of Kenya", "type": FAITH},
         {"code": "CHAK-N", "name": "CHAK North", "partof": "CHAK"}]
SECOND = [{"code": "MOH", "name": "Ministry of Health", "type": GOVT},  # unchanged
          {"code": "CHAK", "name": "Christian Health Assoc. of Kenya", "type": FAITH}]  # renamed; CHAK-N dropped
SOURCE = "ministere-de-la-sante"


def _file(tmp: Path, name: str, organizations: list[dict[str, Any]]) -> Path:
    path = tmp / name
    path.write_text(json.dumps({"organizations": organizations}), encoding="utf-8")
    return path


def _load(ctx: ServerContext, path: Path, **options: Any) -> Any:
    [report] = load_files(ctx.settings, "organizations", path, **{"data_source": SOURCE, **options})  # defaults: the CLI's
    ctx.freshness.expire()
    return report


def _partner(engine: Any) -> None:
    with engine.begin() as conn:
        ensure_data_source(conn, "Partner MoH", now=NOW, account="partner")
        ensure_data_source(conn, "Network", now=NOW)  # a second data source of the default account, with no units


def _build(url: str, var: Path) -> ServerContext:
    ctx = pyramid_context(url, var, _partner)
    first = _load(ctx, _file(var, "first.json", FIRST))
    assert (first.inserted, first.resource_type) == (3, "Organization")
    return ctx


ctx = context_fixture(_build)


@pytest.fixture(scope="module")
def api(ctx: ServerContext) -> Iterator[TestClient]:
    with TestClient(create_app(ctx.settings, context=ctx), base_url="http://testserver") as client:
        client.headers.update(bearer(ctx.settings))
        yield client


def _bundle(api: TestClient, query: str) -> dict[str, Any]:
    answer = api.get(f"/fhir/Organization?{query}")
    assert answer.status_code == 200, answer.text
    return answer.json()


def _names(bundle: dict[str, Any]) -> list[str]:
    return sorted(e["resource"]["name"] for e in bundle.get("entry", ()) if e["search"]["mode"] == "match")


def test_directory_organizations_are_served_with_their_own_ids(api: TestClient) -> None:
    every = _bundle(api, "_count=50&identifier:not=network")  # the token of the default account
    assert _names(every) == ["CHAK North", "Christian Health Association of Kenya", "Ministry of Health",
                             "Ministère de la Santé"]
    ids = sorted(int(e["resource"]["id"]) for e in every["entry"])
    assert ids[0] < DIRECTORY_IDS <= ids[1]  # the data source's id, then theirs: apart


@pytest.mark.parametrize("query, names", [
    pytest.param("identifier=CHAK", ["Christian Health Association of Kenya"], id="identifier"),
    pytest.param("identifier=https://orgunit-fhir.example.org/fhir/sid/organization|MOH", ["Ministry of Health"],
                 id="identifier-system"),
    pytest.param("identifier=ministere-de-la-sante", ["Ministère de la Santé"], id="data-source-slug"),
    pytest.param("type=cg", ["Christian Health Association of Kenya"], id="own-type"),
    pytest.param("type=govt", ["Ministry of Health", "Ministère de la Santé", "Network"], id="type-shared-with-data-sources"),
    pytest.param("name=chak", ["CHAK North"], id="name"),
    pytest.param("partof:missing=false", ["CHAK North"], id="part-of-something"),
    pytest.param("partof.identifier=CHAK", ["CHAK North"], id="chained-partof"),
])
def test_searched_by_each_parameter(api: TestClient, query: str, names: list[str]) -> None:
    assert _names(_bundle(api, query)) == names


def test_partof_refers_to_the_parent_and_includes_it(api: TestClient) -> None:
    north = _bundle(api, "name=chak north&_include=Organization:partof")
    [child] = [e["resource"] for e in north["entry"] if e["search"]["mode"] == "match"]
    [parent] = [e["resource"] for e in north["entry"] if e["search"]["mode"] == "include"]
    assert child["partOf"] == {"reference": f"Organization/{parent['id']}"}
    assert parent["identifier"] == [{"use": "official", "system": "https://orgunit-fhir.example.org/fhir/sid/organization",
                                     "value": "CHAK"}]
    assert parent["type"] == [{"coding": [FAITH]}]


def test_a_location_still_names_its_data_source(api: TestClient) -> None:
    location = api.get("/fhir/Location/30").json()
    source = api.get(f"/fhir/{location['managingOrganization']['reference']}").json()
    assert source["name"] == "Ministère de la Santé" and int(source["id"]) < DIRECTORY_IDS


def test_another_accounts_token_sees_none(api: TestClient, ctx: ServerContext) -> None:
    partner = bearer(ctx.settings, account="partner")
    assert _names(api.get("/fhir/Organization", headers=partner).json()) == ["Partner MoH"]
    moh = _bundle(api, "identifier=MOH")["entry"][0]["resource"]["id"]
    assert api.get(f"/fhir/Organization/{moh}", headers=partner).status_code == 404
    assert api.get(f"/fhir/Organization/{moh}/_history", headers=partner).status_code == 404


def test_a_second_load_with_delete_missing_versions_changes_and_deletes_what_it_leaves_out(
        ctx: ServerContext, api: TestClient, tmp_path: Path) -> None:
    chak = _bundle(api, "identifier=CHAK")["entry"][0]["resource"]
    north = _bundle(api, "identifier=CHAK-N")["entry"][0]["resource"]
    report = _load(ctx, _file(tmp_path, "second.json", SECOND), delete_missing=True)
    assert (report.inserted, report.updated, report.unchanged, report.deleted, report.missing) == (0, 1, 1, 1, 0)
    assert (report.deleted_ids, report.deleted_named) == ((north["id"],), (f"CHAK-N 'CHAK North' (id {north['id']})",))
    renamed = api.get(f"/fhir/Organization/{chak['id']}").json()
    assert renamed["name"] == "Christian Health Assoc. of Kenya" and renamed["meta"]["versionId"] == "2"
    first = api.get(f"/fhir/Organization/{chak['id']}/_history/1").json()  # the version's snapshot
    assert first["name"] == "Christian Health Association of Kenya" and first["type"] == [{"coding": [FAITH]}]
    assert api.get(f"/fhir/Organization/{north['id']}").status_code == 410
    history = api.get("/fhir/Organization/_history").json()
    assert any(e["request"]["method"] == "DELETE" and e["request"]["url"] == f"Organization/{north['id']}"
               for e in history["entry"])
    again = _load(ctx, _file(tmp_path, "again.json", SECOND))
    assert (again.inserted, again.updated, again.unchanged, again.deleted, again.missing) == (0, 0, 2, 0, 0)
    restored = _load(ctx, _file(tmp_path, "restored.json", FIRST))  # back as they were: CHAK-N a new version
    assert (restored.inserted, restored.updated, restored.unchanged, restored.deleted) == (0, 2, 1, 0)
    assert api.get(f"/fhir/Organization/{north['id']}").json()["meta"]["versionId"] == "3"


@pytest.mark.parametrize("code, options, counts, status, named", [
    pytest.param("AMREF", {}, (1, 0, 0, 3), 200, "missing", id="without-delete-missing-the-others-stay"),
    pytest.param("PATH", {"dry_run": True}, (1, 0, 0, 3), 200, "missing", id="dry-run-without-delete-missing"),
    pytest.param("MSF", {"dry_run": True, "delete_missing": True}, (1, 0, 3, 0), 200, "deleted",
                 id="dry-run-reports-the-deletions-and-writes-none"),
])
def test_a_file_leaving_organizations_out_keeps_them_unless_told(ctx: ServerContext, api: TestClient, tmp_path: Path,
                                                                 code: str, options: dict[str, Any],
                                                                 counts: tuple[int, int, int, int], status: int,
                                                                 named: str) -> None:
    """Several packages feed one data source's directory: a file holding only its own Organizations leaves the
    others as they were (counted missing, named in a note), unless `--delete-missing`; a dry run reports either and
    writes nothing."""
    # CHAK, CHAK-N and MOH live (and nothing else), whatever an earlier case did
    _load(ctx, _file(tmp_path, "reset.json", FIRST), delete_missing=True)
    live = {code: _bundle(api, f"identifier={code}")["entry"][0]["resource"] for code in ("MOH", "CHAK", "CHAK-N")}
    # a file of another package feeding the same directory: its own Organization, none of FIRST's
    report = _load(ctx, _file(tmp_path, "other.json", [{"code": code, "name": f"Partner {code}"}]), **options)
    assert (report.inserted, report.updated, report.deleted, report.missing) == counts
    listed = report.deleted_named if named == "deleted" else report.missing_named
    assert listed == tuple(f"{code} {live[code]['name']!r} (id {live[code]['id']})"
                           for code in sorted(live, key=lambda code: int(live[code]["id"])))
    assert (report.deleted_ids if named == "deleted" else report.missing_ids) == \
        tuple(sorted((r["id"] for r in live.values()), key=int))
    assert any("load with --delete-missing" in note for note in report.notes) == (named == "missing")
    assert [api.get(f"/fhir/Organization/{r['id']}").status_code for r in live.values()] == [status] * 3
    assert bool(_bundle(api, f"identifier={code}").get("entry")) == (not options.get("dry_run"))


@pytest.mark.parametrize("organizations, words", [
    pytest.param([{"code": "A", "name": "a"}, {"code": "A", "name": "b"}], "code 'A' is also organization #1",
                 id="code-twice"),
    pytest.param([{"code": "A", "name": "a", "partof": "Z"}], "partof 'Z' names no organization", id="unknown-parent"),
    pytest.param([{"code": "A", "name": "a", "partof": "B"}, {"code": "B", "name": "b", "partof": "A"}], "a cycle",
                 id="cycle"),
    pytest.param([{"code": "", "name": "a"}], "needs a code and a name", id="no-code"),
    pytest.param([{"code": "A", "name": "a", "type": {"code": "x"}}], "type must be a Coding", id="bad-type"),
])
def test_a_file_that_cannot_be_published_is_refused_naming_the_record(ctx: ServerContext, tmp_path: Path,
                                                                      organizations: list[dict[str, Any]],
                                                                      words: str) -> None:
    with pytest.raises(LoadError, match=words):
        _load(ctx, _file(tmp_path, "bad.json", organizations))


def test_an_unknown_data_source_is_refused(ctx: ServerContext, tmp_path: Path) -> None:
    with pytest.raises(LoadError, match="no data source of account 'default'"):
        _load(ctx, _file(tmp_path, "ok.json", FIRST), data_source="nope")


def test_a_removed_data_source_takes_its_directory_along_and_a_purge_erases_it(ctx: ServerContext, api: TestClient,
                                                                               tmp_path: Path) -> None:
    """Removed: its directory Organizations are deleted versions (410); purged: erased (404), and their ids are
    never given again."""
    _load(ctx, _file(tmp_path, "net.json", [{"code": "NET", "name": "Referral network"},
                                            {"code": "NET-E", "name": "Eastern network", "partof": "NET"}]),
          data_source="network")
    ids = sorted(e["resource"]["id"] for e in _bundle(api, "name=referral,eastern")["entry"])
    assert len(ids) == 2
    with ctx.db.begin() as conn:
        remove_source(conn, "default", "Network", force=True, now=NOW + timedelta(days=400))
    ctx.freshness.expire()
    assert [api.get(f"/fhir/Organization/{i}").status_code for i in ids] == [410, 410]
    with ctx.db.begin() as conn:
        remove_source(conn, "default", "Network", force=True, now=NOW + timedelta(days=401), purge=True)
    ctx.freshness.expire()
    assert [api.get(f"/fhir/Organization/{i}").status_code for i in ids] == [404, 404]
    with ctx.db.begin() as conn:
        ensure_data_source(conn, "Network", now=NOW + timedelta(days=402))
    _load(ctx, _file(tmp_path, "net2.json", [{"code": "NET", "name": "Referral network again"}]), data_source="network")
    again = _bundle(api, "name=referral network again")["entry"][0]["resource"]["id"]
    assert int(again) > max(int(i) for i in ids)  # a purged id is never named again
