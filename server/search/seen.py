"""What a caller may see of a provider's rows, decided here only: its live rows (a versioned provider's deleted
ones are gone) within the caller's visibility (server.access.tenancy.Visibility.clause, SMART scopes applied). Every
query that selects rows for a caller (a search, its look-ups, chains and _has hops, includes, subtree roots, reads,
Bulk Data) takes its conditions from `seen`: a query that built its own could leak a deleted row or another
tenant's."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from sqlalchemy import ColumnElement, and_, or_

from server.declare.provider import ResourceProvider
from server.params.types.base import Sight


class Seeing(Protocol):
    """What compilation reads of the caller's visibility of one type (server.access.tenancy.Visibility)."""

    @property
    def clause(self) -> ColumnElement[bool] | None: ...  # the rows it sees (a scope's query applied)

    @property
    def looked_up(self) -> ColumnElement[bool] | None: ...  # the rows its look-ups read (before a query narrows)

    @property
    def paths(self) -> tuple[str, ...] | None: ...  # its subtree roots' paths (None: not limited to subtrees)

    @property
    def filtered(self) -> bool: ...  # narrowed by a scope's query


def seen(provider: ResourceProvider, visible: ColumnElement[bool] | None, *, live: bool = True,
         deleted: ColumnElement[Any] | None = None) -> list[ColumnElement[bool]]:
    """The conditions (AND-ed) of the provider's rows the caller may see. `visible`: the caller's visibility clause (None:
    every row); `live=False`: deleted rows too (a read, which answers 410 for them); `deleted`: the deletion flag
    to test instead of the provider's own (a version in the history: Bulk Data's view at an instant)."""
    conds: list[ColumnElement[bool]] = []
    if live and provider.versioning is not None:
        conds.append((deleted if deleted is not None else provider.versioning.deleted).is_(False))
    if visible is not None:
        conds.append(visible)
    return conds


def seen_versions(flag: ColumnElement[Any], versions: ColumnElement[bool] | None, *,
                  deleted: bool) -> list[ColumnElement[bool]]:
    """The conditions (AND-ed) of the kept versions the caller may see whose deletion `flag` (a column of the history
    table, or of an alias of it) is `deleted`: live versions, or deletions; `versions`: the caller's condition on
    them (server.access.tenancy.Visibility.versions; None: every one)."""
    return [flag.is_(deleted), *([versions] if versions is not None else [])]


def by_deletion(provider: ResourceProvider, live: ColumnElement[bool],
                deleted: ColumnElement[bool]) -> ColumnElement[bool]:
    """`live` on the provider's live rows, `deleted` on its deleted ones (a provider without versions: `live`)."""
    versioning = provider.versioning
    if versioning is None:
        return live
    return or_(and_(versioning.deleted.is_(False), live), and_(versioning.deleted.is_(True), deleted))


def sight_of(providers: Mapping[str, ResourceProvider], own: Seeing, others: Mapping[str, Seeing],
          reads: Iterable[str]) -> Sight:
    """What a clause on a type compiles with, made here only, for a search's own clauses and a chain's far ones
    alike: of each other type it `reads`, the rows the caller sees (a value matches through those only) and the
    rows its look-ups read (`looked_up`: a path a :below names is found though a scope's query leaves that unit
    out), as on its own type; of its own type (`own`), the subtree roots, and to a caller a scope's query narrows,
    what it sees (a parent it cannot see is as missing)."""
    reads = tuple(reads)
    return Sight(others={t: tuple(seen(providers[t], others[t].clause)) for t in reads},
                 looked_up={t: tuple(seen(providers[t], others[t].looked_up)) for t in reads},
                 roots=own.paths, narrowed=own.clause if own.filtered else None)
