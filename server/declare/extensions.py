"""What a plugin may add to the command line: commands of its own, load formats for `orgunit-fhir load`, and
demo data for `orgunit-fhir demo` (and for `serve` on an empty embedded database)."""
from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine

from server.declare.lookup import Lookup
from server.declare.progress import Progress
from server.declare.registry import Registry
from server.errors import ConfigError  # a LoadReport's mistake is a plugin's, refused as its declarations are
from server.settings import Settings


@dataclass(frozen=True)
class Command:
    """`orgunit-fhir <name> ...`: `configure` adds the command's arguments (the engine adds --settings and
    --database to the command; a command with subcommands adds them to each with `add_common_options`); `run`
    returns the exit status. It opens its own engine: `reading_engine(settings)` to read, `writing_engine` to
    write. `renders(args)`: whether this run may have written new versions, which the engine then pre-renders
    once it succeeds. `needs_database=False`: the command reads no database (it converts a file, prints a
    template...), so it runs where the embedded SQLite database does not exist yet; by default such a command is
    refused (`the database ... does not exist; create it with orgunit-fhir migrate`), a typo'd path never creating
    an empty one."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Settings], int]
    renders: Callable[[argparse.Namespace], bool] = lambda args: False
    needs_database: bool = True


@dataclass(frozen=True)
class LoadReport:
    """What a load changed (printed by `load`, and as one JSON line with `--json`): resources inserted,
    updated, unchanged, deleted; `missing`: resources the file left out that stay as they were; the first few
    ids of each, and (`deleted_named`, `missing_named`) the same as the operator knows them (their source code and
    name, the id beside), which the report line shows; `about`: what the load wrote into (data source,
    version...) for the JSON line; notes for the operator.

    A load that writes several resource types reports each on its own, never one sum: these counts are those of
    `resource_type` (the format's main type), and `other_types` holds one report per other type it wrote (its
    `resource_type` and counts; `notes` and `about` stay on this one). `load` then prints a line per type and its
    JSON line gains `types`, each type's counts. A format of one type may leave `resource_type` unset.

    `changes`: the other kinds of change the load made, each `(kind, count)` in the order to print them after
    `deleted` (`("withdrawn", 3)`: a plugin's own words; each is a key of the JSON line too); `named`: the first
    resources of any kind (`inserted`, `updated` or one of `changes`) as the operator knows them, which the line shows
    after its count (`<kind>_units` in the JSON line); `refused`: what a dry run found the load would refuse, one
    line each, printed as errors: the dry run then exits 1."""

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
    resource_type: str | None = None
    other_types: tuple[LoadReport, ...] = ()
    changes: tuple[tuple[str, int], ...] = ()
    named: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    refused: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        named = [part.resource_type for part in self.by_type]
        if self.other_types and (None in named or len(set(named)) != len(named)
                                 or any(part.other_types for part in self.other_types)):
            raise ConfigError(f"a LoadReport of several types names each once, in resource_type (got "
                              f"{', '.join(map(str, named))}), and its other_types have none of their own")

    @property
    def by_type(self) -> tuple[LoadReport, ...]:
        """This report (the main type's counts), then each other type's."""
        return (self, *self.other_types)


@dataclass(frozen=True)
class LoadCall:
    """What a load format's `load` is called with: the writing engine, the file's path, the parsed arguments, the
    progress line, the settings and the providers of the enabled plugins (`registry`), and `lookup`, which finds
    resources of any provider as a search would (a facility code to a Location id:
    `call.lookup.identified("Location", code)`, `system=` naming its system; `call.lookup.within(account)` keeps to
    one account), with that provider's rules, never its tables. A look-up reads what is committed, or with
    `connection=` what the load's own transaction wrote so far."""

    engine: Engine
    path: str
    args: argparse.Namespace
    progress: Progress
    settings: Settings
    registry: Registry
    lookup: Lookup


@dataclass(frozen=True)
class LoadFormat:
    """`orgunit-fhir load <name> PATH ...`: the engine migrates the schema, opens a writing engine, calls
    `load` with a LoadCall, refreshes planner statistics and pre-renders what changed; `configure` adds the
    format's options. `dry_run`: the format honours `args.dry_run` (checks and counts everything, writes nothing),
    so `load` offers `--dry-run` for it."""

    name: str
    help: str
    load: Callable[[LoadCall], LoadReport]
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
