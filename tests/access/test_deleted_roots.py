"""A token limited to subtrees whose root is deleted is shown the deletions of what it saw (issue 36: a deletion is
seen by whoever saw the resource; issue 37: every copy converges). Its roots were resolved among live units only, so
once its root went (`--delete-missing`, its data source or account removed) the token saw nothing at all: 404 for
every unit of its subtree, no `DELETE` in `_history?_since` or `$export?_since`, and its copy kept every unit for
ever. Roots by `Location/id`, bare id and identifier, on both backends (the small pyramid: 1 > 2 > 10 > 20 > 30, 31;
10 > 32)."""
from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Connection
from starlette.testclient import TestClient

from plugins.orgunits.admin import remove_account, remove_source
from plugins.orgunits.history import delete_units
from server.engine.context import ServerContext
from tests.support.bulk import deleted_ids, export
from tests.support.contexts import bearer
from tests.support.data import NOW, UUID_1

LATER = NOW + timedelta(days=1)
SINCE = "2025-03-05T00:00:00Z"  # after the pyramid's load, before the deletion


@pytest.fixture
def api(pyramid_api: tuple[TestClient, ServerContext]) -> tuple[TestClient, ServerContext]:
    return pyramid_api


def _source_removed(conn: Connection) -> None:
    remove_source(conn, "default", "Ministère de la Santé", force=True, now=LATER)


def _account_removed(conn: Connection) -> None:
    remove_account(conn, "default", force=True, now=LATER)


def _district_deleted(conn: Connection) -> None:  # as --delete-missing does for the units a file no longer lists
    delete_units(conn, [10, 20, 30, 31, 32], LATER, what="deleting the district")


# (how the root goes, the roots, the units of the subtree, deleted)
@pytest.mark.parametrize(("deletion", "roots", "subtree"), [
    pytest.param(_source_removed, ["Location/10"], {"10", "20", "30", "31", "32"}, id="data-source-removed"),
    pytest.param(_account_removed, ["10"], {"10", "20", "30", "31", "32"}, id="account-removed-bare-id"),
    pytest.param(_account_removed, [f"urn:ietf:rfc:3986|urn:uuid:{UUID_1}"],
                 {"1", "2", "3", "10", "11", "20", "30", "31", "32"}, id="account-removed-identifier-root"),
    pytest.param(_district_deleted, ["Location/10"], {"10", "20", "30", "31", "32"}, id="delete-missing-the-root"),
    pytest.param(_district_deleted, ["Location/20"], {"20", "30", "31"}, id="delete-missing-below-the-root"),
])
def test_a_token_whose_root_is_deleted_is_shown_the_deletions_of_its_subtree(
        api: tuple[TestClient, ServerContext], deletion: Callable[[Connection], Any], roots: list[str],
        subtree: set[str]) -> None:
    client, ctx = api
    headers = bearer(ctx.settings, org_unit_roots=roots)
    before = export(client, headers=headers)
    with ctx.db.begin() as conn:
        deletion(conn)
    ctx.freshness.expire()
    history = client.get("/fhir/Location/_history", params={"_since": SINCE, "_count": 100}, headers=headers).json()
    deletions = {e["request"]["url"].rsplit("/", 1)[1] for e in history.get("entry", ())
                 if e["request"]["method"] == "DELETE"}
    assert deletions == subtree
    for rid in subtree:
        assert client.get(f"/fhir/Location/{rid}", headers=headers).status_code == 410, rid
    others = {"1", "2", "3", "10", "11", "20", "30", "31", "32"} - subtree
    for rid in others:  # nothing outside the subtree, deleted or not
        assert client.get(f"/fhir/Location/{rid}", headers=headers).status_code == 404, rid
    assert deleted_ids(client, export(client, headers=headers, _since=before["transactionTime"]),
                       headers) == {f"Location/{rid}" for rid in subtree}
