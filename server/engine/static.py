"""Read and search for StaticProvider resources (canonical resources), in memory: `_id`, `url`, paging."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from server.engine.bundle import search_entry, searchset
from server.declare.provider import StaticProvider
from server.engine.subset import subset
from server.errors import ResourceNotFound, UnsupportedParameter
from server.settings import FhirApi
from server.search.paging import Paged, Paging, parse_paging
from server.search.request import parse_subset

FILTERS = {"_id": "id", "url": "url"}  # parameter -> the element it matches exactly


@dataclass(frozen=True)
class StaticSearch(Paged):
    filters: tuple[tuple[str, tuple[str, ...]], ...] = ()
    paging: Paging = field(default_factory=Paging)

    @property
    def own_pairs(self) -> tuple[tuple[str, str], ...]:
        return tuple((k, ",".join(v)) for k, v in self.filters)

    def matches(self, resource: dict[str, Any]) -> bool:
        return all(resource.get(FILTERS[name]) in values for name, values in self.filters)


def _load(provider: StaticProvider, conn: Any, account: str | None) -> Sequence[dict[str, Any]]:
    return provider.load(conn, account) if provider.per_account else provider.load(conn)


def read_static(provider: StaticProvider, conn: Any, rid: str,
                items: Sequence[tuple[str, str]] = (), account: str | None = None) -> dict[str, Any]:
    found = next((r for r in _load(provider, conn, account) if r["id"] == rid), None)
    if found is None:
        raise ResourceNotFound(f"{provider.resource_type}/{rid} is not known")
    return subset(found, *parse_subset(items))


def parse_static(provider: StaticProvider, items: Sequence[tuple[str, str]], *, limits: FhirApi = FhirApi(),
                 strict: bool) -> StaticSearch:
    paging, rest = parse_paging(items, limits)
    filters: list[tuple[str, tuple[str, ...]]] = []
    for key, raw in rest:
        if not raw:
            continue
        if key in FILTERS:
            filters.append((key, tuple(raw.split(","))))
        elif strict:
            raise UnsupportedParameter(f"{provider.resource_type} supports _id, url, _count and _skip; not {key!r}")
    return StaticSearch(tuple(filters), paging)


def search_static(provider: StaticProvider, conn: Any, base: str, items: Sequence[tuple[str, str]], *,
                  limits: FhirApi, strict: bool, account: str | None = None) -> dict[str, Any]:
    search = parse_static(provider, items, limits=limits, strict=strict)
    found = [r for r in _load(provider, conn, account) if search.matches(r)]
    page = found[search.skip:search.skip + search.count]
    entries = [search_entry(base, provider.resource_type, r["id"], r) for r in page]
    has_next = search.skip + search.count < len(found) and search.count > 0
    return searchset(base, provider.resource_type, search, entries, len(found), has_next)
