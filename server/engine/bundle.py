"""searchset and history Bundles with absolute paging links rebuilt from the typed request."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from server.engine.instants import instant
from server.engine.rendered import Rendered


class Pageable(Protocol):
    count: int
    skip: int

    def page(self, skip: int) -> Any: ...

    def following(self, last_id: str | None) -> Any: ...

    def query_string(self, extra: Sequence[tuple[str, str]] = ()) -> str: ...


def _link(relation: str, base: str, path: str, request: Pageable, extra: Sequence[tuple[str, str]]) -> dict[str, str]:
    return {"relation": relation, "url": f"{base}/{path}?{request.query_string(extra)}"}


def paging_links(base: str, path: str, request: Pageable, total: int | None, has_next: bool,
                 extra: Sequence[tuple[str, str]] = (), last_id: str | None = None) -> list[dict[str, str]]:
    """self, first, previous, next (after `last_id`, the page's last match, where the request pages by keyset)
    and, with a total, last."""
    links = [_link("self", base, path, request, extra)]
    count = request.count
    if count == 0:
        return links
    links.append(_link("first", base, path, request.page(0), extra))
    if request.skip > 0:
        links.append(_link("previous", base, path, request.page(max(0, request.skip - count)), extra))
    if has_next:
        links.append(_link("next", base, path, request.following(last_id), extra))
    if total is not None:
        last = max(0, (total - 1) // count * count)
        links.append(_link("last", base, path, request.page(last), extra))
    return links


def _bundle(kind: str, total: int | None, links: list[dict[str, str]], entries: list[dict[str, Any]]) -> dict[str, Any]:
    bundle: dict[str, Any] = {"resourceType": "Bundle", "type": kind}
    if total is not None:
        bundle["total"] = total
    bundle["link"] = links
    if entries:
        bundle["entry"] = entries
    return bundle


DISTANCE = "http://hl7.org/fhir/StructureDefinition/location-distance"


def search_entry(base: str, resource_type: str, rid: str, resource: dict[str, Any] | Rendered, mode: str = "match",
                 distance_km: float | None = None) -> dict[str, Any]:
    search: dict[str, Any] = {"mode": mode}
    if distance_km is not None:
        search["extension"] = [{"url": DISTANCE, "valueDistance": {
            "value": round(distance_km, 3), "unit": "km", "system": "http://unitsofmeasure.org", "code": "km"}}]
    return {"fullUrl": f"{base}/{resource_type}/{rid}", "resource": resource, "search": search}


def searchset(base: str, path: str, request: Pageable, entries: list[dict[str, Any]], total: int | None,
              has_next: bool, extra: Sequence[tuple[str, str]] = (), last_id: str | None = None) -> dict[str, Any]:
    return _bundle("searchset", total, paging_links(base, path, request, total, has_next, extra, last_id), entries)


def history_entry(base: str, resource_type: str, rid: str, version: int, updated: Any,
                  resource: dict[str, Any] | Rendered | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"fullUrl": f"{base}/{resource_type}/{rid}"}
    if resource is not None:
        entry["resource"] = resource
        method, status = ("POST", "201 Created") if version == 1 else ("PUT", "200 OK")
    else:
        method, status = "DELETE", "204 No Content"
    entry["request"] = {"method": method, "url": f"{resource_type}/{rid}" if method != "POST" else resource_type}
    entry["response"] = {"status": status, "etag": f'W/"{version}"', "lastModified": instant(updated)}
    return entry


def history(base: str, path: str, request: Pageable, entries: list[dict[str, Any]], total: int,
            extra: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    has_next = request.skip + request.count < total
    return _bundle("history", total, paging_links(base, path, request, total, has_next, extra), entries)
