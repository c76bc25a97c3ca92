"""What a caller may see: its access scope (account, subtree roots) from the token, and per provider the
visibility it amounts to (partitions, subtree paths) as SQL conditions and as a check of one row.

A caller never learns what lies outside its scope: rows out of it are left out of every answer, and an
out-of-scope id is answered exactly as an unknown one."""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, bindparam, false, literal, or_, select, true

from server.errors import FhirError, Forbidden
from server.storage.freshness import Freshness, Snapshot, database_of
from server.engine.provider import ResourceProvider, Tenancy
from server.search.ids import coerce_id
from server.search.request import Clause, SearchRequest
from server.search.values import parse_value

MAX_ROOTS = 100
MAX_ROOT_UNITS = 1000  # org units the roots may match (an alias can name several)
MAX_CACHED = 4096


@dataclass(frozen=True)
class AccessScope:
    account: str | None = None  # None: the token names no account
    roots: tuple[str, ...] | None = None  # org unit ids or system|value identifiers; None: the whole pyramid
    all_accounts: bool = False  # trusted in-process callers (tests, tools), never a token


EVERYTHING = AccessScope(all_accounts=True)


@dataclass(frozen=True)
class Visibility:
    partitions: frozenset[Any] | None = None  # None: every partition
    paths: tuple[str, ...] | None = None  # subtree roots' paths; None: no subtree restriction
    key: Hashable = field(default=None, compare=False)  # what the cached counts are keyed by
    tenancy: Tenancy | None = field(default=None, compare=False)

    @property
    def restricted(self) -> bool:
        return self.partitions is not None or self.paths is not None

    @cached_property
    def clause(self) -> ColumnElement[bool] | None:
        """The SQL condition on the provider's table (None: nothing to restrict), built once."""
        tenancy = self.tenancy
        if tenancy is None or not self.restricted:
            return None
        conds: list[ColumnElement[bool]] = []
        if self.partitions is not None:
            # constants in the SQL, not parameters: PostgreSQL's generic plan of a prepared statement would
            # not know how many rows they select (it then sorted whole partitions for a page)
            conds.append(tenancy.partition.in_(bindparam("partitions", sorted(self.partitions, key=str), expanding=True,
                                                         literal_execute=True)) if self.partitions else false())
        if self.paths is not None and tenancy.path is not None:
            conds.append(or_(*(and_(tenancy.path >= literal(p, literal_execute=True),
                                    tenancy.path < literal(p[:-1] + "0", literal_execute=True)) for p in self.paths))
                         if self.paths else false())
        return and_(true(), *conds)

    def admits(self, partition: Any, path: str | None) -> bool:
        if self.partitions is not None and partition not in self.partitions:
            return False
        if self.paths is not None:
            return path is not None and any(path.startswith(p) for p in self.paths)
        return True


UNRESTRICTED = Visibility(key="all")


def _outermost(paths: Iterable[str]) -> tuple[str, ...]:
    """The paths that are not inside another one's subtree, sorted."""
    kept: list[str] = []
    for path in sorted(set(paths)):
        if not any(path.startswith(k) for k in kept):
            kept.append(path)
    return tuple(kept)


class Scoper:
    """Visibilities by (data generation, provider, scope), built on a miss: partitions from the freshness
    snapshot (re-read once a second), subtree roots resolved with one query."""

    def __init__(self, freshness: Freshness) -> None:
        self.freshness = freshness
        self._lock = threading.Lock()
        self._cache: OrderedDict[Hashable, Visibility] = OrderedDict()

    def visibility(self, conn: Connection, provider: ResourceProvider, scope: AccessScope) -> Visibility:
        tenancy = provider.tenancy
        if tenancy is None:
            return UNRESTRICTED
        snapshot = self.freshness.snapshot(conn)
        key = (database_of(conn), snapshot.stamp, provider.resource_type, scope)
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
                return found
        built = self._build(conn, snapshot, provider, tenancy, scope)
        with self._lock:
            self._cache[key] = built
            while len(self._cache) > MAX_CACHED:
                self._cache.popitem(last=False)
        return built

    def account(self, conn: Connection, scope: AccessScope, snapshot: Snapshot | None = None) -> str | None:
        """The account the caller sees (None: every account, for trusted in-process callers only)."""
        if scope.all_accounts:
            return None
        if scope.account is not None:
            return scope.account
        accounts = (snapshot or self.freshness.snapshot(conn)).accounts
        if len(accounts) > 1:
            raise Forbidden("the token names no account and this server holds several: "
                            "ask for a token with the account claim")
        return next(iter(accounts), "")  # an empty server: no account, nothing to see

    def _build(self, conn: Connection, snapshot: Snapshot, provider: ResourceProvider, tenancy: Tenancy,
               scope: AccessScope) -> Visibility:
        rows = snapshot.partitions.get(provider.resource_type, ())
        account = self.account(conn, scope, snapshot)
        allowed = frozenset(k for k, acct, served in rows if served and (account is None or acct == account))
        # always an explicit list of the caller's partitions: one created since the snapshot (another
        # account's, a new version) stays out until the next look (a second at most), never the other way
        partitions: frozenset[Any] | None = allowed
        if scope.all_accounts and len(allowed) == len(rows):
            partitions = None  # trusted in-process callers: no condition when every partition is served
        paths = None
        if scope.roots is not None and tenancy.path is not None:
            paths = _outermost(self._root_paths(conn, provider, tenancy, scope.roots, partitions))
        digest = hashlib.sha256(repr((sorted(partitions, key=str) if partitions is not None else None,
                                      paths)).encode()).hexdigest()[:24]
        return Visibility(partitions, paths, digest, tenancy)

    @staticmethod
    def _root_paths(conn: Connection, provider: ResourceProvider, tenancy: Tenancy, roots: tuple[str, ...],
                    partitions: frozenset[Any] | None) -> list[str]:
        from server.search.sql import where_clause  # sql imports nothing of this module; keep it that way

        assert tenancy.path is not None
        matches: list[ColumnElement[bool]] = []
        param = provider.params_by_name.get(tenancy.roots_by) if tenancy.roots_by else None
        for root in roots:
            if "|" in root and param is not None:
                system, _, value = root.partition("|")
                if not system or not value:
                    continue  # "system|" would be every unit of that system: a root names units, or nothing
                try:
                    clause = Clause(param, None, (parse_value(param, None, root),))
                except FhirError:
                    continue  # not an identifier: matches nothing
                matches.append(where_clause(provider, SearchRequest(provider.resource_type, clauses=(clause,))))
            else:
                stored = coerce_id(provider.id_column, root.removeprefix(f"{provider.resource_type}/"))
                if stored is not None:
                    matches.append(provider.id_column == stored)
        if not matches:
            return []
        live = [provider.versioning.deleted.is_(False)] if provider.versioning else []
        inside = [tenancy.partition.in_(sorted(partitions))] if partitions is not None else []
        query = (select(tenancy.path).select_from(provider.source)
                 .where(or_(*matches), tenancy.path.is_not(None), *live, *inside)
                 .order_by(tenancy.path).limit(MAX_ROOT_UNITS + 1))
        paths = list(conn.execute(query).scalars())
        if len(paths) > MAX_ROOT_UNITS:
            raise Forbidden(f"the token's subtree roots match more than {MAX_ROOT_UNITS} org units; "
                            "name the roots by id or by a unique identifier")
        return paths
