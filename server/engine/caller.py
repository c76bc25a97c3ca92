"""Who asks: the verified token and the access scope the `access_scope` hook gave it, decided once per request.

The interactions take a Caller and never look at the token again; an in-process caller (a test, a tool) passes
TRUSTED, or `caller_of(ctx, principal)` to act as a token would."""
from __future__ import annotations

from dataclasses import dataclass, replace

from server.access.smart_scopes import LETTER_OF_KIND, READ
from server.access.tenancy import EVERYTHING, AccessScope
from server.access.tokens import Principal
from server.engine.context import ServerContext
from server.engine.scope_filters import filtered
from server.declare.interaction import Interaction
from server.errors import Denial, Forbidden


@dataclass(frozen=True)
class Caller:
    principal: Principal | None  # None: a trusted in-process caller, or no token (public metadata)
    scope: AccessScope
    # the scope of reads (`r`: read, vread, history, $export) when the token's SMART query scopes narrow them
    # otherwise than searches (`s`); None: `scope`
    reading: AccessScope | None = None

    def doing(self, interaction: Interaction) -> Caller:
        """The caller as one interaction sees: its reads keep to the queries of its `r` scopes."""
        if self.reading is None:
            return self
        letter = interaction.scope if interaction.kind == "operation" and interaction.scope else \
            LETTER_OF_KIND.get(interaction.kind)
        return Caller(self.principal, self.reading) if letter == READ else Caller(self.principal, self.scope)


TRUSTED = Caller(None, EVERYTHING)  # sees every account: in-process callers only, never a token
ANONYMOUS = Caller(None, AccessScope(account="", roots=()))  # no token (public metadata): sees nothing


def caller_of(ctx: ServerContext, principal: Principal) -> Caller:
    """The caller a verified token makes: its scope from the `access_scope` hook (the one place it is called)."""
    scope = ctx.pm.hook.access_scope(principal=principal, settings=ctx.settings)
    scope = scope if scope is not None else AccessScope()
    if principal.scopes is not None:  # the types its SMART scopes do not reach: nothing of them, whichever path asks
        scope = replace(scope, unseen=frozenset(p.resource_type for p in ctx.registry
                                                if not principal.scopes.sees(p.resource_type)))
    searching, reading = filtered(ctx, scope, principal.scopes)
    return Caller(principal, searching, reading if reading != searching else None)


def authorize(ctx: ServerContext, principal: Principal, interaction: Interaction) -> None:
    """403 when a plugin's `authorize` hook denies the interaction (a scope error when a denial names the SMART
    scope the token lacks: server.errors.Denial)."""
    denials = [d for d in ctx.pm.hook.authorize(principal=principal, interaction=interaction, settings=ctx.settings)
               if d]
    if denials:
        raise Forbidden(Denial.joined(denials))
