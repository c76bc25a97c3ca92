"""orgunit-fhir check-config: the settings, the plugins, auth and every database, one line each."""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from sqlalchemy.engine import make_url

from server.access.jwks import JwksUnavailable
from server.app import create_app
from server.bulk.files import directory, directory_problem
from server.errors import ConfigError
from server.extensions import Extensions
from server.ops.checks import (
    authorization_server,
    check_database,
    database_url_problem,
    embedded_database_missing,
    problems,
    serving_targets,
)
from server.settings import Settings


def cmd_check_config(args: argparse.Namespace, settings: Settings, extensions: Extensions) -> int:
    """Each check on a line, ok or FAIL; exit 1 when any fails (2 when the settings cannot be read: not YAML, an
    unknown key, a value of the wrong type)."""
    results: list[tuple[bool, str]] = [(True, f"settings: {settings.source or '(defaults)'} parsed"),
                                       (True, authorization_server(settings))]
    found = problems(settings)
    results += [(False, problem) for problem in found]
    if not found:
        try:
            app = create_app(settings)
        except ConfigError as exc:
            results.append((False, f"plugins and auth: {exc}"))
        else:
            ctx = app.state.ctx
            ctx.db.dispose()
            results.append((True, f"plugins: serving {', '.join(sorted(ctx.registry.providers))}; "
                                  f"auth: {', '.join(settings.auth.algorithms)}"))
            remote = ctx.authenticator.remote
            if remote is not None:
                try:
                    results.append((True, f"auth.jwks_url {settings.auth.jwks_url}: {remote.probe()} signing keys"))
                except JwksUnavailable as exc:
                    results.append((False, f"auth.jwks_url {settings.auth.jwks_url}: {exc}"))
    if database_url_problem(settings.database_url) is not None:
        pass  # named above: no database to look at
    elif embedded_database_missing(settings):
        writable = _can_create(settings.database_url)
        results.append((writable, f"database primary ({settings.database_url}): not created yet; " + (
            "serve creates it" if writable else "its directory cannot be created or written")))
    else:
        embedded = settings.database_url.startswith("sqlite")
        for target in serving_targets(settings):
            check = check_database(target, extensions.schema)
            results.append((check.current or (embedded and check.reachable),
                            check.describe() + ("; serve migrates it" if embedded and not check.current else "")))
    if settings.bulk.enabled:
        unwritable = directory_problem(settings)
        results.append((unwritable is None, unwritable or f"bulk.directory {directory(settings)}: writable"))
    for ok, line in results:
        print(f"{'ok  ' if ok else 'FAIL'}  {line}")
    return 0 if all(ok for ok, _ in results) else 1


def _can_create(sqlite_url: str) -> bool:
    """Whether the SQLite file's directory exists or can be made, and takes new files (tried, then undone)."""
    parent = Path(str(make_url(sqlite_url).database)).resolve().parent
    while not parent.exists():
        parent = parent.parent
    try:
        Path(tempfile.mkdtemp(dir=parent)).rmdir()
        return parent.is_dir()
    except OSError:
        return False
