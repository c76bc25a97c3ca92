"""Bulk Data `$export` from a test: kick off, poll to the manifest, download the files (TestClient or httpx)."""
from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import orjson

from server.engine import export_reader

ASYNC = {"Prefer": "respond-async", "Accept": "application/fhir+json"}
NDJSON = {"Accept": "application/fhir+ndjson"}


def kick_off(client: Any, path: str = "/fhir/$export", headers: Mapping[str, str] | None = None,
             **params: str) -> str:
    """The status URL of a new job."""
    answer = client.get(path, params=params, headers={**ASYNC, **(headers or {})})
    assert answer.status_code == 202, answer.text
    return str(answer.headers["content-location"])


def manifest(client: Any, status: str, headers: Mapping[str, str] | None = None, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        answer = client.get(status, headers=dict(headers or {}))
        if answer.status_code != 202:
            assert answer.status_code == 200, answer.text
            return answer.json()  # type: ignore[no-any-return]
        assert answer.headers["retry-after"] and "x-progress" in answer.headers
        assert time.monotonic() < deadline, "the export did not finish"
        time.sleep(0.02)


def export(client: Any, path: str = "/fhir/$export", headers: Mapping[str, str] | None = None,
           **params: str) -> dict[str, Any]:
    return manifest(client, kick_off(client, path, headers, **params), headers)


def lines(client: Any, files: list[dict[str, Any]], headers: Mapping[str, str] | None = None) -> dict[str, list[bytes]]:
    """Each type's lines, over its files; every file's count checked."""
    out: dict[str, list[bytes]] = {}
    for entry in files:
        answer = client.get(entry["url"], headers={**NDJSON, **(headers or {})})
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"].startswith("application/fhir+ndjson")
        got = answer.content.splitlines()
        assert len(got) == entry["count"] and answer.content.endswith(b"\n")
        out.setdefault(entry["type"], []).extend(got)
    return out


def versions(exported: list[bytes]) -> dict[str, str]:
    """id -> meta.versionId of exported resources."""
    resources = [orjson.loads(line) for line in exported]
    return {r["id"]: r["meta"]["versionId"] for r in resources}


def deleted_ids(client: Any, found: dict[str, Any], headers: Mapping[str, str] | None = None) -> set[str]:
    """`Type/id` of the DELETE entries of the manifest's `deleted` Bundles."""
    out: set[str] = set()
    for bundle in (orjson.loads(b) for b in lines(client, found["deleted"], headers).get("Bundle", [])):
        assert bundle["type"] == "transaction"
        out |= {e["request"]["url"] for e in bundle["entry"] if e["request"]["method"] == "DELETE"}
    return out


def service(ctx: Any) -> Any:
    """The Bulk Data service of the context's worker (the `bulk` core plugin's; made at its first call)."""
    return ctx.pm.get_plugin("bulk").service(ctx)


def held(release: Any, then: Any = None) -> Any:
    """A stand-in for server.bulk.runner.resources whose jobs wait for `release` (an Event) before reading (and
    call `then()` once released, before the reads: a load committed during the export)."""
    def resources(conn: Any, provider: Any, view: Any) -> Any:
        release.wait(20)
        if then is not None:
            then()
        yield from export_reader.resources(conn, provider, view)

    return resources
