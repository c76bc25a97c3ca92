"""What a plugin may add to the command line: commands of its own, load formats for `orgunit-fhir load`, and
demo data for `orgunit-fhir demo` (and for `serve` on an empty embedded database)."""
from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine

from server.declare.progress import Progress
from server.settings import Settings


@dataclass(frozen=True)
class Command:
    """`orgunit-fhir <name> ...`: `configure` adds the command's arguments (the engine adds --settings and
    --database to the command; a command with subcommands adds them to each with `add_common_options`); `run`
    returns the exit status. It opens its own engine: `reading_engine(settings)` to read, `writing_engine` to
    write. `renders(args)`: whether this run may have written new versions, which the engine then pre-renders
    once it succeeds."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Settings], int]
    renders: Callable[[argparse.Namespace], bool] = lambda args: False


@dataclass(frozen=True)
class LoadReport:
    """What a load changed (printed by `load`, and as one JSON line with `--json`): resources inserted,
    updated, unchanged, deleted; `missing`: resources the file left out that stay as they were; the first few
    ids of each, and (`deleted_named`, `missing_named`) the same as the operator knows them (their source code and
    name, the id beside), which the report line shows; `about`: what the load wrote into (data source,
    version...) for the JSON line; notes for the operator."""

    inserted: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    notes: tuple[str, ...] = ()
    missing: int = 0
    deleted_ids: tuple[str, ...] = ()
    missing_ids: tuple[str, ...] = ()
    about: Mapping[str, Any] = field(default_factory=dict)
    deleted_named: tuple[str, ...] = ()
    missing_named: tuple[str, ...] = ()


@dataclass(frozen=True)
class LoadFormat:
    """`orgunit-fhir load <name> PATH ...`: the engine migrates the schema, opens a writing engine, calls
    `load`, refreshes planner statistics and pre-renders what changed; `configure` adds the format's options.
    `dry_run`: the format honours `args.dry_run` (checks and counts everything, writes nothing), so `load`
    offers `--dry-run` for it."""

    name: str
    help: str
    load: Callable[[Engine, str, argparse.Namespace, Progress], LoadReport]
    configure: Callable[[argparse.ArgumentParser], None] = lambda parser: None
    dry_run: bool = False


@dataclass(frozen=True)
class DemoData:
    """Synthetic data for `orgunit-fhir demo --size N --seed S`; `serve` on an empty embedded database writes
    `default_size` of every one whose `is_empty` says so."""

    name: str
    generate: Callable[[Engine, int, int, Progress], int]  # (engine, size, seed, progress) -> resources written
    is_empty: Callable[[Connection], bool]
    default_size: int = 2000
    sizes: Sequence[int] = field(default=())  # unused by the engine: sizes worth benchmarking
