"""searchset and history Bundles with absolute paging links rebuilt from the typed request."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Protocol

from server.declare.instants import instant
from server.declare.rendered import Rendered


class Pageable(Protocol):
    count: int
    skip: int

    def page(self, skip: int) -> Any: ...

    def following(self, last_id: str | None) -> Any: ...

    def query_string(self) -> str:
        """The request's parameters as its links show them (server.search.paging.Paging.link)."""
        ...


def _link(relation: str, base: str, path: str, request: Pageable) -> dict[str, str]:
    return {"relation": relation, "url": f"{base}/{path}?{request.query_string()}"}


def paging_links(base: str, path: str, request: Pageable, total: int | None, has_next: bool,
                 last_id: str | None = None) -> list[dict[str, str]]:
    """self, first, previous, next (after `last_id`, the page's last match, where the request pages by keyset)
    and, with a total, last."""
    links = [_link("self", base, path, request)]
    count = request.count
    if count == 0:
        return links
    links.append(_link("first", base, path, request.page(0)))
    if request.skip > 0:
        links.append(_link("previous", base, path, request.page(max(0, request.skip - count))))
    if has_next:
        links.append(_link("next", base, path, request.following(last_id)))
    if total is not None:
        last = max(0, (total - 1) // count * count)
        links.append(_link("last", base, path, request.page(last)))
    return links


def _bundle(kind: str, total: int | None, links: list[dict[str, str]], entries: list[dict[str, Any]],
            synced: datetime | None = None) -> dict[str, Any]:
    """`synced`: the answer's sync point (server.storage.writes), its meta.lastUpdated: what a client syncing
    sends back as its next `_since` (or `_lastUpdated=ge`)."""
    bundle: dict[str, Any] = {"resourceType": "Bundle"}
    if synced is not None:
        bundle["meta"] = {"lastUpdated": instant(synced)}
    bundle["type"] = kind
    if total is not None:
        bundle["total"] = total
    bundle["link"] = links
    if entries:
        bundle["entry"] = entries
    return bundle


def search_entries(base: str, resource_type: str,
                   found: Iterable[tuple[str, dict[str, Any] | Rendered, Mapping[str, Any] | None]],
                   mode: str = "match") -> list[dict[str, Any]]:
    """An entry of `mode` for each (id, resource, what its entry.search holds besides the mode: a match's measure,
    SearchRequest.entry_search). Entries with nothing besides the mode share one entry.search (never changed in
    place)."""
    prefix = f"{base}/{resource_type}/"
    plain = {"mode": mode}
    return [{"fullUrl": prefix + rid, "resource": resource, "search": {"mode": mode, **search} if search else plain}
            for rid, resource, search in found]


def search_entry(base: str, resource_type: str, rid: str, resource: dict[str, Any] | Rendered, mode: str = "match",
                 search: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return search_entries(base, resource_type, ((rid, resource, search),), mode)[0]


def searchset(base: str, path: str, request: Pageable, entries: list[dict[str, Any]], total: int | None,
              has_next: bool, last_id: str | None = None, synced: datetime | None = None) -> dict[str, Any]:
    return _bundle("searchset", total, paging_links(base, path, request, total, has_next, last_id), entries, synced)


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


def history(base: str, path: str, request: Pageable, entries: list[dict[str, Any]], total: int, has_next: bool,
            cursor: str | None, synced: datetime) -> dict[str, Any]:
    """`has_next`: whether a version follows the page (read, never inferred from the total); `cursor`: where the
    next page starts (server.search.history)."""
    return _bundle("history", total, paging_links(base, path, request, total, has_next, cursor), entries, synced)
