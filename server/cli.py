"""orgunit-fhir serve | demo | load | render | migrate | token"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence

from server.errors import ConfigError
from server.progress import Progress
from server.settings import DATABASE_ENV, SETTINGS_ENV, Settings, load_settings

DEFAULT_DEMO_SIZE = 2000
log = logging.getLogger("orgunit_fhir")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--settings", help=f"settings file (default: ${SETTINGS_ENV} or ./settings.yaml)")
    parser.add_argument("--database", help=f"database URL, e.g. postgresql://user@host/db (default: ${DATABASE_ENV} "
                                           "or SQLite in the data directory)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="orgunit-fhir", description="Read-only FHIR R4 server for org units")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the FHIR API (creates demo data in an empty embedded database)")
    _common(serve)
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--workers", type=int)
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

    render = sub.add_parser("render", help="pre-render every version for these settings (load and demo do it too)")
    _common(render)

    migrate = sub.add_parser("migrate", help="bring the database schema to this version (writer role)")
    _common(migrate)

    token = sub.add_parser("token", help="print a JWT signed with the local key")
    _common(token)
    token.add_argument("--sub", default="orgunit-fhir-cli")
    token.add_argument("--permission", action="append", help="permission to grant (repeatable; default: the required one)")
    token.add_argument("--ttl", type=int, default=24 * 3600, help="lifetime in seconds (default: one day)")
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
    from server.store.db import create_db_engine
    from server.store.demo import generate_demo

    _ensure_schema(settings)
    engine = create_db_engine(settings, writing=True)
    try:
        started = time.perf_counter()
        progress = Progress("demo", size)
        written = generate_demo(engine, size=size, seed=seed, progress=progress)
        progress.close()
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
    from server.store.db import create_db_engine
    from server.store.importers.common import load_file

    settings = _settings(args)
    _ensure_schema(settings)
    engine = create_db_engine(settings, writing=True)
    progress = Progress(f"load {args.format}")
    try:
        started = time.perf_counter()
        report = load_file(engine, args.format, args.path, data_source=args.data_source, version=args.version,
                           delete_missing=args.delete_missing, progress=progress)
        progress.close()
    finally:
        engine.dispose()
    print(f"load {args.format}: {report.inserted} inserted, {report.updated} updated, "
          f"{report.unchanged} unchanged in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    _render(settings)
    return 0


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


def check_schema(settings: Settings) -> None:
    """The embedded database migrates itself; any other must have been migrated by `orgunit-fhir migrate`."""
    from server.store.db import create_db_engine
    from server.store.migrate import current_revision, head_revision

    engine = create_db_engine(settings)
    try:
        current = current_revision(engine)
    finally:
        engine.dispose()
    if current != head_revision():
        raise ConfigError(
            f"the database schema is at revision {current or '(none)'} but this server needs {head_revision()}: "
            f"run `orgunit-fhir migrate --database <url>` with a role that may alter the schema")


def cmd_token(args: argparse.Namespace) -> int:
    from server.auth import mint_token

    print(mint_token(_settings(args), subject=args.sub, permissions=args.permission, ttl=args.ttl))
    return 0


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


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from server.app import create_app
    from server.auth import mint_token

    settings = _settings(args)
    create_app(settings)  # fail here, with a clear message, before anything is written or served
    if settings.database_url.startswith("sqlite"):
        _ensure_schema(settings)
        if not args.no_demo and _is_empty(settings):
            _demo(settings, DEFAULT_DEMO_SIZE, 42)
        _render(settings)  # the embedded database is ours to write: bodies for these settings
    check_schema(settings)
    host = args.host or settings.server.host
    port = args.port or settings.server.port
    workers = args.workers or settings.server.workers
    if settings.source:
        os.environ[SETTINGS_ENV] = os.path.abspath(settings.source)
    if settings.database.url:
        os.environ[DATABASE_ENV] = settings.database.url
    try:
        token = mint_token(settings, ttl=24 * 3600)
        print(f"FHIR base: http://{host}:{port}/fhir\nA token valid for 24 hours:\n{token}", file=sys.stderr, flush=True)
    except ConfigError as exc:
        print(f"(no local token: {exc})", file=sys.stderr)
    uvicorn.run("server.asgi:create", factory=True, host=host, port=port, workers=workers,
                loop="uvloop", http="httptools", log_level="info", proxy_headers=False,
                access_log=not args.no_access_log)
    return 0


COMMANDS = {"serve": cmd_serve, "demo": cmd_demo, "load": cmd_load, "render": cmd_render, "migrate": cmd_migrate,
            "token": cmd_token}


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ConfigError as exc:
        print(f"orgunit-fhir {args.command}: configuration error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        from server.store.errors import LoadError

        if isinstance(exc, LoadError):
            print(f"orgunit-fhir {args.command}: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
