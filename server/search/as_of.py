"""The queries of each provider's resources as they were at transactionTime T, and of the ones deleted since
`_since` (Bulk Data's export; the engine streams them: server.engine.export_reader).

A versioned provider is read from its versions: a resource is in the export when the newest of its versions stamped
at or before T is not a deletion (and, with `_since`, was stamped after it). Most resources have not changed since T:
their current version is that one, found by joining the current row to its version (the stored body when the
bodies may be spliced, else `to_resource` of the version's snapshot, as vread renders it); the few changed since T
are looked up version by version. So a write committed during the export, whose versions are stamped after T,
changes none of its files. A provider without versions is read as it is when the export reads it (no history to
go back to), `_since` applying to its `last_updated` when it declares one (else every resource is written).

The caller's scope applies to the current rows (its account's served partitions, its subtrees), as for searches; a
resource changed after T to its version at T, as the caller could read that version while it was current (each kept
version scoped by what scoped it then; a provider that cannot prove it for a version other than the current one
leaves it to the next export, whose `_since` holds its newer version). A type's `_typeFilter` (its searches'
condition, as `[type]?query` compiles it) applies to the current rows: a resource changed after T is matched by what
it is now, and a deletion listed with `_since` by what it was when deleted."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, case, exists, func, not_, null, or_, select, true, type_coerce
from sqlalchemy.sql.util import ClauseAdapter

from server.declare.provider import ResourceProvider, Versioning
from server.search.referred import tables_of
from server.search.seen import seen, seen_versions


@dataclass(frozen=True)
class AsOf:
    at: datetime  # transactionTime
    since: datetime | None = None  # resources changed after this instant only
    visible: ColumnElement[bool] | None = None  # the caller's scope on the provider's rows
    bodies: bool = False  # the stored bodies may be spliced
    matching: ColumnElement[bool] | None = None  # `_typeFilter`: the condition of the type's filters on its rows
    # the versions the caller sees (server.access.tenancy.Visibility.versions: each by what scoped it while current);
    # a resource changed since T is exported as its version at T was scoped, when the caller could read that one
    versions: ColumnElement[bool] | None = None
    # the versions the caller is shown as deletions (Visibility.departed: a resource that left its view)
    departed: ColumnElement[bool] | None = None


def _filtered(provider: ResourceProvider, view: AsOf) -> list[ColumnElement[bool]]:
    """The type's `_typeFilter` condition on its current rows: on its table alone as it is, else on the ids of the
    rows of its source (the tables its search joins) that meet it."""
    if view.matching is None:
        return []
    if tables_of(view.matching) <= {provider.table}:
        return [view.matching]
    rows = select(provider.id_column).select_from(provider.source).where(view.matching).correlate(None)
    return [provider.id_column.in_(rows)]


def _seen(provider: ResourceProvider, view: AsOf, flag: ColumnElement[Any], deleted: bool) -> list[ColumnElement[bool]]:
    """What the caller may see of the versions at the view's instant whose deletion `flag` is `deleted`: the live
    ones (server.search.seen), or the deletions within the caller's scope."""
    if deleted:
        return [*seen_versions(flag, None, deleted=True), *seen(provider, view.visible, live=False)]
    return seen(provider, view.visible, deleted=flag)


def _gone(provider: ResourceProvider, view: AsOf, flag: ColumnElement[Any],
          version: ColumnElement[bool] | None, departed: ColumnElement[bool] | None,
          number: ColumnElement[Any]) -> ColumnElement[bool]:
    """What a `_since` export lists as deleted, of the versions at T (`flag`: their deletion; `version`: the caller
    sees them, None: by the current row; `number`: their version number): every deletion it sees, whatever
    `_typeFilter` says (a resource that left the filter and was then deleted between two exports matches it no more,
    yet the copy holds it), departures (`departed`: they left its view), and, with `_typeFilter`, a live resource it
    sees that no longer matches it (a sync client filtered so drops it) but its first version: a resource whose one
    version does not match was never in a copy so filtered (a `_since` of 1970 listed every other unit, as the
    scope queries' unmatched once did: server.access.tenancy.shown_gone)."""
    if version is None:
        deletions, live = _seen(provider, view, flag, True), _seen(provider, view, flag, False)
    else:
        deletions, live = seen_versions(flag, version, deleted=True), seen_versions(flag, version, deleted=False)
    arms = [and_(*deletions), *([departed] if departed is not None else [])]
    if view.matching is not None:
        v = provider.versioning
        assert v is not None
        before = v.history.alias("before")  # type: ignore[attr-defined]
        changed_since_first = exists().where(before.c[v.history_id.key] == provider.id_column,
                                             before.c[v.history_version.key] < number)
        arms.append(and_(*live, not_(and_(*_filtered(provider, view))), changed_since_first))
    return or_(*arms)


def _versions(v: Versioning) -> tuple[Any, Any, Any, Any, Any]:
    return v.history_id, v.history_version, v.history_updated, v.history_deleted, v.history_snapshot


def _current_join(provider: ResourceProvider, v: Versioning) -> Any:
    return provider.table.join(v.history, and_(v.history_id == provider.id_column, v.history_version == v.version))


def unchanged(provider: ResourceProvider, view: AsOf, *, deleted: bool = False,
              stored: bool | None = None) -> Select[Any]:
    """The resources whose current version was stamped at or before T: (body or NULL, snapshot when no body),
    or with `deleted` the ids of those whose current version is a deletion. `stored`: only the rows with a stored
    body (True: the body alone), or only those without one (False)."""
    v = provider.versioning
    assert v is not None
    hid, hversion, updated, is_deleted, snapshot = _versions(v)
    since = [updated > view.since] if view.since is not None else []
    if deleted:
        where = [updated <= view.at, *since, _gone(provider, view, is_deleted, None, view.departed, hversion)]
        return select(hid).select_from(_current_join(provider, v)).where(*where).order_by(hid)
    where = [updated <= view.at, *_seen(provider, view, is_deleted, False), *since, *_filtered(provider, view)]
    body = provider.prerendered.body if view.bodies and provider.prerendered is not None else null()
    if stored is not None:
        where.append(body.is_not(None) if stored else body.is_(None))
        if stored:
            return select(body).select_from(_current_join(provider, v)).where(*where).order_by(provider.id_column)
    rendered = type_coerce(case((body.is_(None), snapshot), else_=null()), snapshot.type)
    return (select(body.label("body"), rendered.label("snapshot")).select_from(_current_join(provider, v))
            .where(*where).order_by(provider.id_column))


def changed(provider: ResourceProvider, view: AsOf, *, deleted: bool = False) -> Select[Any]:
    """The resources whose current version was stamped after T: their newest version stamped at or before T."""
    v = provider.versioning
    assert v is not None
    hid, hversion, updated, _, _ = _versions(v)
    at_t = v.history.alias("at_t")
    older = v.history.alias("older")
    version_at_t = (select(func.max(older.c[hversion.key])).where(
        older.c[hid.key] == provider.id_column, older.c[updated.key] <= view.at).scalar_subquery())
    source = _current_join(provider, v).join(at_t, and_(at_t.c[hid.key] == provider.id_column,
                                                       at_t.c[hversion.key] == version_at_t))
    since = [at_t.c[updated.key] > view.since] if view.since is not None else []
    flag = at_t.c[v.history_deleted.key]
    # its version at T, as the caller could read it then (not as the resource is placed now)
    version = ClauseAdapter(at_t).traverse(view.versions) if view.versions is not None else None
    if deleted:
        departed = ClauseAdapter(at_t).traverse(view.departed) if view.departed is not None else None
        where = [updated > view.at, *since, _gone(provider, view, flag, version, departed, at_t.c[hversion.key])]
        return select(provider.id_column).select_from(source).where(*where).order_by(provider.id_column)
    scope = seen_versions(flag, version, deleted=False) if version is not None else _seen(provider, view, flag, False)
    where = [updated > view.at, *scope, *since, *_filtered(provider, view)]
    body = at_t.c[provider.prerendered.body.key] if view.bodies and provider.prerendered is not None else null()
    return (select(body.label("body"), at_t.c[v.history_snapshot.key].label("snapshot")).select_from(source)
            .where(*where).order_by(provider.id_column))


def current(provider: ResourceProvider, view: AsOf) -> Select[Any]:
    """A provider without versions: its rows as they are (`_since` on its last_updated when declared)."""
    since = [provider.last_updated > view.since] if view.since is not None and provider.last_updated is not None \
        else []
    return (select(*provider.columns).select_from(provider.source)
            .where(true(), *since, *seen(provider, view.visible), *_filtered(provider, view))
            .order_by(provider.id_column))
