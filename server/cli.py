"""orgunit-fhir serve | check-config | demo | load | render | migrate | token"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence

from sqlalchemy.exc import OperationalError
from typing import Any

from server.errors import ConfigError
from server.progress import Progress
from server.settings import DATABASE_ENV, SETTINGS_ENV, Settings, load_settings

DEFAULT_DEMO_SIZE = 2000
log = logging.getLogger("orgunit_fhir")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--settings", help=f"settings file (default: ${SETTINGS_ENV} or ./settings.yaml)")
    parser.add_argument("--database", help=f"database URL, e.g. postgresql://user@host/db (default: ${DATABASE_ENV} "
                                           "or SQLite in the data directory)")


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="orgunit-fhir", description="Read-only FHIR R4 server for org units")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the FHIR API (creates demo data in an empty embedded database)")
    _common(serve)
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--workers", type=int, help="worker processes (default: server.workers)")
    serve.add_argument("--no-demo", action="store_true", help="do not create demo data in an empty database")
    serve.add_argument("--no-access-log", action="store_true", help="do not log each request (benchmarks)")

    demo = sub.add_parser("demo", help="write a synthetic 5-level pyramid")
    _common(demo)
    demo.add_argument("--size", type=int, default=DEFAULT_DEMO_SIZE)
    demo.add_argument("--seed", type=int, default=42)

    load = sub.add_parser("load", help="import org units from a file (one transaction)")
    _common(load)
    load.add_argument("format", choices=["iaso-csv", "iaso-gpkg", "dhis2", "fhir-bundle"])
    load.add_argument("path")
    load.add_argument("--data-source", help="data source name (default: Iaso, DHIS2 or FHIR by format)")
    load.add_argument("--version", type=int, default=1, help="source version number (default: 1)")
    load.add_argument("--delete-missing", action="store_true",
                      help="units of this data source absent from the file become deleted versions")
    load.add_argument("--account", default="default",
                      help="the account (tenant) the data source belongs to (default: default)")

    versions = sub.add_parser("versions", help="list the source versions, or choose the one served")
    versions_sub = versions.add_subparsers(dest="versions_command", required=True)
    versions_list = versions_sub.add_parser("list", help="every source version, with its units and the one served")
    _common(versions_list)
    versions_list.add_argument("--account", help="only this account's data sources")
    set_default = versions_sub.add_parser("set-default", help="serve this version of a data source")
    _common(set_default)
    set_default.add_argument("--data-source", required=True)
    set_default.add_argument("--version", required=True, help="a version number, or 'newest'")
    set_default.add_argument("--account", default="default")
    set_default.add_argument("--force", action="store_true", help="serve the version even if it holds no units")

    render = sub.add_parser("render", help="pre-render every version for these settings (load and demo do it too)")
    _common(render)

    migrate = sub.add_parser("migrate", help="bring the database schema to this version (writer role)")
    _common(migrate)

    check = sub.add_parser("check-config", help="check the settings, plugins and databases, one line each")
    _common(check)

    token = sub.add_parser("token", help="print a JWT signed with the local key")
    _common(token)
    token.add_argument("--sub", default="orgunit-fhir-cli")
    token.add_argument("--permission", action="append", help="permission to grant (repeatable; default: the required one)")
    token.add_argument("--ttl", type=int, default=24 * 3600, help="lifetime in seconds (default: one day)")
    token.add_argument("--account", metavar="NAME", help="account (tenant) of the caller: sets auth.account_claim")
    token.add_argument("--org-unit-root", action="append", dest="org_unit_roots", metavar="REF",
                       help="org unit the caller may read below, as an id (12) or an identifier (system|value): "
                            "adds to auth.roots_claim (repeatable)")
    token.add_argument("--claim", action="append", type=_claim, default=[], metavar="KEY=JSON",
                       help="extra claim, the value parsed as JSON or else taken as a string (repeatable)")
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(args.settings, args.database)


def _ensure_schema(settings: Settings) -> None:
    from server.store.db import create_db_engine, create_schema

    engine = create_db_engine(settings, writing=True)
    try:
        create_schema(engine)
    finally:
        engine.dispose()


def _demo(settings: Settings, size: int, seed: int) -> int:
    from server.store.db import analyze, create_db_engine
    from server.store.demo import generate_demo

    _ensure_schema(settings)
    engine = create_db_engine(settings, writing=True)
    try:
        started = time.perf_counter()
        progress = Progress("demo", size)
        written = generate_demo(engine, size=size, seed=seed, progress=progress)
        progress.close()
        analyze(engine)
        print(f"demo: {written} org units written in {time.perf_counter() - started:.1f}s", file=sys.stderr)
        return written
    finally:
        engine.dispose()


def _render(settings: Settings) -> int:
    """Store the bodies that are missing (all of them when the settings or the code changed)."""
    from server.plugins import get_plugin_manager
    from server.prerender import refresh
    from server.registry import Registry
    from server.store.db import create_db_engine

    registry = Registry.collect(get_plugin_manager(settings), settings)
    engine = create_db_engine(settings, writing=True)
    try:
        started = time.perf_counter()
        progress = Progress("render")
        rendered = refresh(engine, registry, progress=progress)
        progress.close()
        print(f"render: {rendered} versions pre-rendered in {time.perf_counter() - started:.1f}s", file=sys.stderr)
        return rendered
    finally:
        engine.dispose()


def cmd_render(args: argparse.Namespace) -> int:
    _render(_settings(args))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    if args.size < 5:
        raise ConfigError("--size must be at least 5 (one unit per level)")
    settings = _settings(args)
    _demo(settings, args.size, args.seed)
    _render(settings)
    return 0


def cmd_load(args: argparse.Namespace) -> int:
    from server.store.db import analyze, create_db_engine
    from server.store.importers.common import DEFAULT_DATA_SOURCES, load_file

    settings = _settings(args)
    _ensure_schema(settings)
    engine = create_db_engine(settings, writing=True)
    progress = Progress(f"load {args.format}")
    try:
        started = time.perf_counter()
        report = load_file(engine, args.format, args.path, data_source=args.data_source, version=args.version,
                           delete_missing=args.delete_missing, progress=progress, account=args.account)
        progress.close()
        analyze(engine)
    finally:
        engine.dispose()
    print(f"load {args.format}: {report.inserted} inserted, {report.updated} updated, "
          f"{report.unchanged} unchanged in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    _warn_unserved(settings, args.data_source or DEFAULT_DATA_SOURCES[args.format], args.account)
    _render(settings)
    return 0


def _warn_unserved(settings: Settings, data_source: str, account: str) -> None:
    from server.store.db import create_db_engine
    from server.store.versions import unserved_units

    engine = create_db_engine(settings, writing=True)
    try:
        with engine.connect() as conn:
            left = unserved_units(conn, data_source, account)
    finally:
        engine.dispose()
    if left:
        print(f"note: {left} units of {account}/{data_source} belong to versions that are not served, so they are "
              "not published (and have no deletion in _history): load with --delete-missing to record them as "
              "deleted, or choose the version served with `orgunit-fhir versions set-default`", file=sys.stderr)


def cmd_versions(args: argparse.Namespace) -> int:
    from server.store.db import create_db_engine
    from server.store.errors import LoadError
    from server.store.versions import list_versions, set_default_version

    settings = _settings(args)
    _ensure_schema(settings)
    engine = create_db_engine(settings, writing=True)
    try:
        if args.versions_command == "list":
            with engine.connect() as conn:
                rows = list_versions(conn, args.account)
            print(f"{'account':<16} {'data source':<32} {'version':>7} {'units':>9}  served")
            for row in rows:
                mark = ("yes (default)" if row.default else "yes (newest)") if row.served else ""
                print(f"{row.account:<16} {row.data_source:<32} {row.number:>7} {row.units:>9}  {mark}")
            return 0
        number = None if args.version == "newest" else _version_number(args.version)
        with engine.begin() as conn:
            set_default_version(conn, args.data_source, number, account=args.account)
            chosen = [v for v in list_versions(conn, args.account) if v.data_source == args.data_source and v.served]
            if chosen and not chosen[0].units and not args.force:
                conn.rollback()
                raise LoadError(f"version {chosen[0].number} of {args.account}/{args.data_source} holds no live units "
                                "(a later version loaded with the same ids moved them there): serving it would "
                                "publish nothing; pass --force to serve it anyway")
        print(f"versions: {args.account}/{args.data_source} now serves "
              f"{'its newest version' if number is None else f'version {number}'}; consumers syncing with "
              "_history or _lastUpdated should re-read in full", file=sys.stderr)
        return 0
    finally:
        engine.dispose()


def _version_number(raw: str) -> int:
    if not raw.isdigit():
        raise ConfigError(f"--version must be a version number or 'newest', not {raw!r}")
    return int(raw)


def cmd_migrate(args: argparse.Namespace) -> int:
    from server.store.db import create_db_engine
    from server.store.migrate import current_revision, head_revision, upgrade

    engine = create_db_engine(_settings(args), writing=True)
    try:
        before = current_revision(engine)
        upgrade(engine)
        print(f"migrate: schema {before or 'empty'} -> {head_revision()}", file=sys.stderr)
    finally:
        engine.dispose()
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    from server.auth import mint_token

    settings = _settings(args)
    if args.ttl <= 0:
        raise ConfigError("--ttl must be a positive number of seconds")
    print(mint_token(settings, subject=args.sub, permissions=args.permission, ttl=args.ttl,
                     extra=dict(args.claim), account=args.account, roots=args.org_unit_roots))
    accounts = _accounts(settings)
    if args.account is None and "account" not in dict(args.claim) and len(accounts) > 1 \
            and not settings.auth.default_account:
        print(f"note: this server holds several accounts ({', '.join(accounts)}): a token without --account "
              "is refused (403); pass --account", file=sys.stderr)
    elif args.account is not None and accounts and args.account not in accounts:
        print(f"note: no data source belongs to account {args.account!r} (accounts: {', '.join(accounts)}): "
              "this token sees an empty server", file=sys.stderr)
    return 0


def _accounts(settings: Settings) -> list[str]:
    """The accounts that hold data sources ([] when the database is unreachable or not migrated)."""
    from sqlalchemy import select
    from sqlalchemy.exc import SQLAlchemyError

    from server.checks import embedded_database_missing
    from server.store.db import create_db_engine
    from server.store.models import data_source

    if embedded_database_missing(settings):
        return []  # never create a database (or its directory) just to look
    engine = create_db_engine(settings)
    try:
        with engine.connect() as conn:
            return list(conn.execute(select(data_source.c.account).distinct().order_by(data_source.c.account))
                        .scalars())
    except SQLAlchemyError:
        return []
    finally:
        engine.dispose()


def _is_empty(settings: Settings) -> bool:
    from sqlalchemy import select

    from server.store.db import create_db_engine
    from server.store.models import org_unit

    engine = create_db_engine(settings)
    try:
        with engine.connect() as conn:
            return conn.execute(select(org_unit.c.id).limit(1)).first() is None
    finally:
        engine.dispose()


def _metrics_dir(workers: int) -> str | None:
    """Several workers add up their metrics through a directory: $PROMETHEUS_MULTIPROC_DIR if set (emptied of
    a previous run's files), else a new one (removed at exit). Returns the directory made here."""
    import glob
    import tempfile

    from server.metrics import MULTIPROC_ENV

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


def _prepare_databases(settings: Settings, demo: bool) -> None:
    from server.checks import check_serving_databases

    if settings.database_url.startswith("sqlite"):
        _ensure_schema(settings)
        if demo and _is_empty(settings):
            _demo(settings, DEFAULT_DEMO_SIZE, 42)
        _render(settings)  # the embedded database is ours to write: bodies for these settings
    for check in check_serving_databases(settings):  # refuses a schema behind; a replica that is down is skipped
        log.log(logging.INFO if check.current else logging.WARNING, check.describe())


def cmd_serve(args: argparse.Namespace) -> int:
    import shutil
    import signal

    import uvicorn

    from server.app import create_app
    from server.asgi import ACCESS_LOG_ENV
    from server.auth import mint_token
    from server.checks import validate
    from server.logs import configure_logging

    settings = _settings(args)
    validate(settings)  # every problem of the settings at once, each naming its key
    workers = args.workers or settings.server.workers
    if workers < 1:
        raise ConfigError("--workers must be at least 1")
    metrics_dir = _metrics_dir(workers)  # before any app opens its metric files there
    try:
        log_config = configure_logging(settings, access_log=not args.no_access_log)
        create_app(settings).state.ctx.db.dispose()  # fail here, with a clear message, before anything is written
        _prepare_databases(settings, demo=not args.no_demo)
        host = args.host or settings.server.host
        port = args.port or settings.server.port
        if settings.source:
            os.environ[SETTINGS_ENV] = os.path.abspath(settings.source)
        if settings.database.url:
            os.environ[DATABASE_ENV] = settings.database.url
        os.environ[ACCESS_LOG_ENV] = "0" if args.no_access_log else "1"
        print(f"FHIR base: http://{host}:{port}/fhir", file=sys.stderr, flush=True)
        if settings.database_url.startswith("sqlite"):  # the embedded demo; a production log gets no token
            try:
                accounts = _accounts(settings)
                account = ("default" if "default" in accounts else accounts[0]) if len(accounts) > 1 else None
                token = mint_token(settings, ttl=24 * 3600, account=account)
                print(f"A token valid for 24 hours{f' (account {account})' if account else ''}:\n{token}",
                      file=sys.stderr, flush=True)
            except ConfigError as exc:
                print(f"(no local token: {exc})", file=sys.stderr)
        else:
            print("tokens: from your identity provider, or `orgunit-fhir token` with the HMAC secret",
                  file=sys.stderr, flush=True)
        # SIGTERM: uvicorn stops accepting, lets the requests in flight finish (server.shutdown_grace_seconds),
        # runs the lifespan shutdown (the pool closes), then raises the signal again: by then the stop was
        # orderly, so this handler lets serve exit 0
        previous = signal.signal(signal.SIGTERM, lambda *_: None)
        try:
            uvicorn.run("server.asgi:create", factory=True, host=host, port=port, workers=workers,
                        loop="uvloop", http="httptools", log_level="info", proxy_headers=False,
                        access_log=False,  # the request middleware writes the access log, with the request id
                        log_config=log_config, timeout_graceful_shutdown=settings.server.shutdown_grace_seconds)
        finally:
            signal.signal(signal.SIGTERM, previous)
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    log.info("serve: stopped")
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    """Each check on a line, ok or FAIL; exit 1 when any fails (2 when the settings do not even parse)."""
    from server.app import create_app
    from server.auth import JwksUnavailable
    from server.checks import check_database, embedded_database_missing, problems, serving_targets

    settings = _settings(args)
    results: list[tuple[bool, str]] = [(True, f"settings: {settings.source or '(defaults)'} parsed")]
    found = problems(settings)
    results += [(False, problem) for problem in found]
    if not found:
        try:
            app = create_app(settings)
        except ConfigError as exc:
            results.append((False, f"plugins and auth: {exc}"))
        else:
            app.state.ctx.db.dispose()
            results.append((True, f"plugins: serving {', '.join(sorted(app.state.ctx.registry.providers))}; "
                                  f"auth: {', '.join(settings.auth.algorithms)}"))
            remote = app.state.ctx.authenticator.remote
            if remote is not None:
                try:
                    results.append((True, f"auth.jwks_url {settings.auth.jwks_url}: {remote.probe()} signing keys"))
                except JwksUnavailable as exc:
                    results.append((False, f"auth.jwks_url {settings.auth.jwks_url}: {exc}"))
    if embedded_database_missing(settings):
        writable = _can_create(settings.database_url)
        results.append((writable, f"database primary ({settings.database_url}): not created yet; " + (
            "serve creates it" if writable else "its directory cannot be created or written")))
    else:
        embedded = settings.database_url.startswith("sqlite")
        for target in serving_targets(settings):
            check = check_database(target)
            results.append((check.current or (embedded and check.reachable),
                            check.describe() + ("; serve migrates it" if embedded and not check.current else "")))
    for ok, line in results:
        print(f"{'ok  ' if ok else 'FAIL'}  {line}")
    return 0 if all(ok for ok, _ in results) else 1


def _can_create(sqlite_url: str) -> bool:
    """Whether the SQLite file's directory exists or can be made, and takes new files (tried, then undone)."""
    import tempfile
    from pathlib import Path

    from sqlalchemy.engine import make_url

    parent = Path(str(make_url(sqlite_url).database)).resolve().parent
    while not parent.exists():
        parent = parent.parent
    try:
        Path(tempfile.mkdtemp(dir=parent)).rmdir()
        return parent.is_dir()
    except OSError:
        return False


COMMANDS = {"serve": cmd_serve, "demo": cmd_demo, "load": cmd_load, "render": cmd_render, "migrate": cmd_migrate,
            "token": cmd_token, "versions": cmd_versions, "check-config": cmd_check_config}


def _safe_url(args: argparse.Namespace) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(_settings(args).database_url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - only words for a message
        return "?"


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ConfigError as exc:
        print(f"orgunit-fhir {args.command}: configuration error: {exc}", file=sys.stderr)
        return 2
    except OperationalError as exc:  # the database cannot be opened or reached
        cause = str(exc.orig or exc).strip().splitlines()[0]
        print(f"orgunit-fhir {args.command}: the database ({_safe_url(args)}) cannot be opened or reached: {cause}",
              file=sys.stderr)
        return 1
    except Exception as exc:
        from server.store.errors import LoadError

        if isinstance(exc, LoadError):
            print(f"orgunit-fhir {args.command}: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
