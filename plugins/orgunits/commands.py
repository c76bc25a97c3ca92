"""The org-unit domain on the command line: its load formats, its demo pyramid and `orgunit-fhir versions`."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from sqlalchemy import Connection, Engine, select

from plugins.orgunits.demo import generate_demo
from plugins.orgunits.importers.formats import DEFAULT_DATA_SOURCES, load_file
from plugins.orgunits.tables import DEFAULT_ACCOUNT, org_unit
from plugins.orgunits.versions import list_versions, set_default_version, unserved_units
from server import (
    Command,
    ConfigError,
    DemoData,
    LoadError,
    LoadFormat,
    LoadReport,
    Progress,
    Settings,
    add_common_options,
    writing_engine,
)

FORMAT_HELP = {
    "iaso-csv": "Iaso's org-unit export CSV (ancestors by external ref and name; the type ends in its category code)",
    "iaso-gpkg": "Iaso's GeoPackage export (one layer per level; points for facilities, polygons for areas)",
    "dhis2": "DHIS2 organisationUnits JSON (API or metadata export); ids allocated, the UID is the source reference",
    "fhir-bundle": "a FHIR Bundle (any type) of Location resources; ids allocated, the Location id is the source "
                   "reference",
}


def _configure_load(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-source", help="data source name (default: Iaso, DHIS2 or FHIR by format)")
    parser.add_argument("--version", type=int, default=1, help="source version number (default: 1)")
    parser.add_argument("--delete-missing", action="store_true",
                        help="units of this data source absent from the file become deleted versions")
    parser.add_argument("--account", default=DEFAULT_ACCOUNT,
                        help=f"the account (tenant) the data source belongs to (default: {DEFAULT_ACCOUNT})")


def _loader(fmt: str) -> Callable[[Engine, str, argparse.Namespace, Progress], LoadReport]:
    def load(engine: Engine, path: str, args: argparse.Namespace, progress: Progress) -> LoadReport:
        report = load_file(engine, fmt, path, data_source=args.data_source, version=args.version,
                           delete_missing=args.delete_missing, progress=progress, account=args.account)
        data_source = args.data_source or DEFAULT_DATA_SOURCES[fmt]
        with engine.connect() as conn:
            left = unserved_units(conn, data_source, args.account)
        notes = (f"{left} units of {args.account}/{data_source} belong to versions that are not served, so they "
                 "are not published (and have no deletion in _history): load with --delete-missing to record them "
                 "as deleted, or choose the version served with `orgunit-fhir versions set-default`",) if left else ()
        return LoadReport(report.inserted, report.updated, report.unchanged, notes=notes)

    return load


LOAD_FORMATS = tuple(LoadFormat(fmt, help_text, _loader(fmt), _configure_load) for fmt, help_text in FORMAT_HELP.items())


def _is_empty(conn: Connection) -> bool:
    return conn.execute(select(org_unit.c.id).limit(1)).first() is None


DEMO = DemoData("org-unit pyramid", lambda engine, size, seed, progress: generate_demo(engine, size, seed, progress),
                _is_empty, default_size=2000)


def _configure_versions(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = sub.add_parser("list", help="every source version, with its units and the one served")
    add_common_options(listing)
    listing.add_argument("--account", help="only this account's data sources")
    chosen = sub.add_parser("set-default", help="serve this version of a data source")
    add_common_options(chosen)
    chosen.add_argument("--data-source", required=True, help="the data source's name")
    chosen.add_argument("--version", required=True, help="a version number, or 'newest'")
    chosen.add_argument("--account", default=DEFAULT_ACCOUNT, help=f"the data source's account (default: "
                                                                    f"{DEFAULT_ACCOUNT})")
    chosen.add_argument("--force", action="store_true", help="serve the version even if it holds no units")


def _list(engine: Engine, account: str | None) -> int:
    with engine.connect() as conn:
        rows = list_versions(conn, account)
    print(f"{'account':<16} {'data source':<32} {'version':>7} {'units':>9}  served")
    for row in rows:
        mark = ("yes (default)" if row.default else "yes (newest)") if row.served else ""
        print(f"{row.account:<16} {row.data_source:<32} {row.number:>7} {row.units:>9}  {mark}")
    return 0


def _set_default(engine: Engine, args: argparse.Namespace) -> int:
    number = None if args.version == "newest" else _version_number(args.version)
    with engine.begin() as conn:
        set_default_version(conn, args.data_source, number, account=args.account)
        chosen = [v for v in list_versions(conn, args.account) if v.data_source == args.data_source and v.served]
        if chosen and not chosen[0].units and not args.force:
            conn.rollback()
            raise LoadError(f"version {chosen[0].number} of {args.account}/{args.data_source} holds no live units "
                            "(a later version loaded with the same ids moved them there): serving it would "
                            "publish nothing; pass --force to serve it anyway")
    print(f"versions: {args.account}/{args.data_source} now serves "
          f"{'its newest version' if number is None else f'version {number}'}; consumers syncing with "
          "_history or _lastUpdated should re-read in full", file=sys.stderr)
    return 0


def _version_number(raw: str) -> int:
    if not raw.isdigit():
        raise ConfigError(f"--version must be a version number or 'newest', not {raw!r}")
    return int(raw)


def _versions(args: argparse.Namespace, settings: Settings) -> int:
    with writing_engine(settings) as engine:
        return _list(engine, args.account) if args.action == "list" else _set_default(engine, args)


VERSIONS = Command("versions", "list the source versions, or choose the one served", _configure_versions, _versions)
