"""Core hook implementations, registered `trylast` so that any plugin can override them."""
from __future__ import annotations

import logging

from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from server.access.claims import MISSING, claim
from server.access.roots import MAX_ROOTS
from server.access.scope import AccessScope
from server.access.tokens import Principal
from server.declare.interaction import Interaction
from server.errors import FhirError, Forbidden, InternalError, ServiceUnavailable, TooCostly
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
    account = claim(principal.claims, auth.account_claim)
    if account is MISSING or account is None:
        account = auth.default_account
    elif not isinstance(account, str) or not account or "\x00" in account:
        raise Forbidden(f"the token's {auth.account_claim!r} claim must be an account name (a string)")
    roots = claim(principal.claims, auth.roots_claim)
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


def _timed_out(exception: BaseException) -> bool:
    """PostgreSQL's statement_timeout (SQLSTATE 57014) or SQLite's (server.storage.timeouts) interrupting a query."""
    if not isinstance(exception, OperationalError):
        return False
    orig = exception.orig
    return getattr(orig, "sqlstate", None) == "57014" or "interrupted" in str(orig)


@hookimpl(trylast=True)
def translate_exception(exception: BaseException, interaction: Interaction | None) -> FhirError | None:
    if _timed_out(exception):
        return TooCostly("the query took longer than the database statement timeout; narrow the search "
                         "(more parameters, a smaller _count, no _total) and try again", headers={"Retry-After": "5"})
    if isinstance(exception, (OperationalError, PoolTimeout)) or (
        isinstance(exception, DBAPIError) and exception.connection_invalidated
    ):
        return ServiceUnavailable("the database is unavailable or too slow; try again shortly",
                                  headers={"Retry-After": "5"})
    return InternalError("internal server error")
