"""The file formats the `load` command knows, by name, and `load_file` that dispatches to them."""
from __future__ import annotations

import os
from collections.abc import Callable

from sqlalchemy import Engine

from plugins.orgunits.importers.dhis2 import load_dhis2
from plugins.orgunits.importers.fhir_bundle import load_fhir_bundle
from plugins.orgunits.importers.iaso_csv import load_iaso_csv
from plugins.orgunits.importers.iaso_gpkg import load_iaso_gpkg
from plugins.orgunits.importers.transaction import Progress
from plugins.orgunits.records import WriteReport
from plugins.orgunits.tables import DEFAULT_ACCOUNT
from server import LoadError

Loader = Callable[..., WriteReport]

DEFAULT_DATA_SOURCES = {"iaso-csv": "Iaso", "iaso-gpkg": "Iaso", "dhis2": "DHIS2", "fhir-bundle": "FHIR"}

#: format name -> loader(engine, path, data_source=None, version=1, *, delete_missing=False, now=None,
#: progress=None, account=..., dry_run=False, allow_reparent=False) -> WriteReport; data_source None means the
#: format's default
#: (DEFAULT_DATA_SOURCES). The `mapped` format needs its mapping file too: importers.mapped.load_mapped.
FORMATS: dict[str, Loader] = {"iaso-csv": load_iaso_csv, "iaso-gpkg": load_iaso_gpkg, "dhis2": load_dhis2,
                              "fhir-bundle": load_fhir_bundle}


def load_file(engine: Engine, fmt: str, path: str | os.PathLike[str], *, data_source: str | None = None,
              version: int = 1, delete_missing: bool = False, progress: Progress | None = None,
              account: str = DEFAULT_ACCOUNT, dry_run: bool = False,
              allow_reparent: bool = False) -> WriteReport:
    """Load `path` in format `fmt` (one of FORMATS) in one transaction; data_source None = the format's default."""
    loader = FORMATS.get(fmt)
    if loader is None:
        raise LoadError(f"unknown format {fmt!r}; known formats: {', '.join(FORMATS)}")
    return loader(engine, path, data_source=data_source or DEFAULT_DATA_SOURCES[fmt], version=version,
                  delete_missing=delete_missing, progress=progress, account=account, dry_run=dry_run,
                  allow_reparent=allow_reparent)
