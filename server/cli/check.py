"""orgunit-fhir check-config: the settings, the plugins, auth and every database, one line each."""
from __future__ import annotations

import argparse
from dataclasses import replace

from server.access.jwks import JwksUnavailable
from server.app import create_app
from server.bulk.files import directory, directory_problem
from server.engine.context import ServerContext
from server.errors import ConfigError, StorageError
from server.extensions import Extensions
from server.ops.checks import (
    authorization_server,
    check_database,
    database_url_problem,
    default_account_problem,
    embedded_database_missing,
    missing_database,
    problems,
    serving_targets,
    storage_problems,
)
from server.settings import Settings
from server.storage.backend import is_embedded


def cmd_check_config(args: argparse.Namespace, settings: Settings, extensions: Extensions) -> int:
    """Each check on a line, ok or FAIL; exit 1 when any fails (2 when the settings cannot be read: not YAML, an
    unknown key, a value of the wrong type)."""
    results: list[tuple[bool | None, str]] = [(True, f"settings: {settings.source or '(defaults)'} parsed"),
                                       (True, authorization_server(settings))]
    found = problems(settings)
    results += [(False, problem) for problem in found]
    if not found:
        secret = settings.data_path / "jwt-secret"
        looked_at = settings
        if not (settings.auth.secret or settings.auth.secret_file) and not secret.exists():
            # the server makes its HMAC secret on its first start; checking makes nothing
            results.append((True, f"auth: no HMAC secret yet at {secret.resolve()}: serve creates it on its first "
                                  "start (tokens are minted where the server runs)"))
            looked_at = replace(settings, auth=replace(settings.auth, secret="check-config: not a secret"))
        try:
            app = create_app(looked_at)
        except ConfigError as exc:
            results.append((False, f"plugins and auth: {exc}"))
        else:
            ctx = app.state.ctx
            results += _default_account(settings, ctx)
            ctx.db.dispose()
            results.append((True, f"plugins: serving {', '.join(sorted(ctx.registry.providers))}; "
                                  f"auth: {', '.join(settings.auth.algorithms)}"))
            remote = ctx.authenticator.remote
            if remote is not None:
                try:
                    results.append((True, f"auth.jwks_url {settings.auth.jwks_url}: {remote.probe()} signing keys"))
                except JwksUnavailable as exc:
                    results.append((False, f"auth.jwks_url {settings.auth.jwks_url}: {exc}"))
    if database_url_problem(settings.database_url) is not None or storage_problems(settings):
        pass  # named above: no database to look at
    elif embedded_database_missing(settings):
        results.append((False, f"database primary ({settings.database_url}): {missing_database(settings)}"))
    else:
        # a chain behind fails here on both backends, named with its plugin, revision and head: serve migrates
        # the embedded database (its own) as it starts, which the operator should know before, and refuses others
        embedded = is_embedded(settings.database_url)
        for target in serving_targets(settings):
            results += check_database(target, extensions.schema).lines(embedded)
    results += [(None, notice) for notice in extensions.deprecated]  # runs, until the next minor version
    if settings.bulk.enabled:
        unwritable = directory_problem(settings)
        results.append((unwritable is None, unwritable or f"bulk.directory {directory(settings)}: writable"))
    for ok, line in results:  # None: a warning (a plugin relying on a deprecated form), not a failure
        print(f"{'WARN' if ok is None else 'ok  ' if ok else 'FAIL'}  {line}")
    return 0 if all(ok is not False for ok, _ in results) else 1



def _default_account(settings: Settings, ctx: ServerContext) -> list[tuple[bool, str]]:
    """auth.default_account, when set, against the accounts of the database (none to say when it cannot be read:
    the database lines below say why)."""
    account = settings.auth.default_account
    if not account or database_url_problem(settings.database_url) is not None or embedded_database_missing(settings):
        return []
    try:
        with ctx.db.connect() as conn:
            snapshot = ctx.freshness.snapshot(conn)
    except StorageError:
        return []
    problem = default_account_problem(account, snapshot.accounts, dict(snapshot.former))
    if problem is not None:
        return [(False, problem)]
    held = "an account of the database" if snapshot.accounts else "the database holds no account yet"
    return [(True, f"auth.default_account {account!r}: {held}")]
