"""Asking and reading the server as the contract checks do: the paths under the FHIR API's mount, a searchset's
entries, every page of a search, the issue code of an OperationOutcome."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from server.settings import FHIR_MOUNT


def fhir_path(*segments: object, query: str = "") -> str:
    """The path of `segments` under the FHIR API's mount, with `query` if any: fhir_path("Location", 12,
    "_history") is /fhir/Location/12/_history, fhir_path("Location", query="_count=2") /fhir/Location?_count=2."""
    path = "/".join((FHIR_MOUNT, *map(str, segments)))
    return f"{path}?{query}" if query else path


def entries(bundle: dict[str, Any], mode: str = "match") -> list[tuple[str, str]]:
    """(resource type, id) of a searchset's entries in that search mode."""
    return [(e["resource"]["resourceType"], e["resource"]["id"]) for e in bundle.get("entry", ())
            if e.get("search", {}).get("mode", "match") == mode]


def every_page(client: Any, url: str, headers: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The bundle at `url` and every one its next links lead to (at most 100)."""
    pages: list[dict[str, Any]] = []
    while url and len(pages) < 100:
        answer = client.get(url, headers=headers or {})
        assert answer.status_code == 200, answer.text
        pages.append(answer.json())
        url = next((link["url"] for link in pages[-1].get("link", ()) if link["relation"] == "next"), "")
    return pages


def outcome_code(answer: Any, status: int) -> str:
    """The issue code of an OperationOutcome answered with `status`."""
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["resourceType"] == "OperationOutcome", body
    return str(body["issue"][0]["code"])
