"""orgunit-fhir serve: check, prepare the embedded database (schema, demo data, bodies), then run uvicorn."""
from __future__ import annotations

import argparse
import glob
import logging
import os
import resource
import shutil
import signal
import socket
import tempfile

from collections.abc import Collection, Mapping

import uvicorn
from sqlalchemy import Engine

from server.access.mint import mint_token
from server.access.tenancy import AccessScope, caller_account
from server.app import create_app
from server.cli.data import ensure_schema, render, write_demo
from server.engine.context import ServerContext, create_context
from server.errors import ConfigError, Forbidden
from server.extensions import Extensions
from server.cli.common import say
from server.http.protocol import open_files_needed
from server.ops.checks import (
    check_primary,
    check_serving_databases,
    default_account_problem,
    embedded_database_missing,
    embedded_path,
    missing_database,
    no_schema,
    validate,
)
from server.telemetry.logs import configure_logging
from server.telemetry.metrics import MULTIPROC_ENV
from server.settings import ACCESS_LOG_ENV, DATABASE_ENV, FHIR_MOUNT, SETTINGS_ENV, Settings
from server.storage.backend import is_embedded

log = logging.getLogger("orgunit_fhir")
# httptools, percent-encoding raw UTF-8 request targets and answering what it refuses with an OperationOutcome
HTTP_PROTOCOL = "server.http.protocol:FhirHttpToolsProtocol"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", metavar="H", help="address to listen on (default: server.host, 127.0.0.1)")
    parser.add_argument("--port", type=int, metavar="P", help="TCP port (default: server.port, 8000)")
    parser.add_argument("--workers", type=int, metavar="N", help="worker processes (default: server.workers, 1)")
    parser.add_argument("--demo", action="store_true",
                        help="create the embedded (SQLite) database with the synthetic demo when it does not exist "
                             "or holds no org units (`make serve` does); without it serve never creates a database")
    parser.add_argument("--no-demo", action="store_true", help=argparse.SUPPRESS)  # the default now; kept for scripts
    parser.add_argument("--no-access-log", action="store_true", help="do not log each request (benchmarks)")


def accounts(ctx: ServerContext) -> list[str]:
    """The accounts that hold data, from the providers' tenancy ([] when the database cannot say)."""
    try:
        with ctx.db.connect() as conn:
            return sorted(ctx.freshness.snapshot(conn).accounts)
    except Exception:  # noqa: BLE001 - an unreachable or empty database holds no account
        return []


def first_account(ctx: ServerContext) -> str | None:
    """The account recorded for tokens without an account claim (Tenancy.first_account; None when the database cannot
    say)."""
    try:
        with ctx.db.connect() as conn:
            return ctx.freshness.snapshot(conn).first_account
    except Exception:  # noqa: BLE001 - an unreachable or empty database holds no account
        return None


def former_accounts(ctx: ServerContext) -> dict[str, str]:
    """The names that no longer name an account, and what became of each (Tenancy.former_accounts; {} when the
    database cannot say)."""
    try:
        with ctx.db.connect() as conn:
            return dict(ctx.freshness.snapshot(conn).former)
    except Exception:  # noqa: BLE001 - an unreachable or empty database holds no account
        return {}


def claimless_account(settings: Settings, held: Collection[str], first: str | None,
                      former: Mapping[str, str] | None = None) -> str:
    """The account a token without an account claim sees (auth.default_account, else caller_account's decision over
    the accounts held); Forbidden, naming why, when such a token is refused."""
    return caller_account(AccessScope(account=settings.auth.default_account), held, first, former) or ""


def _is_empty(engine: Engine, extensions: Extensions) -> bool:
    with engine.connect() as conn:
        return all(demo.is_empty(conn) for demo in extensions.demos)


def _metrics_dir(workers: int) -> str | None:
    """Several workers add up their metrics through a directory: $PROMETHEUS_MULTIPROC_DIR if set (emptied of
    a previous run's files), else a new one (removed at exit). Returns the directory made here."""
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        for stale in glob.glob(os.path.join(given, "*.db")):
            os.remove(stale)
        return None
    if workers < 2:
        return None
    made = tempfile.mkdtemp(prefix="orgunit-fhir-metrics-")
    os.environ[MULTIPROC_ENV] = made
    return made


def _has_schema(engine: Engine, extensions: Extensions) -> bool:
    with engine.connect() as conn:
        return any(extensions.schema.current(conn).values())


def _migrate_embedded(settings: Settings, extensions: Extensions) -> None:
    """The embedded database is the server's own: each chain behind (a new release, a plugin newly enabled) is
    migrated as serve starts, named in a warning first; a chain at a revision this server does not know (a newer
    release migrated it) is refused, not half-migrated."""
    found = check_primary(settings, extensions.schema)
    if found.reachable and not found.migratable:
        raise ConfigError(found.describe())
    for chain in found.stale:
        say(f"serve: migrating the embedded database {embedded_path(settings)}: {chain.describe()}", logging.WARNING,
            command="serve", chain=chain.name, plugins=list(chain.plugins), revision=chain.revision, head=chain.head)
    ensure_schema(settings, extensions)


def _prepare_databases(settings: Settings, extensions: Extensions, ctx: ServerContext, demo: bool) -> None:
    """The embedded database is migrated and its bodies rendered; it is created (with the demo) only when asked:
    a typo'd path or an empty file is refused, never served as an empty registry or as the demo."""
    if is_embedded(settings.database_url):
        missing = embedded_database_missing(settings)
        if missing or not _has_schema(ctx.db, extensions):
            if not demo:
                raise ConfigError(missing_database(settings) if missing else no_schema(settings))
            say(f"serve --demo: creating {embedded_path(settings)} with the synthetic demo (not your data)",
                command="serve")
            write_demo(settings, extensions, None, 42)
        _migrate_embedded(settings, extensions)  # an existing database of an older version is migrated, loudly
        if demo and extensions.demos and _is_empty(ctx.db, extensions):
            say("serve --demo: the database holds no org units: writing the synthetic demo", command="serve")
            write_demo(settings, extensions, None, 42)
        render(settings)  # the embedded database is ours to write: bodies for these settings
    elif demo:
        raise ConfigError("--demo creates an embedded SQLite database only; for PostgreSQL run `orgunit-fhir demo "
                          "--database URL` explicitly")
    for check in check_serving_databases(settings, extensions.schema):  # refuses a schema behind
        log.log(logging.INFO if check.current else logging.WARNING, check.describe())


def _refuse_busy_port(host: str, port: int) -> None:
    """One line, before anything is prepared or printed, when the address cannot be listened on."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (another server on that port?); "
                              "choose another with --port or server.port") from None


def _banner(settings: Settings, ctx: ServerContext, host: str, port: int) -> None:
    """What `serve` prints for its user, on stdout (README, Commands): the base, and on the embedded database a token
    (the logs go to stderr)."""
    print(f"FHIR base: http://{host}:{port}{FHIR_MOUNT}", flush=True)
    if not is_embedded(settings.database_url):  # a production log gets no token
        print("tokens: from your identity provider, or `orgunit-fhir token` with the HMAC secret",
              flush=True)
        return
    try:
        ctx.freshness.expire()
        held = accounts(ctx)
        try:
            sees = claimless_account(settings, held, first_account(ctx))
        except Forbidden as exc:
            print(f"(no local token: {exc.diagnostics}; mint one with `orgunit-fhir token --account NAME`, accounts: "
                  f"{', '.join(held) or 'none'})", flush=True)
            return
        account = sees if len(held) > 1 else None
        token = mint_token(settings, ttl=24 * 3600, account=account)
        print(f"A token valid for 24 hours{f' (account {account})' if account else ''}:\n{token}",
              flush=True)
    except ConfigError as exc:
        print(f"(no local token: {exc})", flush=True)


def _allow_open_files(needed: int) -> None:
    """Raise the soft limit of open files to what the connection cap needs (within the hard limit, which
    check-config and start-up compare with it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed if hard == resource.RLIM_INFINITY else min(needed, hard),
                                                    hard))


def cmd_serve(args: argparse.Namespace, settings: Settings, extensions: Extensions) -> int:
    validate(settings)  # every problem of the settings at once, each naming its key
    workers = args.workers or settings.server.workers
    if workers < 1:
        raise ConfigError("--workers must be at least 1")
    if not args.demo and embedded_database_missing(settings):
        raise ConfigError(missing_database(settings))  # before anything is made (the secret, a metrics folder)
    _refuse_busy_port(args.host or settings.server.host, args.port or settings.server.port)
    metrics_dir = _metrics_dir(workers)  # before any app opens its metric files there
    settings = settings.without_access_log() if args.no_access_log else settings
    try:
        log_config = configure_logging(settings)
        ctx = create_context(settings)
        create_app(settings, context=ctx)  # fail here, with a clear message, before anything is written
        try:
            _prepare_databases(settings, extensions, ctx, demo=args.demo)
            ctx.freshness.expire()
            with ctx.db.connect() as conn:  # settings that would empty the registry are refused (issue 38)
                snapshot = ctx.freshness.snapshot(conn)
            problem = default_account_problem(settings.auth.default_account, snapshot.accounts,
                                              dict(snapshot.former))
            if problem is not None:
                raise ConfigError(problem)
            host, port = args.host or settings.server.host, args.port or settings.server.port
            _banner(settings, ctx, host, port)
        finally:
            ctx.db.dispose()
        if settings.source:
            os.environ[SETTINGS_ENV] = os.path.abspath(settings.source)
        if settings.database.url:
            os.environ[DATABASE_ENV] = settings.database.url
        os.environ[ACCESS_LOG_ENV] = "1" if settings.server.access_log else "0"
        # SIGTERM: uvicorn stops accepting, lets the requests in flight finish (server.shutdown_grace_seconds),
        # runs the lifespan shutdown (the pool closes), then raises the signal again: by then the stop was
        # orderly, so this handler lets serve exit 0
        _allow_open_files(open_files_needed(settings))  # the workers inherit it
        previous = signal.signal(signal.SIGTERM, lambda *_: None)
        try:
            uvicorn.run("server.asgi:create", factory=True, host=host, port=port, workers=workers,
                        loop="uvloop", http=HTTP_PROTOCOL, ws="none", log_level="info", proxy_headers=False,
                        access_log=False,  # the request middleware writes the access log, with the request id
                        log_config=log_config, timeout_graceful_shutdown=settings.server.shutdown_grace_seconds)
        finally:
            signal.signal(signal.SIGTERM, previous)
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    log.info("serve: stopped")
    return 0
