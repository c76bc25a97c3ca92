"""_history requests: typed form, SQL, and the query string rebuilt for links.

A history walk reads one snapshot: its first page takes the sync point of the moment (`till`, every version before
it is committed: server.storage.writes) and each `next` link carries it with a keyset cursor (`after`: the last
entry's instant, id and version, in the history's newest-first order), so versions committed during the walk neither
shift nor repeat an entry, and its total is the same on every page."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property
from typing import Any

from sqlalchemy import ColumnElement, Select, case, exists, func, null, or_, select, true, tuple_

from server.declare.instants import exact_instant, instant
from server.errors import InvalidValue, UnsupportedParameter
from server.declare.provider import Versioning
from server.params.ids import FHIR_ID, coerce_id
from server.params.dates import DateRange, parse_instant, parse_range, parse_since
from server.settings import FhirApi
from server.search.paging import PageAt, Paged, Paging, parse_paging

Cursor = tuple[datetime, int, str]  # the last entry served: its instant, version and id


@dataclass(frozen=True)
class HistoryRequest(Paged):
    since: tuple[str, datetime] | None = None
    at: DateRange | None = None
    paging: Paging = field(default_factory=Paging)
    till: datetime | None = None  # the walk's sync point: versions before it only
    after: Cursor | None = None  # keyset: the versions after this one (in the history's order)

    @property
    def key(self) -> tuple[Any, ...]:
        """What selects the versions (the count cache's key)."""
        return self.since[1] if self.since else None, self.at.raw if self.at else None, self.till

    def bounded(self, synced: datetime) -> HistoryRequest:
        """The request read up to `synced` (the sync point of the moment): a first page starts the walk there; a
        page of a walk keeps its `till`, never past what is committed (a `till` made up later than it is not)."""
        return replace(self, till=synced if self.till is None else min(self.till, synced))

    @cached_property
    def own_pairs(self) -> tuple[tuple[str, str], ...]:
        pairs: list[tuple[str, str]] = []
        if self.since:
            pairs.append(("_since", self.since[0]))
        if self.at:
            pairs.append(("_at", self.at.raw))
        if self.till is not None:
            pairs.append(("_till", instant(self.till)))
        return tuple(pairs)

    @property
    def after_raw(self) -> str | None:
        return None if self.after is None else write_cursor(self.after)

    def following(self, last_id: str | None) -> PageAt:
        """The next page: after the entry `last_id` (a cursor, as `write_cursor` writes it), from the first position."""
        return PageAt(self.own_pairs, self.paging.at(0), last_id or None)


def write_cursor(cursor: Cursor) -> str:
    updated, version, rid = cursor
    return f"{exact_instant(updated)},{version},{rid}"


def read_cursor(raw: str) -> Cursor:
    parts = raw.split(",", 2)
    if len(parts) != 3 or not parts[1].isdigit() or len(parts[1]) > 9 or not parts[2]:
        raise InvalidValue(f"_after must be the cursor a history next link carries (instant,version,id), got {raw!r}")
    return parse_instant("_after", parts[0], zoned=True), int(parts[1]), parts[2]


def parse_history(items: Sequence[tuple[str, str]], *, limits: FhirApi = FhirApi(),
                  strict: bool = False) -> HistoryRequest:
    """`_since` as server.params.dates.parse_since takes it; `_till` and `_after` come from next links."""
    paging, rest = parse_paging(items, limits)
    request = HistoryRequest(paging=paging, since=parse_since(rest))
    for key, raw in rest:
        if key == "_since" or not raw:
            continue
        elif key == "_at":
            request = replace(request, at=parse_range("_at", raw, prefixes=False))
        elif key == "_till":
            request = replace(request, till=parse_instant("_till", raw, zoned=True))
        elif key == "_after":
            request = replace(request, after=read_cursor(raw))
        elif strict:
            raise UnsupportedParameter(f"unknown _history parameter {key!r}; supported: _since, _at, _count, _skip "
                                       "(and _till, _after from next links)")
    return request


def _conditions(v: Versioning, request: HistoryRequest, stored_id: Any | None,
                within: ColumnElement[bool] | None = None) -> list[Any]:
    conds: list[Any] = [within] if within is not None else []
    if stored_id is not None:
        conds.append(v.history_id == stored_id)
    if request.since:
        conds.append(v.history_updated >= request.since[1])
    if request.till is not None:
        conds.append(v.history_updated < request.till)
    if request.at:
        later = v.history.alias("later")
        superseded = exists().where(
            later.c[v.history_id.key] == v.history_id,
            later.c[v.history_version.key] > v.history_version,
            later.c[v.history_updated.key] <= request.at.lower,
        )
        conds += [v.history_updated < request.at.upper, ~superseded]
    return conds


def _shown(within: ColumnElement[bool] | None, departed: ColumnElement[bool] | None) -> ColumnElement[bool] | None:
    """The versions a caller is shown: those it sees, and those it sees as deletions (departures)."""
    return within if departed is None or within is None else or_(within, departed)


def _deleted(v: Versioning, departed: ColumnElement[bool] | None) -> ColumnElement[Any]:
    """A version's deletion flag as the caller is shown it: a departure is a deletion in its view."""
    return v.history_deleted if departed is None else case((departed, true()), else_=v.history_deleted)


def history_page(v: Versioning, request: HistoryRequest, stored_id: Any | None = None,
                 body: ColumnElement[Any] | None = None, within: ColumnElement[bool] | None = None,
                 extra_row: int = 0, departed: ColumnElement[bool] | None = None) -> Select[Any]:
    """id, version, instant, deleted, snapshot and the stored body (`body`, or NULL) of each version, newest first
    (`extra_row` more than a page: whether there is a next one); `within`: the versions the caller may see
    (server.access.tenancy.Visibility.versions), `departed`: those it is shown as deletions (the version before was
    in its view, this one is not: the resource left it)."""
    conds = _conditions(v, request, stored_id, _shown(within, departed))
    if request.after is not None:
        updated, version, rid = request.after
        conds.append(tuple_(v.history_updated, v.history_id, v.history_version) <
                     tuple_(updated, _typed(v.history_id, rid), version))
    return (select(v.history_id, v.history_version, v.history_updated, _deleted(v, departed), v.history_snapshot,
                   body if body is not None else null())
            .where(*conds)
            .order_by(v.history_updated.desc(), v.history_id.desc(), v.history_version.desc())
            .limit(request.count + extra_row).offset(request.skip))


def _typed(column: ColumnElement[Any], raw: str) -> Any:
    """The cursor's id as the id column holds it (server.params.ids.coerce_id: an integer id past 18 digits is none,
    which a database would refuse with a 500)."""
    typed = coerce_id(column, raw) if FHIR_ID.fullmatch(raw) else None
    if typed is None:
        raise InvalidValue(f"_after: {raw[:100]!r} is not an id of this history")
    return typed


def history_count(v: Versioning, request: HistoryRequest, stored_id: Any | None = None,
                  within: ColumnElement[bool] | None = None, departed: ColumnElement[bool] | None = None) -> Select[Any]:
    return select(func.count()).select_from(v.history).where(*_conditions(v, request, stored_id,
                                                                          _shown(within, departed)))


def version_query(v: Versioning, stored_id: Any, version: int, body: ColumnElement[Any] | None = None,
                  within: ColumnElement[bool] | None = None, departed: ColumnElement[bool] | None = None) -> Select[Any]:
    """One version (deleted, snapshot, stored body), if the caller is shown it (`within`, `departed`: as
    history_page's)."""
    shown = _shown(within, departed)
    return select(_deleted(v, departed), v.history_snapshot, body if body is not None else null()).where(
        v.history_id == stored_id, v.history_version == version, *([shown] if shown is not None else []))
