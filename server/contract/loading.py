"""Sample data written through a package's own load format, as `orgunit-fhir load NAME PATH` writes it (its
look-ups included): what a Subject's `load(settings)` calls."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from server.cli.data import format_arguments, load_call
from server.declare.extensions import LoadReport
from server.declare.progress import Progress
from server.extensions import load_extensions
from server.settings import Settings
from server.storage.db import writing_engine


def load_files(settings: Settings, name: str, *paths: Path | str, **options: Any) -> list[LoadReport]:
    """Each file in turn through the load format `name`, as `orgunit-fhir load NAME PATH [options]` would load it:
    `options` are its options as parsed values by their `dest` names (`data_source="x"`, `delete_missing=True`),
    every option left out takes the default the command line gives it; an option the format does not declare, or a
    required one left out, is a TypeError naming the format's options."""
    formats = load_extensions(settings).load_formats
    if name not in formats:
        raise TypeError(f"no load format {name!r}; the enabled plugins' formats: {', '.join(sorted(formats))}")
    fmt = formats[name]
    calls = [(str(path), format_arguments(fmt, str(path), options)) for path in paths]  # every mistake before a write
    with writing_engine(settings) as engine:
        return [fmt.load(load_call(settings, engine, path, args, Progress(f"load {name}"))) for path, args in calls]
