"""orgunit-fhir token: a JWT signed with the local HMAC key, for the embedded server and tests."""
from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass, replace
from typing import Any

from server.access.mint import mint_token
from server.cli.common import say
from server.cli.serve import accounts, claimless_account, first_account, former_accounts
from server.declare.provider import ResourceProvider
from server.engine.caller import Caller, caller_of
from server.engine.context import ServerContext, create_context
from server.engine.visibility import visibility
from server.errors import ConfigError, FhirError, Forbidden
from server.extensions import Extensions
from server.ops.checks import default_account_problem, embedded_database_missing
from server.settings import Settings


def _claim(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=JSON, e.g. level=3 or 'tags=[\"a\"]', got {text!r}")
    try:
        value = json.loads(raw)
        json.dumps(value, allow_nan=False)  # NaN and Infinity are not JSON either
    except ValueError:
        value = raw
    return key.strip(), value


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sub", default="orgunit-fhir-cli", metavar="S",
                        help="the token's subject (default: orgunit-fhir-cli)")
    parser.add_argument("--permission", action="append", metavar="P",
                        help="permission to grant (repeatable; default: the required one)")
    parser.add_argument("--ttl", type=int, default=24 * 3600, metavar="SECONDS",
                        help="lifetime in seconds (default: 86400, one day)")
    parser.add_argument("--account", metavar="NAME", help="account (tenant) of the caller: sets auth.account_claim")
    parser.add_argument("--org-unit-root", action="append", dest="org_unit_roots", metavar="REF",
                        help="resource the caller may read below, as Type/id (Location/12), an id (12) or an "
                             "identifier (system|value): adds to auth.roots_claim (repeatable)")
    parser.add_argument("--claim", action="append", type=_claim, default=[], metavar="KEY=JSON",
                        help="extra claim, the value parsed as JSON or else taken as a string (repeatable)")


@dataclass(frozen=True)
class Held:
    """What the database holds for a token: the accounts holding data, the one recorded for tokens without an account
    claim, the names that no longer name an account (what became of each), why the server refuses the token (None:
    it verifies it), and the token's roots that name nothing it may read below (a typo, a unit of another account)."""
    accounts: list[str]
    first: str | None
    former: dict[str, str]
    refused: str | None
    empty_roots: list[str]


def _held(settings: Settings, token: str) -> Held:
    if embedded_database_missing(settings):
        return Held([], None, {}, None, [])  # never create a database (or its directory) just to look
    ctx = create_context(settings)
    try:
        refused, empty_roots = None, []
        try:
            caller = caller_of(ctx, ctx.authenticator.authenticate(f"Bearer {token}"))
        except FhirError as exc:  # a --claim the server refuses (its reason logged above), a scope the hook refuses
            refused = f"{exc.status}: {exc.diagnostics}"
        else:
            empty_roots = _empty_roots(ctx, caller)
        return Held(accounts(ctx), first_account(ctx), former_accounts(ctx), refused, empty_roots)
    finally:
        ctx.db.dispose()


def _empty_roots(ctx: ServerContext, caller: Caller) -> list[str]:
    """Each root of the token, alone, as the server scopes it: those under which it sees nothing of any provider
    scoped by a subtree."""
    subtrees = [p for p in ctx.registry.providers.values() if isinstance(p, ResourceProvider)
                and p.tenancy is not None and p.tenancy.subtree is not None]
    if not caller.scope.roots or not subtrees:
        return []
    empty = []
    try:
        with ctx.db.connect() as conn:
            for root in caller.scope.roots:
                alone = Caller(None, replace(caller.scope, roots=(root,)))
                if all(visibility(ctx, conn, p, alone).paths == () for p in subtrees):
                    empty.append(root)
    except Exception:  # noqa: BLE001 - as accounts(): a database it cannot read says nothing of the roots; minting
        return []      # needs the secret only
    return empty


def cmd_token(args: argparse.Namespace, settings: Settings, extensions: Extensions) -> int:
    if args.ttl <= 0:
        raise ConfigError("--ttl must be a positive number of seconds")
    token = mint_token(settings, subject=args.sub, permissions=args.permission, ttl=args.ttl, extra=dict(args.claim),
                       account=args.account, roots=args.org_unit_roots, create=False)
    print(token)
    found = _held(settings, token)
    held, first, former = found.accounts, found.first, found.former
    if found.refused is not None:
        hint = "; a --claim it cannot accept?" if found.refused.startswith("401") else ""
        say(f"note: this server refuses this token ({found.refused}){hint}", logging.WARNING, command="token")
    if found.empty_roots:
        say(f"note: no resource this token may read is named by its root(s) {', '.join(found.empty_roots)} "
            "(Type/id, an id or system|value, in the token's account): it sees nothing below "
            f"{'them' if len(found.empty_roots) > 1 else 'it'}", logging.WARNING, command="token")
    if args.account is None and settings.auth.account_claim not in dict(args.claim):
        problem = default_account_problem(settings.auth.default_account, held, former)
        if problem is not None:  # check-config fails and serve refuses on it
            say(f"note: {problem}", logging.WARNING, command="token")
        try:
            sees = claimless_account(settings, held, first, former)
        except Forbidden as exc:
            say(f"note: this token is refused (403): {exc.diagnostics} (accounts: {', '.join(held) or 'none'})",
                logging.WARNING, command="token")
        else:
            if len(held) > 1 and not settings.auth.default_account:
                say(f"note: this server holds several accounts ({', '.join(held)}): a token without --account sees "
                    f"account {sees!r}, the first loaded; pass --account for another", logging.WARNING,
                    command="token")
    elif args.account is not None and args.account in former and args.account not in held:
        say(f"note: this token is refused (403): account {args.account!r} {former[args.account]}", logging.WARNING,
            command="token")
    elif args.account is not None and held and args.account not in held:
        say(f"note: no data source belongs to account {args.account!r} (accounts: {', '.join(held)}): this token "
            "sees an empty server", logging.WARNING, command="token")
    return 0
