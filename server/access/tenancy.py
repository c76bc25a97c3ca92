"""What a caller may see: its access scope (account, subtree roots) from the token, and per provider the
visibility it amounts to: one SQL condition on the provider's table, built once per data generation.

Each provider's tenancy says how a scope applies to it: its own subtree (a materialized path), through a reference
to another scoped provider, or its account only. A scope the provider cannot apply matches nothing: subtree roots
on an account-only provider, roots of another type, of a type not served or malformed, a reference to a type not
served. A caller never learns what lies outside its scope: rows out of it are left out of every answer, and an
out-of-scope id is answered exactly as an unknown one (server.engine.visibility.sees runs the same query for both)."""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Hashable, Mapping
from datetime import datetime
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, exists, false, not_, or_, select, true
from sqlalchemy.sql.util import ClauseAdapter

from server.access.partitions import EVERY_PARTITION, Partitions
from server.access.roots import bare_root_type, parse_roots, root_paths
from server.access.smart_scopes import Query
from server.declare.provider import ResourceProvider, Tenancy, Via
from server.errors import Forbidden
from server.params.paths import in_subtree, outermost, subtree
from server.params.types.reference import ReferenceTarget, referring
from server.search.seen import by_deletion, seen
from server.storage.cache import Bounded
from server.storage.freshness import Freshness, Snapshot, database_of

MAX_CACHED = 4096


@dataclass(frozen=True)
class AccessScope:
    account: str | None = None  # None: the token names no account
    roots: tuple[str, ...] | None = None  # Type/id, bare ids or system|value identifiers; None: no subtree limit
    all_accounts: bool = False  # trusted in-process callers (tests, tools), never a token
    # SMART v2 granular scopes (server.access.smart_scopes): per type, the searches of which the caller sees the
    # matches only (a union); a type not named is not filtered. Set by the engine (server.engine.scope_filters)
    filters: tuple[tuple[str, tuple[Query, ...]], ...] = ()
    # the types the token's SMART scopes do not reach: the caller sees nothing of them (an _include never returns
    # them, a chain through them matches nothing). Set by the engine (server.engine.caller)
    unseen: frozenset[str] = frozenset()
    unowned: bool = False  # a loader's `lookup.within(account)`: also the rows of no account (referring to nothing)

    def without_filter(self, resource_type: str) -> AccessScope:
        """The scope without its queries on `resource_type`: what a scope's query on that type is compiled for."""
        return replace(self, filters=tuple((t, q) for t, q in self.filters if t != resource_type))


EVERYTHING = AccessScope(all_accounts=True)


def caller_account(scope: AccessScope, accounts: Collection[str], first: str | None = None,
                   former: Mapping[str, str] | None = None) -> str | None:
    """The account the caller sees, decided here only: the scope's (the access_scope hook's), else the account
    recorded for tokens naming none (`first`, Tenancy.first_account: a new account never changes what they see), else
    the only account the server holds ("" when it holds none: nothing to see); None: every account (trusted
    in-process callers only). Forbidden when the scope names none and the recorded account holds nothing any more
    (removed or purged: never the next tenant's data), or when nothing is recorded and the server holds several; and
    when it names an account that is no more (`former`, Tenancy.former_accounts: renamed...), saying what happened,
    never an empty answer."""
    if scope.all_accounts:
        return None
    if scope.account is not None:
        if former and scope.account in former and scope.account not in accounts:
            raise Forbidden(f"the token names account {scope.account!r}, which {former[scope.account]}: ask for a "
                            "token naming the account as it is now (or set auth.default_account)")
        return scope.account
    if first is not None:
        if first not in accounts:  # the first account was removed or purged: never the next tenant's data
            raise Forbidden(f"the token names no account and account {first!r}, which tokens without an account "
                            "claim see, was removed: ask for a token with the account claim, or set "
                            "auth.default_account")
        return first
    if len(accounts) > 1:
        raise Forbidden("the token names no account and this server holds several: "
                        "ask for a token with the account claim")
    return next(iter(accounts), "")


@dataclass(frozen=True)
class Visibility:
    """What one caller sees of one provider. `clause`: a condition on columns of the provider's table (None:
    every row). When `by_row`, `partitions` and `paths` (None: no restriction) decide for one row from its
    partition and path (`admits`); a visibility through a reference is decided by its clause only (`sees`)."""

    clause: ColumnElement[bool] | None = field(default=None, compare=False)
    key: Hashable = None  # what the cached counts are keyed by
    partitions: frozenset[Any] | None = None
    paths: tuple[str, ...] | None = None
    by_row: bool = True
    # partitions of the caller's account that are not served: their deletions are still shown (a deleted resource
    # answers 410 and is a DELETE to whoever's account held it, whatever version its data source serves now)
    gone: frozenset[Any] = frozenset()
    # a versioned provider's: the versions the caller sees, a condition on the rows of its history table (vread,
    # _history): each version by what scoped it while it was current (Tenancy.versions, Via.versions), else the
    # current version alone of the rows `clause` admits (the one the caller provably may read). None: every version
    # (only when `clause` is None)
    versions: ColumnElement[bool] | None = field(default=None, compare=False)
    # the kept versions the caller is shown as deletions (departures), conditions on the rows of the history table
    # (None: none). `departed`: where a resource provably left its view (the version before was in it, this one is
    # not: moved out of its subtrees, or out of what it is seen through). `unmatched`, told to a sync (`_since`)
    # only: narrowed by a query, proven on the current row alone, the current version of a resource its account and
    # subtrees hold that does not match it (never its content; server.access.tenancy.shown_gone keeps those that
    # are not their resource's first version: one whose one version does not match was never in a copy by it)
    departed: ColumnElement[bool] | None = field(default=None, compare=False)
    unmatched: ColumnElement[bool] | None = field(default=None, compare=False)
    # narrowed by a SMART scope's query (AccessScope.filters): `clause` is `unfiltered` AND the query's matches; a
    # search's look-ups (the path a :below names) read the rows of `unfiltered`, the rows the token's account and
    # roots hold (a scope `partof:below=Location/9` finds the units below 9, though 9 is not among its matches)
    filtered: bool = False
    unfiltered: ColumnElement[bool] | None = field(default=None, compare=False)
    # narrowed beyond its account: by subtree roots, by a scope's query, or through a type so narrowed. An
    # unrestricted caller sees every row of its account, whether something refers to it or not
    restricted: bool = False

    @property
    def shows_nothing(self) -> bool:
        """The caller sees nothing of the provider (NOTHING, whatever versions it was given since)."""
        return self.key == NOTHING_KEY

    @property
    def looked_up(self) -> ColumnElement[bool] | None:
        """The rows a search's look-ups read."""
        return self.unfiltered if self.filtered else self.clause

    def admits(self, partition: Any, path: str | None, deleted: bool = False) -> bool:
        if self.partitions is not None and partition not in self.partitions and \
                not (deleted and partition in self.gone):
            return False
        return self.paths is None or any(in_subtree(path, p) for p in self.paths)


UNRESTRICTED = Visibility(key="all")
NOTHING_KEY = "nothing"
NOTHING = Visibility(false(), NOTHING_KEY, frozenset(), (), versions=false(), restricted=True)


def _digest(*parts: Any) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:24]


def _in_paths(column: ColumnElement[Any] | None, paths: tuple[str, ...] | None) -> list[ColumnElement[bool]]:
    if paths is None:
        return []
    assert column is not None
    return [or_(*(subtree(column, p, inline=True) for p in paths)) if paths else false()]


def _all(conds: list[ColumnElement[bool]]) -> ColumnElement[bool] | None:
    return and_(true(), *conds) if conds else None


def _readable_versions(provider: ResourceProvider, tenancy: Tenancy,
                       parts: Partitions) -> list[ColumnElement[bool]] | None:
    """The conditions on the kept versions of the caller's partitions (Partitions.versions), for a provider scoped
    per version; None otherwise."""
    versioning, own = provider.versioning, tenancy.versions
    if versioning is None or own is None or not tenancy.scoped_per_version(versioning):
        return None
    return parts.versions(versioning, own.partition if tenancy.partition is not None else None)


def _own(provider: ResourceProvider, tenancy: Tenancy, parts: Partitions, paths: tuple[str, ...] | None) -> Visibility:
    """Scoped by its partitions, and by its own subtree when `paths` is given; each kept version by its own
    partition and path when the provider declares them (Tenancy.versions)."""
    clause = _all([*parts.rows(provider, tenancy.partition), *_in_paths(tenancy.path, paths)])
    key = _digest(sorted(parts.served, key=str) if parts.served is not None else None, sorted(parts.gone, key=str),
                  paths)
    versions = None
    readable = _readable_versions(provider, tenancy, parts)
    if clause is not None and readable is not None and tenancy.via is None:
        own = tenancy.versions
        assert own is not None
        versions = and_(true(), *readable, *_in_paths(own.path, paths))
    return Visibility(clause, key, parts.served, paths, gone=parts.gone, versions=versions,
                      restricted=paths is not None)


def _referring(provider: ResourceProvider, target: ReferenceTarget, ids: Any) -> ColumnElement[bool]:
    """The provider's rows whose reference `target` points at one of `ids` (a select), as a condition on its
    table's columns (a reference held in a joined table is looked up through the provider's rows)."""
    cond = referring(target, provider.id_column, ids)
    if target.through is None and getattr(target.column, "table", None) is not provider.table:
        return provider.id_column.in_(select(provider.id_column).select_from(provider.source).where(cond))
    return cond


def _referred(referrer: ResourceProvider, target: ReferenceTarget, ids: Any, live: bool) -> Any:
    """The ids that the resources `ids` of `referrer` (`live`: the live ones only) point at with their reference
    `target`."""
    alive = seen(referrer, None) if live else []
    if target.through is not None:
        through = target.through
        held = select(target.column).select_from(through.table).where(
            through.key.in_(select(referrer.id_column).select_from(referrer.table).where(referrer.id_column.in_(ids),
                                                                                      *alive)))
        return held if through.where is None else held.where(through.where)
    return select(target.column).select_from(referrer.source).where(referrer.id_column.in_(ids), *alive)


def _referred_by(provider: ResourceProvider, other: ResourceProvider, targets: list[ReferenceTarget], ids: Any,
                 restricted: bool) -> ColumnElement[bool]:
    """Rows of `provider` that rows `ids` of `other` refer to (a reverse Via). To a caller narrowed beyond its
    account a live row needs a live referrer it sees; a deleted row stays seen by whoever saw one of its referrers
    (live or deleted: a deletion is seen by whoever saw the resource). Unrestricted, any referrer of its account."""
    def by(live: bool) -> ColumnElement[bool]:
        return or_(*(provider.id_column.in_(_referred(other, t, ids, live)) for t in targets))

    return by(False) if not restricted else by_deletion(provider, by(True), by(False))


def _versions_referring(provider: ResourceProvider, target: ReferenceTarget, ids: Any,
                        own: ColumnElement[bool] | None) -> ColumnElement[bool]:
    """The history rows whose version referred (`target`: Via.versions) to one of `ids`, within the caller's
    partitions (`own`: a condition on the history rows)."""
    versioning = provider.versioning
    assert versioning is not None
    through = target.through
    if through is None:
        cond: ColumnElement[bool] = target.column.in_(ids)
    else:
        assert through.version is not None
        side = [through.key == versioning.history_id, through.version == versioning.history_version,
                target.column.in_(ids), *([through.where] if through.where is not None else [])]
        cond = exists().select_from(through.table).where(*side)
    return cond if own is None else and_(cond, own)


def _unreferring(provider: ResourceProvider, target: ReferenceTarget) -> ColumnElement[bool]:
    """The provider's rows whose reference `target` points at nothing at all (no value)."""
    if target.through is not None:
        return provider.id_column.not_in(target.through.ids(true()))
    if getattr(target.column, "table", None) is not provider.table:
        return provider.id_column.in_(select(provider.id_column).select_from(provider.source)
                                      .where(target.column.is_(None)))
    return target.column.is_(None)


def _versions_unreferring(provider: ResourceProvider, target: ReferenceTarget) -> ColumnElement[bool]:
    """The history rows whose version referred (`target`: Via.versions) to nothing at all."""
    versioning = provider.versioning
    assert versioning is not None
    through = target.through
    if through is None:
        return target.column.is_(None)
    assert through.version is not None
    side = [through.key == versioning.history_id, through.version == versioning.history_version,
            *([through.where] if through.where is not None else [])]
    return not_(exists().select_from(through.table).where(*side))


def _none_referring(provider: ResourceProvider, other: ResourceProvider, via: Via,
                    targets: list[ReferenceTarget]) -> ColumnElement[bool]:
    """The provider's rows that refer to no `other` resource at all (a reverse Via: that no `other` resource, live
    or deleted, refers to)."""
    if via.reverse:
        every = select(other.id_column).select_from(other.table)
        return not_(or_(*(provider.id_column.in_(_referred(other, t, every, False)) for t in targets)))
    return and_(*(_unreferring(provider, t) for t in targets))


def _rows_versions(provider: ResourceProvider, clause: ColumnElement[bool]) -> ColumnElement[bool]:
    """The history rows of every version of the rows `clause` admits."""
    versioning = provider.versioning
    assert versioning is not None
    return exists().where(provider.id_column == versioning.history_id, clause).correlate_except(provider.table)


def _current_versions(provider: ResourceProvider, clause: ColumnElement[bool]) -> ColumnElement[bool]:
    """The history rows of the current versions of the rows `clause` admits: what a caller provably may read."""
    versioning = provider.versioning
    assert versioning is not None
    # its own read of the provider's rows (never the enclosing query's: Bulk Data joins the current row beside an
    # older version)
    return exists().where(provider.id_column == versioning.history_id, versioning.version == versioning.history_version,
                          clause).correlate_except(provider.table)


def _departed(provider: ResourceProvider, vis: Visibility) -> ColumnElement[bool] | None:
    """The versions a caller narrowed beyond its account provably left its view by (Visibility.departed): each
    version scoped by what scoped it (`versions`), those not in its view whose version before was, live (one
    after a deletion it was shown leaves nothing: its copy dropped the resource already)."""
    versioning = provider.versioning
    assert versioning is not None
    if vis.filtered or not vis.restricted or vis.versions is None:
        return None
    before = versioning.history.alias("before")  # type: ignore[attr-defined]
    was_seen = ClauseAdapter(before).traverse(vis.versions)
    return and_(not_(vis.versions), exists().where(
        before.c[versioning.history_id.key] == versioning.history_id,
        before.c[versioning.history_version.key] == versioning.history_version - 1,
        before.c[versioning.history_deleted.key].is_(False), was_seen))


def shown_gone(provider: ResourceProvider, vis: Visibility, since: datetime | None) -> ColumnElement[bool] | None:
    """The kept versions a caller is shown as deletions besides the deletions themselves, decided here only (history
    and Bulk Data ask): its departures, and to a sync (`since`) the current versions its query scope does not match
    (Visibility.unmatched) that are not their resource's first: a resource whose one version does not match was
    never in a copy by that version (told, it only named to the token an id outside its query: a `_since` of 1970
    listed every unit of its account). Not `since` itself: a client may send an earlier one than its sync point
    (Bulk Data's transactionTime is written to the second), and a resource created in that overlap and changed since
    must still be told."""
    if since is None or vis.unmatched is None:
        return vis.departed
    versioning = provider.versioning
    assert versioning is not None
    older = versioning.history.alias("older")  # type: ignore[attr-defined]
    changed = exists().where(older.c[versioning.history_id.key] == versioning.history_id,
                             older.c[versioning.history_version.key] < versioning.history_version)
    told = and_(vis.unmatched, changed)
    return told if vis.departed is None else or_(vis.departed, told)


def _with_versions(provider: ResourceProvider, vis: Visibility) -> Visibility:
    """`vis` with the versions it shows: those its scope proves per version, else the current ones; and those it
    shows as departures."""
    if provider.versioning is None or vis.clause is None:
        return vis
    if vis.filtered:  # a query is proven on the current row only
        outside = not_(vis.clause) if vis.unfiltered is None else and_(vis.unfiltered, not_(vis.clause))
        return replace(vis, versions=_current_versions(provider, vis.clause),
                       unmatched=_current_versions(provider, outside))
    if vis.versions is None:
        return replace(vis, versions=_current_versions(provider, vis.clause))
    return replace(vis, departed=_departed(provider, vis))


def _open_to(provider: ResourceProvider, scope: AccessScope) -> bool:
    """Whether the caller sees every row of the provider: one without tenancy is public (every account, every
    subtree), unless the caller's SMART scope queries on its type narrow it (a query is never ignored)."""
    return provider.tenancy is None and all(resource_type != provider.resource_type
                                            for resource_type, _ in scope.filters)


# what a SMART scope's queries on a type select, compiled as `[type]?query` is for the caller (the engine's one
# compile path, server.engine.conditions, handed down by server.engine.visibility): (connection, provider, the scope
# without its queries on that type, what that scope sees of the provider, the queries) -> a condition on its rows,
# deleted ones included, and what it was compiled against (the keys of the caller's visibilities of the other types
# its look-ups, chains and `_has` cross: two tokens with the same queries but another view of those types select
# other rows, so their keys must differ)
Narrow = Callable[[Connection, ResourceProvider, AccessScope, Visibility, tuple[Query, ...]],
                  tuple[ColumnElement[bool], Hashable]]


class Scoper:
    """Visibilities by (data generation, provider, scope), built on a miss: partitions from the freshness
    snapshot (re-read once a second), subtree roots resolved with one query, references through the
    referenced provider's visibility, a scope's queries through the engine's compile path (`narrow`)."""

    def __init__(self, freshness: Freshness) -> None:
        self.freshness = freshness
        self._cache: Bounded[Visibility] = Bounded(MAX_CACHED)

    def visibility(self, conn: Connection, provider: ResourceProvider, scope: AccessScope,
                   narrow: Narrow) -> Visibility:
        return self._visibility(conn, provider, scope, narrow, ())

    def peek(self, provider: ResourceProvider, scope: AccessScope, snapshot: Snapshot,
             database: str) -> Visibility | None:
        """The visibility already built for this snapshot of `database`, without any query (the hot path); None
        when it is not built yet (the caller then takes the path that builds it)."""
        if _open_to(provider, scope):
            return UNRESTRICTED
        return self._cache.peek((database, snapshot.stamp, provider.resource_type, scope))

    def account(self, conn: Connection, scope: AccessScope, snapshot: Snapshot | None = None) -> str | None:
        """The account the caller sees (caller_account over the accounts this database holds)."""
        snapshot = snapshot or self.freshness.snapshot(conn)
        return caller_account(scope, snapshot.accounts, snapshot.first_account, dict(snapshot.former))

    def _visibility(self, conn: Connection, provider: ResourceProvider, scope: AccessScope, narrow: Narrow,
                    chain: tuple[str, ...]) -> Visibility:
        if _open_to(provider, scope):
            return UNRESTRICTED
        snapshot = self.freshness.snapshot(conn)
        key = (database_of(conn), snapshot.stamp, provider.resource_type, scope)
        return self._cache.get(key, lambda: self._build(conn, snapshot, provider, scope, narrow,
                                                        (*chain, provider.resource_type)))

    def _partitions(self, snapshot: Snapshot, provider: ResourceProvider, scope: AccessScope,
                    account: str | None) -> Partitions:
        rows = snapshot.partitions.get(provider.resource_type, ())
        mine = [(k, served) for k, acct, served in rows if account is None or acct == account]
        allowed = frozenset(k for k, served in mine if served)
        if scope.all_accounts and len(allowed) == len(rows):
            return EVERY_PARTITION  # trusted in-process callers: no condition when every partition is served
        # else always an explicit list of the caller's partitions: one created since the snapshot (another
        # account's, a new version) stays out until the next look (a second at most), never the other way
        return Partitions(allowed, frozenset(k for k, served in mine if not served))

    def _build(self, conn: Connection, snapshot: Snapshot, provider: ResourceProvider, scope: AccessScope,
               narrow: Narrow, chain: tuple[str, ...]) -> Visibility:
        tenancy = provider.tenancy  # without it, public: every row, before the scope's queries narrow it
        vis = self._scoped(conn, snapshot, provider, tenancy, scope, narrow, chain) if tenancy is not None \
            else UNRESTRICTED
        queries = dict(scope.filters).get(provider.resource_type)
        if queries is not None:  # `vis` narrowed to the matches of any of the scope's queries (a union)
            narrowed, compiled_against = narrow(conn, provider, scope.without_filter(provider.resource_type), vis,
                                                queries)
            # keyed by what the queries were compiled against too: the cached counts and pages of a search are
            # keyed by it, and a narrower view of a type a query crosses is another visibility (issue 36, review)
            # what left the view of its account and roots left this one too: told as it is to a token without the
            # queries (a departure names no content; the query is proven on the current row only)
            departed = _with_versions(provider, vis).departed
            vis = Visibility(narrowed if vis.clause is None else and_(vis.clause, narrowed),
                             _digest(vis.key, queries, compiled_against),
                             vis.partitions, vis.paths, by_row=False, filtered=True, unfiltered=vis.clause,
                             restricted=True, departed=departed)
        return _with_versions(provider, vis)

    def _scoped(self, conn: Connection, snapshot: Snapshot, provider: ResourceProvider, tenancy: Tenancy,
                scope: AccessScope, narrow: Narrow, chain: tuple[str, ...]) -> Visibility:
        account = self.account(conn, scope, snapshot)  # first: 403 whatever the provider
        parts = self._partitions(snapshot, provider, scope, account) if tenancy.partition is not None \
            else EVERY_PARTITION
        if tenancy.via is not None:
            return self._through(conn, provider, tenancy, tenancy.via, scope, parts,
                                 scope.all_accounts or tenancy.partition is not None,
                                 scope.unowned or snapshot.accounts == {account},
                                 narrow, chain)
        if tenancy.subtree is None:  # account only: it cannot apply subtree roots
            return NOTHING if scope.roots is not None else _own(provider, tenancy, parts, None)
        if scope.roots is None:
            return _own(provider, tenancy, parts, None)
        roots = parse_roots(scope.roots)
        paths = root_paths(conn, provider, tenancy.subtree, roots, bare_root_type(self.freshness.registry),
                           parts.served, parts.gone, _readable_versions(provider, tenancy, parts)) if roots else []
        return _own(provider, tenancy, parts, outermost(paths))

    def _through(self, conn: Connection, provider: ResourceProvider, tenancy: Tenancy, via: Via, scope: AccessScope,
                 parts: Partitions, whole: bool, alone: bool, narrow: Narrow, chain: tuple[str, ...]) -> Visibility:
        """Visible when a resource the reference points at is (or, `reverse`, one that points at it): rows whose
        reference is among the other provider's visible rows. A caller the other provider's visibility does not
        narrow beyond its account sees every row of its account (`whole`: of its partitions, or every row to a
        trusted caller); of a provider without partitions, whose account its references decide, the rows referring
        to (or referred to by) a resource of its account, live or deleted, and, when its account is the only one
        (`alone`), the rows referring to nothing at all: never a row whose references name only resources of no
        account it holds (another account's, or a purged one's: a purge never hands them to the account left)."""
        own = _own(provider, tenancy, parts, None)
        other = self.freshness.registry.providers.get(via.resource_type)
        holder = other if via.reverse else provider  # the provider whose parameter holds the reference
        param = holder.params_by_name.get(via.param) if isinstance(holder, ResourceProvider) else None
        targets = param.targets_to(via.resource_type if not via.reverse else provider.resource_type) \
            if param is not None else []
        if not isinstance(other, ResourceProvider) or other.tenancy is None or not targets \
                or via.resource_type in chain:
            # nothing to see through: a type not served (or without scope), or a cycle of references
            if scope.all_accounts and scope.roots is None and not scope.filters:
                return Visibility(own.clause, own.key, by_row=False)
            return NOTHING
        seen = self._visibility(conn, other, scope, narrow, chain)
        # what decides the rows seen besides the other type's visibility: the whole partitions, or the rows referring
        # to nothing while the caller's account is the only one
        unreferred = not seen.restricted and not whole and alone
        key = _digest(own.key, via, seen.key, not seen.restricted and whole, unreferred)
        versioning = provider.versioning
        own_versions = _all(parts.versions(versioning, tenancy.versions.partition)) \
            if versioning is not None and tenancy.versions is not None else None
        if not seen.restricted and whole:
            versions = own_versions if tenancy.scoped_per_version(versioning) else None
            return Visibility(own.clause, key, parts.served, by_row=False, gone=parts.gone, versions=versions)
        ids = select(other.id_column).select_from(other.table).where(*([seen.clause] if seen.clause is not None
                                                                        else []))
        if via.reverse:
            referred = _referred_by(provider, other, targets, ids, seen.restricted)
        else:
            referred = or_(*(_referring(provider, t, ids) for t in targets))
        if unreferred:
            referred = or_(referred, _none_referring(provider, other, via, targets))
        clause = _all([*([own.clause] if own.clause is not None else []), referred])
        versions = None
        if via.versions is not None and tenancy.scoped_per_version(provider.versioning):
            versions = _versions_referring(provider, via.versions, ids, own_versions)
            if unreferred:
                versions = or_(versions, _versions_unreferring(provider, via.versions))
        elif unreferred and versioning is not None and clause is not None:
            # the only account's caller sees every version of the rows it sees (their versions are not scoped each)
            versions = _rows_versions(provider, clause)
        return Visibility(clause, key, parts.served, by_row=False, gone=parts.gone, versions=versions,
                          restricted=seen.restricted)
