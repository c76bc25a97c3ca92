"""searchset Bundles with absolute paging links rebuilt from the typed search."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from server.search.request import SearchRequest


def _link(relation: str, base: str, path: str, request: SearchRequest, extra: Sequence[tuple[str, str]]) -> dict[str, str]:
    return {"relation": relation, "url": f"{base}/{path}?{request.query_string(extra)}"}


def paging_links(base: str, path: str, request: SearchRequest, total: int | None, returned: int,
                 extra: Sequence[tuple[str, str]] = ()) -> list[dict[str, str]]:
    links = [_link("self", base, path, request, extra)]
    count = request.count
    if count == 0:
        return links
    links.append(_link("first", base, path, request.at(0), extra))
    if request.skip > 0:
        links.append(_link("previous", base, path, request.at(max(0, request.skip - count)), extra))
    has_next = request.skip + count < total if total is not None else returned == count
    if has_next:
        links.append(_link("next", base, path, request.at(request.skip + count), extra))
    if total is not None:
        last = max(0, (total - 1) // count * count)
        links.append(_link("last", base, path, request.at(last), extra))
    return links


def searchset(base: str, path: str, request: SearchRequest, resources: Iterable[dict[str, Any]],
              total: int | None, extra: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    entries = [
        {"fullUrl": f"{base}/{r['resourceType']}/{r['id']}", "resource": r, "search": {"mode": "match"}}
        for r in resources
    ]
    bundle: dict[str, Any] = {"resourceType": "Bundle", "type": "searchset"}
    if total is not None:
        bundle["total"] = total
    bundle["link"] = paging_links(base, path, request, total, len(entries), extra)
    if entries:
        bundle["entry"] = entries
    return bundle
