"""Sample data written through a package's own load format, as `orgunit-fhir load NAME PATH` writes it (its
look-ups included): what a Subject's `load(settings)` calls."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from server.cli.data import load_call
from server.declare.extensions import LoadReport
from server.declare.progress import Progress
from server.extensions import load_extensions
from server.settings import Settings
from server.storage.db import writing_engine


def load_files(settings: Settings, name: str, *paths: Path | str, **options: Any) -> list[LoadReport]:
    """Each file in turn through the load format `name` (`options`: its parsed arguments, e.g. `dry_run=False`)."""
    fmt = load_extensions(settings).load_formats[name]
    with writing_engine(settings) as engine:
        return [fmt.load(load_call(settings, engine, str(path), argparse.Namespace(**options),
                                   Progress(f"load {name}"))) for path in paths]
