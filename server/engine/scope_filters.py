"""SMART v2 granular scopes applied: a token's scope queries (`system/Location.rs?partof:below=Location/12`) checked
against the types this server serves, once per token, and handed to the scoper as the caller's filters
(AccessScope.filters), which every interaction then keeps to (server.access.tenancy). A query the engine cannot apply
as a filter fails the token closed (401 naming the scope), never ignored."""
from __future__ import annotations

from dataclasses import replace

from server.access.smart_scopes import READ, SEARCH, Grant, Query, SmartScopes
from server.access.tenancy import AccessScope
from server.access.tokens import REALM
from server.declare.provider import ResourceProvider
from server.engine.context import ServerContext
from server.engine.parsing import parse_selection
from server.errors import AuthenticationFailed, FhirError

def _refused(grant: Grant, why: str) -> AuthenticationFailed:
    return AuthenticationFailed(
        f"invalid token: the SMART scope {grant.text[:200]!r} has a query this server cannot apply as a filter: "
        f"{why}; the token is refused rather than the query ignored",
        headers={"WWW-Authenticate": f'{REALM}, error="invalid_token", '
                                     'error_description="a SMART scope has a query this server cannot apply"'})


def _checked(ctx: ServerContext, provider: ResourceProvider, grant: Grant) -> Query:
    assert grant.query is not None
    try:
        parse_selection(ctx, provider, grant.query, "a scope's query")
    except FhirError as exc:
        raise _refused(grant, exc.diagnostics) from None
    return grant.query


def scope_filters(ctx: ServerContext, scopes: SmartScopes | None,
                  letter: str) -> tuple[tuple[str, tuple[Query, ...]], ...]:
    """Per type the token's granular scopes limit for interactions of `letter`, their queries (each checked
    against the type's provider)."""
    if scopes is None:
        return ()
    filters: list[tuple[str, tuple[Query, ...]]] = []
    for provider in ctx.registry:
        grants = scopes.filters(provider.resource_type, letter)
        if grants is None:
            continue
        if not isinstance(provider, ResourceProvider):
            raise _refused(grants[0], f"{provider.resource_type} is not searchable by parameters here")
        filters.append((provider.resource_type, tuple(_checked(ctx, provider, g) for g in grants)))
    return tuple(filters)


def filtered(ctx: ServerContext, scope: AccessScope, scopes: SmartScopes | None) -> tuple[AccessScope, AccessScope]:
    """The access scope narrowed by the token's granular scopes, for search-type interactions (`s`: searches,
    operations) and for reads (`r`: read, vread, history, $export)."""
    searching, reading = (scope_filters(ctx, scopes, letter) for letter in (SEARCH, READ))
    return (replace(scope, filters=searching) if searching else scope,
            replace(scope, filters=reading) if reading else scope)
