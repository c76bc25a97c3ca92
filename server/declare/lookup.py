"""What a loader or an operation handler calls to find resources of any provider (its own or another plugin's),
without reading that provider's tables: a search of the type, as `[type]?query` answers it, with the provider's
own rules (the versions it serves, its identifier systems, its scoping). The engine implements it
(server.engine.lookup); a plugin receives one (LoadCall.lookup, OperationCall.lookup) and types it with this."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy import ColumnElement, Connection

Query = str | Sequence[tuple[str, str]] | Mapping[str, str]  # "identifier=sys|v&status=active", or its pairs


class Lookup(Protocol):
    """Finds resources of any served type through a search, with the provider's rules (call.lookup of a LoadCall
    or an OperationCall). A loader's sees every account (`within(account)`: one); a handler's, what its caller
    sees."""

    def within(self, account: str) -> Lookup:
        """The same look-up, of what `account` holds only, and of what belongs to no account yet (a row of a
        provider scoped through references without partitions that nothing refers to): a loader of one account."""
        ...

    def search(self, resource_type: str, query: Query, *, limit: int | None = None,
               connection: Connection | None = None) -> list[dict[str, Any]]:
        """The matches of `[resource_type]?query`, as FHIR dicts, in the search's order: every match, or the first
        `limit`. A parameter the type does not know, a bad value or a type not served raises the FhirError a
        search answers (InvalidRequest, ResourceTypeNotSupported...): a typo never answers everything.
        `connection`: read with it (a loader's own transaction: what it wrote so far is seen), else with one of
        the lookup's own (what is committed)."""
        ...

    def condition(self, resource_type: str, query: Query, *,
                  connection: Connection | None = None) -> ColumnElement[bool]:
        """What `search` matches, as one SQL condition on the rows of the type's provider (its `from_clause`, else its
        table), the caller's scope and the live rows included: for a handler that reads every match itself, in the
        order and chunks it chooses (a streamed export), with `connection` (its call's: the same snapshot). An empty
        query: every resource the caller sees. Errors as `search` raises them."""
        ...

    def ids(self, resource_type: str, query: Query, *, limit: int | None = None,
            connection: Connection | None = None) -> list[str]:
        """The ids of `search`'s matches."""
        ...

    def one(self, resource_type: str, query: Query, *,
            connection: Connection | None = None) -> dict[str, Any] | None:
        """The one match, None when there is none; AmbiguousLookup when there are several."""
        ...

    def identified(self, resource_type: str, value: str, *, system: str | None = None,
                   connection: Connection | None = None) -> str | None:
        """The id of the resource with the identifier `value` (of `system`, else of any system: the type's
        `identifier` parameter), None when there is none; AmbiguousLookup when several hold it."""
        ...

    def identified_all(self, resource_type: str, values: Iterable[str], *, system: str | None = None,
                       connection: Connection | None = None) -> dict[str, str | None]:
        """`identified` for many values at once, in a few statements (batches of up to 1,000 values, each compiled
        as `identifier=a,b,...` is, read as the matches' ids and identifier columns: no resource is rendered):
        value -> id, or None when no resource holds it; exactly `identified`'s answer for each; AmbiguousLookup
        naming every value that several hold. For a loader resolving thousands of codes."""
        ...
