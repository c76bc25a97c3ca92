"""The commands that write: migrate (every plugin's chain), demo, load (the plugins' formats) and render."""
from __future__ import annotations

import argparse
import sys
import time

from server.cli.extensions import LoadFormat
from server.errors import ConfigError
from server.extensions import Extensions
from server.ops.progress import Progress
from server.plugins import get_plugin_manager
from server.settings import Settings
from server.storage.db import analyze, writing_engine
from server.storage.migrate import describe
from server.storage.prerender import refresh
from server.engine.registry import Registry


def ensure_schema(settings: Settings, extensions: Extensions) -> None:
    with writing_engine(settings) as engine:
        extensions.schema.upgrade(engine)


def render(settings: Settings) -> int:
    """Store the bodies that are missing (all of them when the settings or the code changed)."""
    registry = Registry.collect(get_plugin_manager(settings), settings)
    with writing_engine(settings) as engine:
        started = time.perf_counter()
        progress = Progress("render")
        rendered = refresh(engine, registry, progress=progress)
        progress.close()
    print(f"render: {rendered} versions pre-rendered in {time.perf_counter() - started:.1f}s", file=sys.stderr)
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
            print(f"demo {demo.name}: {count} written in {time.perf_counter() - started:.1f}s", file=sys.stderr)
        analyze(engine)
    return written


def cmd_demo(args: argparse.Namespace, settings: Settings, extensions: Extensions) -> int:
    if args.size is not None and args.size < 5:
        raise ConfigError("--size must be at least 5 (one unit per level)")
    write_demo(settings, extensions, args.size, args.seed)
    render(settings)
    return 0


def cmd_load(args: argparse.Namespace, settings: Settings, extensions: Extensions) -> int:
    fmt: LoadFormat = extensions.load_formats[args.format]
    ensure_schema(settings, extensions)
    with writing_engine(settings) as engine:
        started = time.perf_counter()
        progress = Progress(f"load {fmt.name}")
        report = fmt.load(engine, args.path, args, progress)
        progress.close()
        analyze(engine)
    deleted = f", {report.deleted} deleted" if report.deleted else ""
    print(f"load {fmt.name}: {report.inserted} inserted, {report.updated} updated, {report.unchanged} unchanged"
          f"{deleted} in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    render(settings)
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
    print(f"migrate: schema {describe(before)} -> {describe(schema.heads())}", file=sys.stderr)
    return 0


def configure_demo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=int, help="resources to write (default: each demo's own, 2,000 org units)")
    parser.add_argument("--seed", type=int, default=42, help="random seed: the same seed writes the same data")


def configure_load(parser: argparse.ArgumentParser, extensions: Extensions,
                   common: argparse.ArgumentParser) -> None:
    formats = parser.add_subparsers(dest="format", required=True, metavar="FORMAT")
    for fmt in extensions.load_formats.values():
        sub = formats.add_parser(fmt.name, help=fmt.help, description=fmt.help, parents=[common])
        sub.add_argument("path", help="the file to load")
        fmt.configure(sub)
