"""The commands that write: migrate (every plugin's chain), demo, load (the plugins' formats) and render."""
from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy.engine import make_url

from server.cli.common import say
from server.declare.extensions import LoadFormat, LoadReport
from server.errors import ConfigError, InterruptedAfterCommit
from server.ops.checks import embedded_database_missing, embedded_path
from server.extensions import Extensions
from server.declare.progress import Progress
from server.plugins import get_plugin_manager
from server.settings import Settings
from server.storage.db import analyze, writing_engine
from server.storage.migrate import describe
from server.storage.prerender import refresh
from server.declare.registry import Registry

SAMPLE = 5  # ids shown in a report


def ensure_schema(settings: Settings, extensions: Extensions, announce: bool = True) -> None:
    """Bring the schema to this version; a SQLite file that does not exist yet is created, and the command says
    where (never silently: a typo'd path shows)."""
    created = embedded_database_missing(settings)
    with writing_engine(settings) as engine:
        extensions.schema.upgrade(engine)
    if created and announce:
        say(f"created the database {embedded_path(settings)}", command="create", path=embedded_path(settings))


def render_committed(settings: Settings, committed: str) -> None:
    """Pre-render after a commit: an interrupt now leaves the committed changes in place and served, which the
    operator must know (not the 130 of an interrupt that rolled everything back)."""
    try:
        render(settings)
    except KeyboardInterrupt:
        raise InterruptedAfterCommit(
            f"interrupted after the changes were committed ({committed}): they are in the database and served; "
            "some bodies are not pre-rendered yet (served slower until then): run `orgunit-fhir render`") from None


def render(settings: Settings) -> int:
    """Store the bodies that are missing (all of them when the settings or the code changed)."""
    registry = Registry.collect(get_plugin_manager(settings), settings)
    with writing_engine(settings) as engine:
        started = time.perf_counter()
        progress = Progress("render")
        rendered = refresh(engine, registry, progress=progress)
        progress.close()
    seconds = round(time.perf_counter() - started, 1)
    say(f"render: {rendered:,} versions pre-rendered in {seconds}s", command="render", rendered=rendered,
        seconds=seconds)
    return rendered


def write_demo(settings: Settings, extensions: Extensions, size: int | None, seed: int) -> int:
    if not extensions.demos:
        raise ConfigError("no enabled plugin provides demo data")
    ensure_schema(settings, extensions)
    written = 0
    with writing_engine(settings) as engine:
        for demo in extensions.demos:
            started = time.perf_counter()
            count = size or demo.default_size
            progress = Progress(f"demo {demo.name}", count)
            written += demo.generate(engine, count, seed, progress)
            progress.close()
            seconds = round(time.perf_counter() - started, 1)
            say(f"demo {demo.name}: {count:,} written in {seconds}s", command="demo", demo=demo.name, written=count,
                seconds=seconds)
        analyze(engine)
    return written


def cmd_demo(args: argparse.Namespace, settings: Settings, extensions: Extensions) -> int:
    if args.size is not None and args.size < 5:
        raise ConfigError("--size must be at least 5 (one unit per level)")
    written = write_demo(settings, extensions, args.size, args.seed)
    render_committed(settings, f"demo: {written:,} resources written")
    return 0


def report_fields(fmt: str, path: str, report: LoadReport, dry_run: bool, seconds: float) -> dict[str, Any]:
    """The figures of a load, as its JSON line holds them."""
    return {"command": "load", "format": fmt, "path": path, **dict(report.about), "dry_run": dry_run,
            "inserted": report.inserted, "updated": report.updated, "unchanged": report.unchanged,
            "deleted": report.deleted, "missing": report.missing, "deleted_ids": list(report.deleted_ids[:SAMPLE]),
            "missing_ids": list(report.missing_ids[:SAMPLE]), "deleted_units": list(report.deleted_named[:SAMPLE]),
            "missing_units": list(report.missing_named[:SAMPLE]), "notes": list(report.notes), "seconds": seconds}


def report_line(fmt: str, report: LoadReport, dry_run: bool, seconds: float) -> str:
    """`load mapped: 0 inserted, 0 updated, 5,725 unchanged, 1 deleted (first: 10006 'Kapsowar' (id 3720)) in 0.3s`
    (ids alone for a format that names no units)."""
    parts = [f"{report.inserted:,} inserted", f"{report.updated:,} updated", f"{report.unchanged:,} unchanged"]
    for count, ids, what in ((report.deleted, report.deleted_named or report.deleted_ids, "deleted"),
                             (report.missing, report.missing_named or report.missing_ids, "missing from the file")):
        if count:
            first = f" (first: {', '.join(map(str, ids[:SAMPLE]))})" if ids else ""
            parts.append(f"{count:,} {what}{first}")
    head = f"load {fmt}{' (dry run: nothing written)' if dry_run else ''}"
    return f"{head}: {', '.join(parts)} in {seconds}s"


def cmd_load(args: argparse.Namespace, settings: Settings, extensions: Extensions) -> int:
    """A first load into a SQLite file that does not exist creates it, and says so once it succeeded; a load that
    fails (or is interrupted) before its commit leaves no database behind; a dry run creates none."""
    dry_run = bool(getattr(args, "dry_run", False))
    if not embedded_database_missing(settings):
        return _load(args, settings, extensions, dry_run)
    if dry_run:  # a dry run creates nothing: an empty throwaway database
        say(f"load: the database {embedded_path(settings)} does not exist: the dry run checks the file against an "
            "empty database (and creates none)", command="load")
        with tempfile.TemporaryDirectory(prefix="orgunit-fhir-dry-run-") as scratch:
            return _load(args, settings.with_database(f"sqlite:///{scratch}/dry-run.db"), extensions, dry_run,
                         created=False)
    committed: list[bool] = []
    try:
        return _load(args, settings, extensions, dry_run, created=True, committed=committed)
    except BaseException:
        if committed:  # the database holds the load: whatever failed afterwards (render, output) keeps it
            raise
        path = Path(str(make_url(settings.database_url).database))
        for leftover in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            leftover.unlink(missing_ok=True)
        raise


def _load(args: argparse.Namespace, settings: Settings, extensions: Extensions, dry_run: bool,
          created: bool = False, committed: list[bool] | None = None) -> int:
    """`committed` gets True once the load's transaction has committed."""
    fmt: LoadFormat = extensions.load_formats[args.format]
    ensure_schema(settings, extensions, announce=False)
    with writing_engine(settings) as engine:
        started = time.perf_counter()
        progress = Progress(f"load {fmt.name}")
        report = fmt.load(engine, args.path, args, progress)
        if committed is not None and not dry_run:
            committed.append(True)
        progress.close()
        if not dry_run:
            analyze(engine)
    seconds = round(time.perf_counter() - started, 1)
    fields = report_fields(fmt.name, args.path, report, dry_run, seconds)
    say(report_line(fmt.name, report, dry_run, seconds), **fields)
    if created:
        say(f"created the database {embedded_path(settings)}", command="create", path=embedded_path(settings))
    for note in report.notes:
        say(f"note: {note}", logging.WARNING, command="load", note=note)
    if args.json:
        sys.stdout.write(orjson.dumps(fields, default=str).decode() + "\n")
        sys.stdout.flush()
    if not dry_run:
        render_committed(settings, report_line(fmt.name, report, dry_run, seconds).removeprefix("load "))
    return 0


def cmd_render(args: argparse.Namespace, settings: Settings, extensions: Extensions) -> int:
    render(settings)
    return 0


def cmd_migrate(args: argparse.Namespace, settings: Settings, extensions: Extensions) -> int:
    schema = extensions.schema
    with writing_engine(settings) as engine:
        with engine.connect() as conn:
            before = schema.current(conn)
        schema.upgrade(engine)
    say(f"migrate: schema {describe(before)} -> {describe(schema.heads())}", command="migrate")
    return 0


def configure_demo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=int, metavar="N",
                        help="resources to write (default: each demo's own, 2,000 org units; at least 5)")
    parser.add_argument("--seed", type=int, default=42, metavar="S",
                        help="random seed: the same seed writes the same data (default: 42)")


def configure_load(parser: argparse.ArgumentParser, extensions: Extensions,
                   common: argparse.ArgumentParser) -> None:
    formats = parser.add_subparsers(dest="format", required=True, metavar="FORMAT", title="formats",
                                    description="the format of the file (orgunit-fhir load FORMAT --help: its options)")
    for fmt in extensions.load_formats.values():
        sub = formats.add_parser(fmt.name, help=fmt.help, description=fmt.help, parents=[common])
        sub.add_argument("path", metavar="PATH", help="the file to load")
        fmt.configure(sub)
        sub.add_argument("--json", action="store_true",
                         help="also print the report as one JSON line on stdout (counts, first ids, notes)")
        if fmt.dry_run:
            sub.add_argument("--dry-run", action="store_true",
                             help="check the whole file and print the report, writing nothing")
