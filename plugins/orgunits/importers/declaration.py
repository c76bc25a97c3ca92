"""What each importer module declares (its FORMAT): the `orgunit-fhir load` format it reads, and the one place that
decides which data source a load writes into (`ImportFormat.data_source`)."""
from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from plugins.orgunits.records import WriteReport

#: loader(engine, path, data_source=None, version=1, *, delete_missing=False, now=None, progress=None, account=...,
#: dry_run=False, allow=Allowed(), **own options) -> WriteReport
Loader = Callable[..., WriteReport]


def no_options(parser: argparse.ArgumentParser) -> None:
    """A format without options of its own: it takes the common ones of `load` only."""


@dataclass(frozen=True, slots=True)
class ImportFormat:
    """`orgunit-fhir load <name> PATH`, as its importer module declares it: `help` for the command line; `loader`
    loads a file (given the values of the format's own options by name, those in `own_options`, which `configure`
    adds to the command line before the common ones); `default_data_source`: the data source written when none is
    named, or a function of the own options that reads it (a mapping file names its data source)."""

    name: str
    help: str
    loader: Loader
    default_data_source: str | Callable[[Mapping[str, Any]], str]
    configure: Callable[[argparse.ArgumentParser], None] = no_options
    own_options: tuple[str, ...] = ()

    def data_source(self, given: str | None, **own: Any) -> str:
        """The data source a load writes into, decided here only: the one named (`--data-source`), else the
        format's default (for a default read from the own options, `own` gives their values)."""
        if given:
            return given
        default = self.default_data_source
        return default if isinstance(default, str) else default(own)
