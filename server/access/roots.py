"""A token's subtree roots, typed: `Type/id` (`Location/12`), a bare id (kept for compatibility: an id of the
provider whose tenancy declares a subtree with `roots_by`), or `system|value` (resolved with the `roots_by` token
parameter of each provider that declares one). A root is resolved against the type it names only; a root that
is malformed, of an unknown type or of a type without a subtree names nothing."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, or_, select, true

from server.declare.provider import (
    RESOURCE_TYPE_RE,
    AnyProvider,
    ResourceProvider,
    Subtree,
)
from server.errors import FhirError, Forbidden
from server.params.ids import FHIR_ID, stored_id
from server.params.types.base import EVERY_ROW
from server.search.request import Clause, SearchRequest
from server.search.seen import by_deletion
from server.search.sql import matching
from server.params.values import parse_value

MAX_ROOTS = 100  # roots in one token
MAX_ROOT_UNITS = 1000  # rows the roots may match (an identifier can name several)


@dataclass(frozen=True)
class IdRoot:
    resource_type: str | None  # None: a bare id, of the bare-root type (bare_root_type)
    id: str


@dataclass(frozen=True)
class IdentifierRoot:
    text: str  # "system|value", as a token search value


Root = IdRoot | IdentifierRoot


def parse_root(text: str) -> Root | None:
    """The root a token names, or None when it names nothing (malformed)."""
    if "|" in text:
        system, _, value = text.partition("|")
        # "system|" would be every row of that system and "|value" a value of no system: a root names rows
        return IdentifierRoot(text) if system and value else None
    resource_type, slash, rid = text.rpartition("/")
    if not FHIR_ID.fullmatch(rid):
        return None
    if not slash:
        return IdRoot(None, rid)
    return IdRoot(resource_type, rid) if RESOURCE_TYPE_RE.match(resource_type) else None


def parse_roots(texts: Iterable[str]) -> tuple[Root, ...]:
    """The well-formed roots, in order, each once."""
    return tuple(dict.fromkeys(root for root in map(parse_root, texts) if root is not None))


def bare_root_type(providers: Iterable[AnyProvider]) -> str | None:
    """The type a bare-id root names: the one provider scoped by its subtree with `roots_by` (None when no
    provider or several declare one: bare ids then name nothing)."""
    found = [p.resource_type for p in providers if isinstance(p, ResourceProvider) and p.tenancy is not None
             and p.tenancy.subtree is not None and p.tenancy.subtree.roots_by is not None]
    return found[0] if len(found) == 1 else None


def _matches(provider: ResourceProvider, subtree: Subtree, roots: Sequence[Root],
             bare_type: str | None) -> list[ColumnElement[bool]]:
    """Conditions on the provider's rows, one per root naming some of them."""
    matches: list[ColumnElement[bool]] = []
    param = provider.params_by_name.get(subtree.roots_by) if subtree.roots_by else None
    for root in roots:
        if isinstance(root, IdentifierRoot):
            if param is None:
                continue
            try:
                clause = Clause(param, None, (parse_value(param, None, root.text),))
            except FhirError:
                continue  # not a value of that parameter: matches nothing
            # the identifier's rows, deleted ones too (root_paths says which the caller's roots may name)
            identified = SearchRequest(provider.resource_type, clauses=(clause,))
            matches.append(and_(true(), *matching(provider, identified, sight=EVERY_ROW)))  # no caller yet
        elif (root.resource_type or bare_type) == provider.resource_type:
            stored = stored_id(provider, root.id)
            if stored is not None:
                matches.append(provider.id_column == stored)
    return matches


def root_paths(conn: Connection, provider: ResourceProvider, subtree: Subtree, roots: Sequence[Root],
               bare_type: str | None, partitions: frozenset[Any] | None,
               gone: frozenset[Any] = frozenset(), versions: Sequence[ColumnElement[bool]] | None = None) -> list[str]:
    """The paths of the provider's rows that the roots name, within the caller's partitions: live ones, and deleted
    ones there or in `gone` (the caller's partitions no longer served: its removed data sources). A root deleted
    (`--delete-missing`, a data source or account removed) still names its subtree, whose deletions the token that
    saw it must be shown (410, `DELETE` entries): a deletion is seen by whoever saw the resource. With `versions`
    (the caller's condition on the kept versions of a provider scoped per version, VersionScope), also the places
    the roots held in the versions it sees: a root that moved still names what was below it before (its versions
    of before, and the deletions there), and a root whose data source was removed and loaded into another account
    still names, to the first account's tokens, what they held (their copies are told how it ended)."""
    matches = _matches(provider, subtree, roots, bare_type)
    tenancy = provider.tenancy
    if not matches or tenancy is None:
        return []
    if partitions is not None and tenancy.partition is not None:
        def inside(keys: frozenset[Any]) -> ColumnElement[bool]:
            assert tenancy is not None and tenancy.partition is not None
            return tenancy.partition.in_(sorted(keys, key=str))
        scoped = [by_deletion(provider, inside(partitions), inside(partitions | gone))]
    else:
        scoped = []
    query = (select(subtree.path).select_from(provider.source)
             .where(or_(*matches), subtree.path.is_not(None), *scoped)
             .order_by(subtree.path).limit(MAX_ROOT_UNITS + 1))
    paths = list(conn.execute(query).scalars())
    own, versioning = tenancy.versions, provider.versioning
    if versions is not None and own is not None and own.path is not None and versioning is not None:
        named = select(provider.id_column).select_from(provider.source).where(or_(*matches))
        held = (select(own.path).select_from(versioning.history)
                .where(versioning.history_id.in_(named), own.path.is_not(None), *versions).distinct()
                .order_by(own.path).limit(MAX_ROOT_UNITS + 1))
        paths = sorted({*paths, *conn.execute(held).scalars()})
    if len(paths) > MAX_ROOT_UNITS:
        raise Forbidden(f"the token's subtree roots match more than {MAX_ROOT_UNITS} {provider.resource_type} "
                        "resources; name the roots by id or by a unique identifier")
    return paths
