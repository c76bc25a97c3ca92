"""The commands that write: migrate (every plugin's chain), demo, load (the plugins' formats) and render."""
from __future__ import annotations

import argparse
import functools
import logging
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext, suppress
from typing import Any

import orjson
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from server.cli.common import say
from server.declare.extensions import LoadCall, LoadFormat, LoadReport
from server.engine import searches
from server.engine.context import create_context
from server.errors import (
    AfterCommit,
    ConfigError,
    FhirError,
    InterruptedAfterCommit,
    LoadError,
    StorageBusy,
    StorageFull,
)
from server.ops.checks import (
    embedded_database_missing,
    embedded_file,
    embedded_path,
)
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
        say(f"created the database {embedded_path(settings)}", command="create", path=embedded_file(settings))


STATISTICS_WAIT_S = 5.0  # how long the statistics after a commit wait for another writer's lock before leaving it


def after_commit(settings: Settings, committed: str, engine: Engine | None = None) -> None:
    """The steps after a commit: the planner's statistics (`engine`'s database) and pre-rendering. A committed
    change never exits as failed (issue 37 item 7, issue 38 item 8): a step that cannot get the write lock (another
    writer holds it) is skipped with a warning and left to the next load; any other failure, or Ctrl-C, is an
    AfterCommit (exit 3) saying what was committed and what to run."""
    steps: list[tuple[str, Callable[[], Any]]] = []
    if engine is not None:
        steps.append(("planner statistics", lambda: analyze(engine, STATISTICS_WAIT_S)))
    steps.append(("pre-rendering", lambda: render(settings)))
    for name, step in steps:
        with committed_then(committed, name):
            try:
                step()
            except StorageBusy as exc:
                say(f"{name} skipped: another writer holds the database ({exc.message}); the changes are committed "
                    f"and served ({committed}); the next load (or `orgunit-fhir render`) does it",
                    logging.WARNING, command="after-commit", skipped=name)


@contextmanager
def committed_then(committed: str, step: str) -> Iterator[None]:
    """Whatever fails in `step` once `committed` was committed (a full disk, a broken pipe, Ctrl-C, a bug) is an
    AfterCommit: exit 3 and the truth."""
    try:
        yield
    except AfterCommit:
        raise
    except KeyboardInterrupt:
        raise InterruptedAfterCommit(
            f"interrupted after the changes were committed ({committed}): they are in the database and served; "
            f"{step} was not done: run `orgunit-fhir render` (served slower until then)") from None
    except BaseException as exc:
        raise AfterCommit(f"the changes were committed ({committed}) and are served, but {step} failed afterwards: "
                          f"{_cause(exc)}; once that is fixed, run `orgunit-fhir render`") from exc


def _cause(exc: BaseException) -> str:
    if isinstance(exc, StorageFull):
        return f"the disk holding the database is full ({exc.message}): free space"
    if isinstance(exc, BrokenPipeError):
        return "the output was closed (a broken pipe: the command's reader stopped reading)"
    text = str(getattr(exc, "message", None) or exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def render_committed(settings: Settings, committed: str) -> None:
    """Pre-render after a commit (plugin commands that write): see `after_commit`."""
    after_commit(settings, committed)


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
    return written


def cmd_demo(args: argparse.Namespace, settings: Settings, extensions: Extensions) -> int:
    if args.size is not None and args.size < 5:
        raise ConfigError("--size must be at least 5 (one unit per level)")
    written = write_demo(settings, extensions, args.size, args.seed)
    with writing_engine(settings) as engine:
        after_commit(settings, f"demo: {written:,} resources written", engine)
    return 0


def _counts(report: LoadReport) -> dict[str, Any]:
    """One type's figures (the first few ids of each, and the first resources of each kind as named)."""
    return {"inserted": report.inserted, "updated": report.updated, "unchanged": report.unchanged,
            "deleted": report.deleted, **dict(report.changes), "missing": report.missing,
            "deleted_ids": list(report.deleted_ids[:SAMPLE]), "missing_ids": list(report.missing_ids[:SAMPLE]),
            **{f"{kind}_units": list(first[:SAMPLE]) for kind, first in report.named.items()},
            "deleted_units": list(report.deleted_named[:SAMPLE]), "missing_units": list(report.missing_named[:SAMPLE]),
            **({"refused": list(report.refused)} if report.refused else {})}


def report_fields(fmt: str, path: str, report: LoadReport, dry_run: bool, seconds: float) -> dict[str, Any]:
    """The figures of a load, as its JSON line holds them: the counts of its (main) type, as they always were, and
    when the format names its types, `resource_type` and `types`: each type's own counts (never summed)."""
    fields = {"command": "load", "format": fmt, "path": path, **dict(report.about), "dry_run": dry_run,
              **_counts(report), "notes": list(report.notes), "seconds": seconds}
    if report.resource_type is not None:
        fields["resource_type"] = report.resource_type
        fields["types"] = {part.resource_type: _counts(part) for part in report.by_type}
    return fields


def report_line(fmt: str, report: LoadReport, dry_run: bool, seconds: float, of_type: bool = False) -> str:
    """`load mapped: 0 inserted, 0 updated, 5,725 unchanged, 1 deleted (first: 10006 'Kapsowar' (id 3720)) in 0.3s`
    (ids alone for a format that names no units); `of_type`: the line names its type (`load mapped: Location: ...`)."""
    named = report.named
    parts = [f"{report.inserted:,} inserted",  # the new ones are the file's: their first names are in the JSON
             f"{report.updated:,} updated{_first(named.get('updated'))}", f"{report.unchanged:,} unchanged"]
    for count, ids, what in ((report.deleted, report.deleted_named or report.deleted_ids, "deleted"),
                             *((count, named.get(kind), kind) for kind, count in report.changes),
                             (report.missing, report.missing_named or report.missing_ids, "missing from the file")):
        if count:
            parts.append(f"{count:,} {what}{_first(ids)}")
    head = (f"load {fmt}{' (dry run: nothing written)' if dry_run else ''}"
            f"{f': {report.resource_type}' if of_type else ''}")
    return f"{head}: {', '.join(parts)} in {seconds}s"


def _first(ids: Sequence[Any] | None) -> str:
    return f" (first: {', '.join(map(str, ids[:SAMPLE]))})" if ids else ""


def report_lines(fmt: str, path: str, report: LoadReport, dry_run: bool,
                 seconds: float) -> list[tuple[str, dict[str, Any]]]:
    """What `load` logs: one line for a load of one type, else one per type it wrote, each naming its type with
    that type's counts as its fields."""
    fields = report_fields(fmt, path, report, dry_run, seconds)
    if not report.other_types:
        return [(report_line(fmt, report, dry_run, seconds), fields)]
    # each line holds its own type's counts and named resources, never the main type's: the keys of those vary
    # (`inserted_units`, `withdrawn`, `refused`...), so the main type's are dropped, not overwritten
    common = {key: value for key, value in fields.items() if key not in _counts(report)}
    return [(report_line(fmt, part, dry_run, seconds, of_type=True),
             {**common, "resource_type": part.resource_type, **_counts(part)}) for part in report.by_type]


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
            with suppress(OSError):  # none made (its folder could not be): the failure is the news
                leftover.unlink(missing_ok=True)
        raise


def load_call(settings: Settings, engine: Engine, path: str, args: argparse.Namespace, progress: Progress) -> LoadCall:
    """What a load format is called with: its look-up searches `engine`'s database as a trusted caller (its server
    context made at the first look-up: a format that looks nothing up makes none)."""
    pm = get_plugin_manager(settings)
    registry = Registry.collect(pm, settings)
    made = functools.cache(lambda: create_context(settings, db=engine, serving=False, plugins=(pm, registry)))
    return LoadCall(engine=engine, path=path, args=args, progress=progress, settings=settings, registry=registry,
                    lookup=searches.lookup(made))


def _load(args: argparse.Namespace, settings: Settings, extensions: Extensions, dry_run: bool,
          created: bool = False, committed: list[bool] | None = None) -> int:
    """`committed` gets True once the load's transaction has committed."""
    fmt: LoadFormat = extensions.load_formats[args.format]
    ensure_schema(settings, extensions, announce=False)
    with writing_engine(settings) as engine:
        started = time.perf_counter()
        progress = Progress(f"load {fmt.name}")
        try:
            report = fmt.load(load_call(settings, engine, args.path, args, progress))
        except FhirError as exc:  # a look-up the format made failed: the load wrote nothing
            raise LoadError(f"load {fmt.name}: a look-up failed ({exc.diagnostics}); the load stopped there") from exc
        if committed is not None and not dry_run:
            committed.append(True)
        seconds = round(time.perf_counter() - started, 1)
        lines = report_lines(fmt.name, args.path, report, dry_run, seconds)
        done = "; ".join(line.removeprefix("load ") for line, _ in lines)
        with nullcontext() if dry_run else committed_then(done, "printing the report"):  # first: the truth
            progress.close()
            _say_report(args, fmt, report, lines, report_fields(fmt.name, args.path, report, dry_run, seconds),
                        settings if created else None)
        if not dry_run:
            after_commit(settings, done, engine)
    return 1 if report.refused else 0


def _say_report(args: argparse.Namespace, fmt: LoadFormat, report: LoadReport, lines: list[tuple[str, dict[str, Any]]],
                fields: dict[str, Any], created: Settings | None) -> None:
    for line, logged in lines:  # a line per type the load wrote
        say(line, **logged)
    if created:
        say(f"created the database {embedded_path(created)}", command="create", path=embedded_file(created))
    for note in report.notes:
        say(f"note: {note}", logging.WARNING, command="load", note=note)
    for refusal in report.refused:  # a dry run: what the load itself would refuse
        say(f"load {fmt.name} (dry run): refused: {refusal}", logging.ERROR, command="load", refused=refusal)
    if args.json:
        sys.stdout.write(orjson.dumps(fields, default=str).decode() + "\n")
        sys.stdout.flush()


def cmd_render(args: argparse.Namespace, settings: Settings, extensions: Extensions) -> int:
    """Run on the current schema only (server.cli.main refuses one behind or past it before the command)."""
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
        add_format_arguments(formats.add_parser(fmt.name, help=fmt.help, description=fmt.help, parents=[common]), fmt)


def add_format_arguments(parser: argparse.ArgumentParser, fmt: LoadFormat) -> None:
    """What `orgunit-fhir load <fmt> PATH` parses: the file, the format's own options, --json and (a format that
    honours it) --dry-run."""
    parser.add_argument("path", metavar="PATH", help="the file to load")
    fmt.configure(parser)
    parser.add_argument("--json", action="store_true",
                        help="also print the report as one JSON line on stdout (counts, first ids, notes)")
    if fmt.dry_run:
        parser.add_argument("--dry-run", action="store_true",
                            help="check the whole file and print the report, writing nothing")


NOT_OPTIONS = frozenset({"help", "path", "settings", "database"})  # given otherwise: the call's settings and file


def format_arguments(fmt: LoadFormat, path: str, options: Mapping[str, Any]) -> argparse.Namespace:
    """The arguments `orgunit-fhir load <fmt> PATH [options]` would hand the format, from `options` as parsed values
    (`data_source="x"`, `dry_run=True`): every option the format declares with its default (`dry_run` False,
    `json` False), the given ones over them. An option the format does not declare, or a required one left out, is
    refused (TypeError) naming the valid ones: never a Namespace the format would fail on."""
    parser = argparse.ArgumentParser(prog=f"orgunit-fhir load {fmt.name}", add_help=False)
    add_format_arguments(parser, fmt)
    actions = [action for action in parser._actions  # argparse lists a parser's options nowhere public
               if action.dest not in NOT_OPTIONS and action.dest != argparse.SUPPRESS]
    valid = sorted(action.dest for action in actions)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise TypeError(f"load format {fmt.name!r} has no option {', '.join(map(repr, unknown))}; its options: "
                        f"{', '.join(valid)}")
    required = sorted(action.dest for action in actions if action.required and action.dest not in options)
    if required:
        raise TypeError(f"load format {fmt.name!r} needs the option {', '.join(map(repr, required))} "
                        f"(required on the command line too); its options: {', '.join(valid)}")
    defaults = {action.dest: _default(action) for action in actions}
    return argparse.Namespace(**{**defaults, **options, "command": "load", "format": fmt.name, "path": path})


def _default(action: argparse.Action) -> Any:
    """An option's value when the command line leaves it out, as argparse gives it (a string default goes through
    the option's `type`)."""
    default = action.default
    if isinstance(default, str) and action.type is not None and callable(action.type):
        return action.type(default)
    return default
