"""Core hook implementations, registered `trylast` so that any plugin can override them."""
from __future__ import annotations

import logging

from server.access.claims import MISSING, ClaimShapeError, claim, mis_cased
from server.access.roots import MAX_ROOTS
from server.access.tenancy import AccessScope
from server.access.tokens import Principal
from server.declare.interaction import Interaction
from server.errors import (
    FhirError,
    Forbidden,
    InternalError,
    SchemaMissing,
    ServiceUnavailable,
    StatementTimedOut,
    StorageBusy,
    StorageUnavailable,
    TooCostly,
)
from server.hookspecs import hookimpl
from server.settings import Settings

log = logging.getLogger("orgunit_fhir")


@hookimpl(trylast=True)
def authorize(principal: Principal, interaction: Interaction, settings: Settings) -> str | None:
    """The permission, on every call; then the token's SMART scopes, when it carries some (the Authenticator
    leaves them out when auth.smart_scopes is off), per resource type and interaction."""
    if settings.auth.permission not in principal.permissions:
        return f"the token lacks the permission {settings.auth.permission!r}"
    if principal.scopes is not None:
        return principal.scopes.denial(interaction.kind, interaction.resource_type, interaction.scope)
    return None


@hookimpl(trylast=True)
def access_scope(principal: Principal, settings: Settings) -> AccessScope:
    """The account claim (absent or null: auth.default_account) and the subtree-roots claim of the token (absent:
    no subtree limit; null or []: nothing). The only account held, when neither names one, is the Scoper's."""
    auth = settings.auth
    for name in (auth.account_claim, auth.roots_claim):  # `Account` would be read as absent: another account's data
        named = mis_cased(principal.claims, name)
        if named is not None:
            raise Forbidden(f"the token's claim {named!r} is named as the claim {name!r} but for its case: it cannot "
                            "be read")
    try:  # a claim above whose path lies something else than an object cannot be read: never read as absent
        account = claim(principal.claims, auth.account_claim, strict=True)
        roots = claim(principal.claims, auth.roots_claim, strict=True)
    except ClaimShapeError as exc:
        raise Forbidden(f"the token's account or subtree-roots claim cannot be read: {exc}") from None
    if account is MISSING or account is None:
        account = auth.default_account
    elif not isinstance(account, str) or not account or "\x00" in account:
        raise Forbidden(f"the token's {auth.account_claim!r} claim must be an account name (a string)")
    if roots is MISSING:
        return AccessScope(account=account)
    if roots is None:  # present but null: fail closed, as an empty list
        roots = []
    elif isinstance(roots, str):
        roots = [roots]
    if not isinstance(roots, list) or not all(
            isinstance(r, str | int) and not isinstance(r, bool) and "\x00" not in str(r) for r in roots):
        raise Forbidden(f"the token's {auth.roots_claim!r} claim must be a list of roots: Type/id (Location/12), "
                        "ids or system|value identifiers")
    if len(roots) > MAX_ROOTS:
        raise Forbidden(f"the token's {auth.roots_claim!r} claim names more than {MAX_ROOTS} roots")
    return AccessScope(account=account, roots=tuple(str(r) for r in roots))


@hookimpl(trylast=True)
def translate_exception(exception: BaseException, interaction: Interaction | None) -> FhirError | None:
    """The one place a storage error (server.errors; raised by server.storage for whatever the driver said) gets
    its HTTP answer: a statement timeout 503 too-costly, a database out of reach 503 transient, the rest 500."""
    if isinstance(exception, StatementTimedOut):
        return TooCostly("too costly: the request's queries took longer than the server allows (timed out: "
                         "database.statement_timeout_ms per statement, server.request_timeout_seconds in all); narrow "
                         "the search (more parameters, a smaller _count, no _total) and try again",
                         headers={"Retry-After": "5"})
    if isinstance(exception, StorageBusy):  # a request that writes (an $export kick-off) while a load writes
        return ServiceUnavailable("another writer holds the database (a load or an operator's command; one writer at "
                                  "a time): this request writes and did not wait for it; try again shortly",
                                  headers={"Retry-After": "10"})
    if isinstance(exception, StorageUnavailable):
        return ServiceUnavailable("the database is unavailable or too slow; try again shortly",
                                  headers={"Retry-After": "5"})
    if isinstance(exception, SchemaMissing):  # not transient: it stays so until an operator migrates
        log.error("the database schema is behind this server's: %s; run `orgunit-fhir migrate`", exception)
        return ServiceUnavailable("the database schema is behind this server's (a table or column it reads is "
                                  "missing): an operator runs `orgunit-fhir migrate`; /readyz names the chain")
    return InternalError("internal server error")
