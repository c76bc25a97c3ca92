"""_history requests: typed form, SQL, and the query string rebuilt for links."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, exists, func, null, select

from server.errors import UnsupportedParameter
from server.engine.provider import Versioning
from server.search.dates import DateRange, parse_instant, parse_range
from server.search.paging import Paged, Paging, parse_paging


@dataclass(frozen=True)
class HistoryRequest(Paged):
    since: tuple[str, datetime] | None = None
    at: DateRange | None = None
    paging: Paging = field(default_factory=Paging)

    @property
    def key(self) -> tuple[Any, ...]:
        """What selects the versions (the count cache's key)."""
        return self.since[1] if self.since else None, self.at.raw if self.at else None


    def query_string(self) -> str:
        pairs: list[tuple[str, str]] = []
        if self.since:
            pairs.append(("_since", self.since[0]))
        if self.at:
            pairs.append(("_at", self.at.raw))
        return self.paging.link(pairs)


def parse_history(items: Sequence[tuple[str, str]], *, default_count: int, max_count: int,
                  strict: bool = False) -> HistoryRequest:
    paging, rest = parse_paging(items, default_count=default_count, max_count=max_count)
    request = HistoryRequest(paging=paging)
    for key, raw in rest:
        if not raw:
            continue
        if key == "_since":
            request = replace(request, since=(raw, parse_instant("_since", raw)))
        elif key == "_at":
            request = replace(request, at=parse_range("_at", raw, prefixes=False))
        elif strict:
            raise UnsupportedParameter(f"unknown _history parameter {key!r}; supported: _since, _at, _count, _skip")
    return request


def _conditions(v: Versioning, request: HistoryRequest, stored_id: Any | None,
                within: ColumnElement[bool] | None = None) -> list[Any]:
    conds: list[Any] = [within] if within is not None else []
    if stored_id is not None:
        conds.append(v.history_id == stored_id)
    if request.since:
        conds.append(v.history_updated >= request.since[1])
    if request.at:
        later = v.history.alias("later")
        superseded = exists().where(
            later.c[v.history_id.key] == v.history_id,
            later.c[v.history_version.key] > v.history_version,
            later.c[v.history_updated.key] <= request.at.lower,
        )
        conds += [v.history_updated < request.at.upper, ~superseded]
    return conds


def history_page(v: Versioning, request: HistoryRequest, stored_id: Any | None = None,
                 body: ColumnElement[Any] | None = None, within: ColumnElement[bool] | None = None) -> Select[Any]:
    """id, version, instant, deleted, snapshot and the stored body (`body`, or NULL) of each version;
    `within`: the versions of the resources the caller may see (server.search.sql.within)."""
    return (select(v.history_id, v.history_version, v.history_updated, v.history_deleted, v.history_snapshot,
                   body if body is not None else null())
            .where(*_conditions(v, request, stored_id, within))
            .order_by(v.history_updated.desc(), v.history_id.desc(), v.history_version.desc())
            .limit(request.count).offset(request.skip))


def history_count(v: Versioning, request: HistoryRequest, stored_id: Any | None = None,
                  within: ColumnElement[bool] | None = None) -> Select[Any]:
    return select(func.count()).select_from(v.history).where(*_conditions(v, request, stored_id, within))


def version_query(v: Versioning, stored_id: Any, version: int, body: ColumnElement[Any] | None = None) -> Select[Any]:
    return select(v.history_deleted, v.history_snapshot, body if body is not None else null()).where(
        v.history_id == stored_id, v.history_version == version)

