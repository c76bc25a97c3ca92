"""What a caller may see: its access scope (account, subtree roots) from the token, and per provider the
visibility it amounts to: one SQL condition on the provider's table, built once per data generation.

Each provider's tenancy says how a scope applies to it: its own subtree (a materialized path), through a reference
to another scoped provider, or its account only. A scope the provider cannot apply matches nothing: subtree roots
on an account-only provider, roots of another type, of a type not served or malformed, a reference to a type not
served. A caller never learns what lies outside its scope: rows out of it are left out of every answer, and an
out-of-scope id is answered exactly as an unknown one (server.engine.visibility.sees runs the same query for both)."""
from __future__ import annotations

import hashlib
from collections.abc import Collection, Hashable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, bindparam, exists, false, or_, select, true

from server.access.roots import bare_root_type, parse_roots, root_paths
from server.access.smart_scopes import Query
from server.declare.provider import ResourceProvider, Tenancy, Via
from server.errors import Forbidden
from server.params.paths import in_subtree, outermost, subtree
from server.params.types.reference import SCOPE_ROOTS, ReferenceTarget, referring
from server.search.asks import run_on
from server.search.seen import seen
from server.search.chains import Chained, parse_request
from server.search.hops import compile_chained
from server.search.sql import JOINED, lookups, matching, read_types
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


EVERYTHING = AccessScope(all_accounts=True)


def caller_account(scope: AccessScope, accounts: Collection[str], first: str | None = None) -> str | None:
    """The account the caller sees, decided here only: the scope's (the access_scope hook's), else the account
    recorded for tokens naming none (`first`, Tenancy.first_account: a new account never changes what they see), else
    the only account the server holds ("" when it holds none: nothing to see); None: every account (trusted
    in-process callers only). Forbidden when the scope names none and the recorded account holds nothing any more
    (removed or purged: never the next tenant's data), or when nothing is recorded and the server holds several."""
    if scope.all_accounts:
        return None
    if scope.account is not None:
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
    # a provider whose versions are scoped each by its own reference (Via.versions): a condition on the rows of its
    # history table (the versions the caller sees, whatever the current row); None: by the current row (`clause`)
    versions: ColumnElement[bool] | None = field(default=None, compare=False)
    # narrowed by a SMART scope's query (AccessScope.filters): `clause` is `unfiltered` AND the query's matches; a
    # search's look-ups (the path a :below names) read the rows of `unfiltered`, the rows the token's account and
    # roots hold (a scope `partof:below=Location/9` finds the units below 9, though 9 is not among its matches)
    filtered: bool = False
    unfiltered: ColumnElement[bool] | None = field(default=None, compare=False)

    @property
    def looked_up(self) -> ColumnElement[bool] | None:
        """The rows a search's look-ups read."""
        return self.unfiltered if self.filtered else self.clause

    def admits(self, partition: Any, path: str | None) -> bool:
        if self.partitions is not None and partition not in self.partitions:
            return False
        return self.paths is None or any(in_subtree(path, p) for p in self.paths)


UNRESTRICTED = Visibility(key="all")
NOTHING = Visibility(false(), "nothing", frozenset(), ())


def _digest(*parts: Any) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:24]


def _in_partitions(tenancy: Tenancy, partitions: frozenset[Any] | None) -> list[ColumnElement[bool]]:
    if partitions is None or tenancy.partition is None:
        return []
    if not partitions:
        return [false()]
    # constants in the SQL, not parameters: PostgreSQL's generic plan of a prepared statement would not know
    # how many rows they select (it then sorted whole partitions for a page)
    return [tenancy.partition.in_(bindparam(None, sorted(partitions, key=str), unique=True, expanding=True,
                                            literal_execute=True))]


def _own(tenancy: Tenancy, partitions: frozenset[Any] | None, paths: tuple[str, ...] | None) -> Visibility:
    """Scoped by its partitions, and by its own subtree when `paths` is given."""
    conds = _in_partitions(tenancy, partitions)
    if paths is not None:
        path = tenancy.path
        assert path is not None
        conds.append(or_(*(subtree(path, p, inline=True) for p in paths)) if paths else false())
    clause = and_(true(), *conds) if conds else None
    key = _digest(sorted(partitions, key=str) if partitions is not None else None, paths)
    return Visibility(clause, key, partitions, paths)


def _referring(provider: ResourceProvider, target: ReferenceTarget, ids: Any) -> ColumnElement[bool]:
    """The provider's rows whose reference `target` points at one of `ids` (a select), as a condition on its
    table's columns (a reference held in a joined table is looked up through the provider's rows)."""
    cond = referring(target, provider.id_column, ids)
    if target.through is None and getattr(target.column, "table", None) is not provider.table:
        return provider.id_column.in_(select(provider.id_column).select_from(provider.source).where(cond))
    return cond


def _referred(referrer: ResourceProvider, target: ReferenceTarget, ids: Any) -> Any:
    """The ids that the live resources `ids` of `referrer` point at with their reference `target`."""
    live = seen(referrer, None)
    if target.through is not None:
        through = target.through
        held = select(target.column).select_from(through.table).where(
            through.key.in_(select(referrer.id_column).select_from(referrer.table).where(referrer.id_column.in_(ids),
                                                                                      *live)))
        return held if through.where is None else held.where(through.where)
    return select(target.column).select_from(referrer.source).where(referrer.id_column.in_(ids), *live)


def _versions_referring(provider: ResourceProvider, target: ReferenceTarget, ids: Any,
                        own: ColumnElement[bool] | None) -> ColumnElement[bool]:
    """The history rows whose version referred (`target`: Via.versions) to one of `ids`, of a resource whose current
    row is in the caller's partitions (`own`)."""
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
    if own is None:
        return cond
    return and_(cond, exists().where(provider.id_column == versioning.history_id, own))


def _history_id(provider: ResourceProvider) -> ColumnElement[Any]:
    assert provider.versioning is not None
    return provider.versioning.history_id


class Scoper:
    """Visibilities by (data generation, provider, scope), built on a miss: partitions from the freshness
    snapshot (re-read once a second), subtree roots resolved with one query, references through the
    referenced provider's visibility."""

    def __init__(self, freshness: Freshness) -> None:
        self.freshness = freshness
        self._cache: Bounded[Visibility] = Bounded(MAX_CACHED)

    def visibility(self, conn: Connection, provider: ResourceProvider, scope: AccessScope) -> Visibility:
        return self._visibility(conn, provider, scope, ())

    def peek(self, provider: ResourceProvider, scope: AccessScope, snapshot: Snapshot,
             database: str) -> Visibility | None:
        """The visibility already built for this snapshot of `database`, without any query (the hot path); None
        when it is not built yet (the caller then takes the path that builds it)."""
        if provider.tenancy is None:
            return UNRESTRICTED
        return self._cache.peek((database, snapshot.stamp, provider.resource_type, scope))

    def account(self, conn: Connection, scope: AccessScope, snapshot: Snapshot | None = None) -> str | None:
        """The account the caller sees (caller_account over the accounts this database holds)."""
        snapshot = snapshot or self.freshness.snapshot(conn)
        return caller_account(scope, snapshot.accounts, snapshot.first_account)

    def _visibility(self, conn: Connection, provider: ResourceProvider, scope: AccessScope,
                    chain: tuple[str, ...]) -> Visibility:
        tenancy = provider.tenancy
        if tenancy is None:
            return UNRESTRICTED
        snapshot = self.freshness.snapshot(conn)
        key = (database_of(conn), snapshot.stamp, provider.resource_type, scope)
        return self._cache.get(key, lambda: self._build(conn, snapshot, provider, tenancy, scope,
                                                        (*chain, provider.resource_type)))

    def _partitions(self, snapshot: Snapshot, provider: ResourceProvider, scope: AccessScope,
                    account: str | None) -> frozenset[Any] | None:
        rows = snapshot.partitions.get(provider.resource_type, ())
        allowed = frozenset(k for k, acct, served in rows if served and (account is None or acct == account))
        if scope.all_accounts and len(allowed) == len(rows):
            return None  # trusted in-process callers: no condition when every partition is served
        # else always an explicit list of the caller's partitions: one created since the snapshot (another
        # account's, a new version) stays out until the next look (a second at most), never the other way
        return allowed

    def _build(self, conn: Connection, snapshot: Snapshot, provider: ResourceProvider, tenancy: Tenancy,
               scope: AccessScope, chain: tuple[str, ...]) -> Visibility:
        scoped = self._scoped(conn, snapshot, provider, tenancy, scope, chain)
        queries = dict(scope.filters).get(provider.resource_type)
        return scoped if queries is None else self._filtered(conn, provider, scoped, queries)

    def _filtered(self, conn: Connection, provider: ResourceProvider, vis: Visibility,
                  queries: tuple[Query, ...]) -> Visibility:
        """`vis` narrowed to the matches of any of the searches (a token's granular scopes): each compiled as
        `[type]?query` is, its look-ups (the path a :below names) among the rows the server serves."""
        matches = []
        for query in queries:
            request = parse_request(provider, query, strict=True, providers=self.freshness.registry.providers)
            others = {rtype: () for rtype in read_types(request.all_clauses)}
            found = run_on(conn, lookups(provider, request, None, others))
            joined = {(JOINED, j.key, j.raw): compile_chained(conn, self.freshness.registry.providers, j,
                                                              lambda _: None)
                      for j in request.joined if isinstance(j, Chained)}
            # its conditions on every row, deleted ones too: a deletion stays seen where its resource was
            matches.append(and_(true(), *matching(provider, request, {**found, **joined, SCOPE_ROOTS: None})))
        narrowed = or_(*matches)
        clause = narrowed if vis.clause is None else and_(vis.clause, narrowed)
        versions = None if vis.versions is None else \
            and_(vis.versions, exists().where(provider.id_column == _history_id(provider), narrowed))
        return Visibility(clause, _digest(vis.key, queries), vis.partitions, vis.paths, by_row=False,
                          versions=versions, filtered=True, unfiltered=vis.clause)

    def _scoped(self, conn: Connection, snapshot: Snapshot, provider: ResourceProvider, tenancy: Tenancy,
                scope: AccessScope, chain: tuple[str, ...]) -> Visibility:
        account = self.account(conn, scope, snapshot)  # first: 403 whatever the provider
        partitions = self._partitions(snapshot, provider, scope, account) if tenancy.partition is not None else None
        if tenancy.via is not None:
            return self._through(conn, provider, tenancy, tenancy.via, scope, partitions, chain)
        if tenancy.subtree is None:  # account only: it cannot apply subtree roots
            return NOTHING if scope.roots is not None else _own(tenancy, partitions, None)
        if scope.roots is None:
            return _own(tenancy, partitions, None)
        roots = parse_roots(scope.roots)
        paths = root_paths(conn, provider, tenancy.subtree, roots, bare_root_type(self.freshness.registry),
                           partitions) if roots else []
        return _own(tenancy, partitions, outermost(paths))

    def _through(self, conn: Connection, provider: ResourceProvider, tenancy: Tenancy, via: Via,
                 scope: AccessScope, partitions: frozenset[Any] | None, chain: tuple[str, ...]) -> Visibility:
        """Visible when a resource the reference points at is (or, `reverse`, one that points at it): rows whose
        reference is among the other provider's visible rows (no condition when the caller sees all of them)."""
        own = _own(tenancy, partitions, None)
        other = self.freshness.registry.providers.get(via.resource_type)
        holder = other if via.reverse else provider  # the provider whose parameter holds the reference
        param = holder.params_by_name.get(via.param) if isinstance(holder, ResourceProvider) else None
        targets = param.targets_to(via.resource_type if not via.reverse else provider.resource_type) \
            if param is not None else []
        if not isinstance(other, ResourceProvider) or other.tenancy is None or not targets \
                or via.resource_type in chain:
            # nothing to see through: a type not served (or without scope), or a cycle of references
            if scope.all_accounts and scope.roots is None:
                return Visibility(own.clause, own.key, by_row=False)
            return NOTHING
        seen = self._visibility(conn, other, scope, chain)
        conds = [own.clause] if own.clause is not None else []
        versions = None
        if seen.clause is not None:
            ids = select(other.id_column).select_from(other.table).where(seen.clause)
            if via.reverse:
                conds.append(or_(*(provider.id_column.in_(_referred(other, t, ids)) for t in targets)))
            else:
                conds.append(or_(*(_referring(provider, t, ids) for t in targets)))
            if via.versions is not None:
                versions = _versions_referring(provider, via.versions, ids, own.clause)
        clause = and_(true(), *conds) if conds else None
        return Visibility(clause, _digest(own.key, via, seen.key), partitions, by_row=False, versions=versions)
