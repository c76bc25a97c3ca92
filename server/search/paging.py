"""The result parameters every pageable request shares (search, _history, static search), parsed in one place,
and the one quoting rule of the query strings rebuilt for paging links."""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from urllib.parse import quote

from server.settings import FhirApi
from server.errors import InvalidValue

FORMAT_PARAMS = frozenset({"_format", "_pretty"})  # not search parameters: carried into every link as given
PAGING_PARAMS = frozenset({"_count", "_skip"})
Pairs = Sequence[tuple[str, str]]


@dataclass(frozen=True)
class Paging:
    count: int = 20
    skip: int = 0
    carried: tuple[tuple[str, str], ...] = ()  # _format and _pretty, repeated in the links

    def at(self, skip: int) -> Paging:
        return replace(self, skip=skip)

    def link(self, own: Iterable[tuple[str, str]], tail: Iterable[tuple[str, str]] = ()) -> str:
        """The query string of a link: the request's own parameters, _count, _skip, `tail`, then the carried."""
        paging = [("_count", str(self.count)), *([("_skip", str(self.skip))] if self.skip else [])]
        return query_string([*own, *paging, *tail, *self.carried])


@dataclass(frozen=True)
class PageAt:
    """Another page of a search as its link shows it: the search's own parameters, then where the page starts (a
    link needs no whole request of its own)."""

    own: tuple[tuple[str, str], ...]
    paging: Paging
    after: str | None = None  # keyset: the page after this id

    def query_string(self) -> str:
        return self.paging.link(self.own, [("_after", self.after)] if self.after is not None else [])


KEPT_PAIRS = 4096  # parameters kept quoted...
KEPT_PAIR_CHARS = 256  # ...of at most this many characters: a few MB at most, whatever the requests send


def query_string(pairs: Iterable[tuple[str, str]]) -> str:
    return "&".join(_kept(k, v) if len(k) + len(v) <= KEPT_PAIR_CHARS else _pair(k, v) for k, v in pairs)


def _pair(key: str, value: str) -> str:
    """One parameter as links write it."""
    return f"{quote(key, safe=':')}={quote(value, safe=':|,/')}"


# keyed by request values, so bounded in number and in size: each page's links repeat the same parameters (quoted
# once); a long one (up to server.max_url_length) is quoted each time rather than kept
_kept = lru_cache(maxsize=KEPT_PAIRS)(_pair)


def _integer(name: str, raw: str) -> int:
    if not re.fullmatch(r"\d{1,9}", raw.strip()):
        raise InvalidValue(f"{name} must be a non-negative integer, got {raw!r}")
    return int(raw)


def parse_paging(items: Pairs, limits: FhirApi = FhirApi()) -> tuple[Paging, list[tuple[str, str]]]:
    """_count (clamped to max_count) and _skip, _format and _pretty carried; the other items, in order, for the
    request's own parser. An empty _count or _skip is ignored, as an empty search parameter is."""
    count, skip = limits.default_count, 0
    carried: list[tuple[str, str]] = []
    rest: list[tuple[str, str]] = []
    for key, raw in items:
        if key in FORMAT_PARAMS:
            carried.append((key, raw))
        elif key == "_count" and raw:
            count = min(_integer(key, raw), limits.max_count)
        elif key == "_skip" and raw:
            skip = _integer(key, raw)
        elif key not in PAGING_PARAMS:
            rest.append((key, raw))
    return Paging(count, skip, tuple(carried)), rest


class Paged:
    """What every pageable request shares (search, history, static): its Paging's count and skip, and its links.
    A frozen dataclass with a `paging` field mixes it in and names its own parameters (`own_pairs`: what every link
    repeats) and, where it pages by keyset, where this page starts (`after_raw`, as a link writes it); a keyset
    request overrides `following`. Another page is a PageAt: its link needs no whole request of its own."""

    paging: Paging

    @property
    def count(self) -> int:
        return self.paging.count

    @property
    def skip(self) -> int:
        return self.paging.skip

    @property
    def own_pairs(self) -> tuple[tuple[str, str], ...]:
        """The request's parameters but where the page starts (_count, _skip, _after)."""
        raise NotImplementedError

    @property
    def after_raw(self) -> str | None:
        """Where this page starts by keyset, as its link writes `_after` (None: by offset)."""
        return None

    def page(self, skip: int) -> Paged | PageAt:
        if skip == self.skip and self.after_raw is None:  # this page (a first page's `first` and `last` links)
            return self
        return PageAt(self.own_pairs, self.paging.at(skip))

    def following(self, last_id: str | None) -> PageAt:
        return PageAt(self.own_pairs, self.paging.at(self.skip + self.count))

    def query_string(self) -> str:
        return PageAt(self.own_pairs, self.paging, self.after_raw).query_string()
