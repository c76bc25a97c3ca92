"""Read and search for StaticProvider resources (canonical resources), in memory: `_id`, `url`, paging."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

from server.engine.bundle import search_entry, searchset
from server.errors import ResourceNotFound, UnsupportedParameter
from server.engine.provider import StaticProvider
from server.search.request import FORMAT_PARAMS, paging_value
from server.engine.subset import subset

FILTERS = ("_id", "url")


@dataclass(frozen=True)
class StaticSearch:
    filters: tuple[tuple[str, tuple[str, ...]], ...] = ()
    count: int = 20
    skip: int = 0

    def page(self, skip: int) -> StaticSearch:
        return replace(self, skip=skip)

    def following(self, last_id: str | None) -> StaticSearch:
        return self.page(self.skip + self.count)

    def query_string(self, extra: Sequence[tuple[str, str]] = ()) -> str:
        pairs = [(k, ",".join(v)) for k, v in self.filters] + [("_count", str(self.count))]
        if self.skip:
            pairs.append(("_skip", str(self.skip)))
        return "&".join(f"{k}={quote(v, safe=':/,')}" for k, v in [*pairs, *extra])

    def matches(self, resource: dict[str, Any]) -> bool:
        field = {"_id": "id", "url": "url"}
        return all(resource.get(field[name]) in values for name, values in self.filters)


def _load(provider: StaticProvider, conn: Any, account: str | None) -> Sequence[dict[str, Any]]:
    return provider.load(conn, account) if provider.per_account else provider.load(conn)


def read_static(provider: StaticProvider, conn: Any, rid: str,
                items: Sequence[tuple[str, str]] = (), account: str | None = None) -> dict[str, Any]:
    from server.search.request import parse_subset

    found = next((r for r in _load(provider, conn, account) if r["id"] == rid), None)
    if found is None:
        raise ResourceNotFound(f"{provider.resource_type}/{rid} is not known")
    return subset(found, *parse_subset(items))


def search_static(provider: StaticProvider, conn: Any, base: str, items: Sequence[tuple[str, str]], *,
                  default_count: int, max_count: int, strict: bool,
                  extra: Sequence[tuple[str, str]] = (), account: str | None = None) -> dict[str, Any]:
    search = StaticSearch(count=default_count)
    filters: list[tuple[str, tuple[str, ...]]] = []
    for key, raw in items:
        if key in FORMAT_PARAMS or not raw:
            continue
        if key in ("_count", "_skip"):
            search = replace(search, **{key[1:]: paging_value(key, raw, max_count)})
        elif key in FILTERS:
            filters.append((key, tuple(raw.split(","))))
        elif strict:
            raise UnsupportedParameter(f"{provider.resource_type} supports _id, url, _count and _skip; not {key!r}")
    search = replace(search, filters=tuple(filters))
    found = [r for r in _load(provider, conn, account) if search.matches(r)]
    page = found[search.skip:search.skip + search.count]
    entries = [search_entry(base, provider.resource_type, r["id"], r) for r in page]
    has_next = search.skip + search.count < len(found) and search.count > 0
    return searchset(base, provider.resource_type, search, entries, len(found), has_next, extra)
