"""Issue 37 item 4: ids and versionIds are never given twice, purge or not, and the sync point never goes back. A
purge erases a load into the wrong account; what it erased stays named: a reload allocates ids above the purged ones,
a unit loaded again with its own id (Iaso's) continues its versions, a data source's Organization id is never given
again, and `Bundle.meta.lastUpdated` (the sync point) stays at or after what it was. On SQLite and PostgreSQL."""
from __future__ import annotations

from starlette.testclient import TestClient

from tests.support.contexts import IASO_CSV
from tests.support.operator import LAKELAND, LAKELAND_CSV, Operator, operator, settings_path

__all__ = ["operator", "settings_path"]  # fixtures


def sync_point(client: TestClient, resource_type: str = "Location") -> str:
    client.app.state.ctx.freshness.expire()  # type: ignore[attr-defined]
    return str(client.get(f"/fhir/{resource_type}/_history", params={"_count": 1}).json()["meta"]["lastUpdated"])


def lakeland_ids(client: TestClient) -> list[int]:
    client.app.state.ctx.freshness.expire()  # type: ignore[attr-defined]
    found = client.get("/fhir/Location", params={"_count": 100, "_elements": "id"}).json()
    return sorted(int(entry["resource"]["id"]) for entry in found["entry"])


def test_a_reload_after_a_purge_gives_new_ids_and_the_sync_point_stays(operator: Operator) -> None:
    operator.ok("demo", "--size", "20")
    operator.ok("load", "mapped", str(LAKELAND_CSV), "--mapping", str(LAKELAND), "--account", "wrong")
    with operator.consumer(account="wrong") as wrong:
        assert lakeland_ids(wrong) == list(range(21, 55))
    with operator.consumer() as client:  # the demo's consumer: its sync point follows every write
        before = {kind: sync_point(client, kind) for kind in ("Location", "Organization")}
        operator.ok("accounts", "remove", "wrong", "--purge", "--force")
        after = {kind: sync_point(client, kind) for kind in ("Location", "Organization")}
        assert all(after[kind] >= before[kind] for kind in before), (before, after)  # never back in time
    operator.ok("load", "mapped", str(LAKELAND_CSV), "--mapping", str(LAKELAND), "--account", "right")
    with operator.consumer(account="right") as right:
        assert lakeland_ids(right) == list(range(55, 89))  # 21..54 are never given again
        assert right.get("/fhir/Location/21").status_code == 404
        organization = right.get("/fhir/Organization").json()["entry"][0]["resource"]
        assert int(organization["id"]) > 2  # the purged data source's id (2) is not given again either


def test_an_id_of_the_source_loaded_again_after_a_purge_continues_its_versions(operator: Operator,
                                                                               tmp_path: object) -> None:
    """Iaso's ids are the source's own: loaded again after a purge, unit 2049004 goes on from its last version (v2,
    its rename) to v3, never a second v1 naming other content."""
    operator.ok("load", "iaso-csv", str(IASO_CSV), "--account", "wrong")
    renamed = IASO_CSV.read_text(encoding="utf-8-sig").replace(",Balave,", ",Balavé (renamed),")
    path = tmp_path / "renamed.csv"  # type: ignore[operator]
    path.write_text(renamed, encoding="utf-8")
    assert "1 updated" in operator.ok("load", "iaso-csv", str(path), "--account", "wrong")
    operator.ok("data-sources", "remove", "Iaso", "--account", "wrong", "--purge", "--force")
    operator.ok("load", "iaso-csv", str(IASO_CSV), "--account", "right")
    with operator.consumer(account="right") as client:
        found = client.get("/fhir/Location/2049004").json()
        assert (found["name"], found["meta"]["versionId"]) == ("Balave", "3")
        history = client.get("/fhir/Location/2049004/_history").json()
        assert [entry["resource"]["meta"]["versionId"] for entry in history["entry"]] == ["3"]
        assert client.get("/fhir/Location/2049004/_history/1").status_code == 404  # erased, never named again
        other = client.get("/fhir/Location/2049032").json()
        assert other["meta"]["versionId"] == "2"  # loaded once before the purge: v1 erased, v2 now
