"""The file formats the `load` command knows, collected from the importer modules' declarations (each one's
FORMAT), and `load_file` that loads a path in one of those a path alone describes."""
from __future__ import annotations

import os

from sqlalchemy import Engine

from plugins.orgunits.importers import dhis2, fhir_bundle, iaso_csv, iaso_gpkg, mapped
from plugins.orgunits.importers.declaration import ImportFormat, Loader
from plugins.orgunits.importers.transaction import Progress
from plugins.orgunits.changes import Allowed
from plugins.orgunits.records import WriteReport
from plugins.orgunits.tables import DEFAULT_ACCOUNT
from server import LoadError

#: every importer module's format, in the order `orgunit-fhir load --help` lists them
DECLARED: tuple[ImportFormat, ...] = tuple(module.FORMAT for module in
                                           (iaso_csv, iaso_gpkg, dhis2, fhir_bundle, mapped))

_BY_PATH = {declared.name: declared for declared in DECLARED if not declared.own_options}
#: the formats a path alone loads, by name (a format with options of its own, e.g. a mapping file, is loaded by its
#: importer): loader(engine, path, data_source=None, version=1, *, delete_missing=False, now=None, progress=None,
#: account=..., dry_run=False, allow=Allowed()) -> WriteReport; data_source None means the format's default
FORMATS: dict[str, Loader] = {name: declared.loader for name, declared in _BY_PATH.items()}
DEFAULT_DATA_SOURCES = {name: declared.data_source(None) for name, declared in _BY_PATH.items()}


def load_file(engine: Engine, fmt: str, path: str | os.PathLike[str], *, data_source: str | None = None,
              version: int = 1, delete_missing: bool = False, progress: Progress | None = None,
              account: str = DEFAULT_ACCOUNT, dry_run: bool = False,
              allow: Allowed = Allowed()) -> WriteReport:
    """Load `path` in format `fmt` (one of FORMATS) in one transaction; data_source None = the format's default."""
    declared = _BY_PATH.get(fmt)
    if declared is None:
        raise LoadError(f"unknown format {fmt!r}; known formats: {', '.join(FORMATS)}")
    return declared.loader(engine, path, data_source=declared.data_source(data_source), version=version,
                           delete_missing=delete_missing, progress=progress, account=account, dry_run=dry_run,
                           allow=allow)
