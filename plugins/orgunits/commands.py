"""The org-unit domain on the command line: its load formats, its demo pyramid and `orgunit-fhir versions`."""
from __future__ import annotations

import argparse
import logging
from collections.abc import Callable

from sqlalchemy import Connection, Engine, select

from plugins.orgunits.demo import generate_demo
from plugins.orgunits.importers.declaration import ImportFormat
from plugins.orgunits.importers.formats import DECLARED
from plugins.orgunits.tables import DEFAULT_ACCOUNT, org_unit
from plugins.orgunits.changes import Allowed
from plugins.orgunits.served import Switch
from plugins.orgunits.versions import list_versions, set_default_version
from plugins.orgunits.writer import stamp, transaction
from server import (
    Command,
    ConfigError,
    DemoData,
    LoadCall,
    LoadError,
    LoadFormat,
    LoadReport,
    Settings,
    add_common_options,
    writing_engine,
)


def _configure_load(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-source", metavar="NAME",
                        help="data source name (default: Iaso, DHIS2 or FHIR by format; mapped: the mapping's)")
    parser.add_argument("--version", type=int, default=1, metavar="N", help="source version number (default: 1)")
    parser.add_argument("--delete-missing", action="store_true",
                        help="units of this data source absent from the file become deleted versions (without it, "
                             "the report counts them as missing)")
    parser.add_argument("--account", default=DEFAULT_ACCOUNT, metavar="NAME",
                        help=f"the account (tenant) the data source belongs to (default: {DEFAULT_ACCOUNT}); a file "
                             "without units never creates one")
    for field, help_text in ALLOW_FLAGS:
        parser.add_argument(f"--allow-{field.replace('_', '-')}", action="store_true", dest=f"allow_{field}",
                            help=help_text)


# each mass effect a load holds back unless allowed (plugins.orgunits.changes.Allowed): --allow-<field>
ALLOW_FLAGS = (
    ("reparent", "accept a load that gives more than 10%% of the data source's stored units another parent, or makes "
                 "a stored unit a root (refused by default: a typo'd parent or id field flattens a pyramid that way, "
                 "a blank parent cell makes a second root)"),
    ("mass_delete", "accept a load that deletes (--delete-missing) or withdraws (into a version not served) more than "
                    "10%% of the data source's units (refused by default: a file cut short, the wrong file or "
                    "--version)"),
    ("reclassify", "accept a load that changes a type's depth or category (its physicalType) for units already "
                   "published (refused by default)"),
    ("identifier_change", "accept a load that publishes more than 10%% of the data source's units under another "
                          "identifier system (refused by default: a typo'd identifier_system does that)"),
    ("duplicate_source", "accept a load whose new units mostly have the identifiers of another data source's units "
                         "of the account (refused by default: the same registry under another name)"),
)


def allowed(args: argparse.Namespace) -> Allowed:
    """The mass effects the command line allows."""
    return Allowed(**{field: getattr(args, f"allow_{field}") for field, _ in ALLOW_FLAGS})


def _configure(declared: ImportFormat) -> Callable[[argparse.ArgumentParser], None]:
    def configure(parser: argparse.ArgumentParser) -> None:
        declared.configure(parser)
        _configure_load(parser)

    return configure


def _loader(declared: ImportFormat) -> Callable[[LoadCall], LoadReport]:
    def load(call: LoadCall) -> LoadReport:
        engine, path, args, progress = call.engine, call.path, call.args, call.progress
        own = {name: getattr(args, name) for name in declared.own_options}
        data_source = declared.data_source(args.data_source, **own)
        report = declared.loader(engine, path, data_source=data_source, version=args.version,
                                 delete_missing=args.delete_missing, progress=progress, account=args.account,
                                 dry_run=args.dry_run, allow=allowed(args), **own)
        # a load writes units (Locations) and its data source (an Organization, when that provider is enabled):
        # each type counted on its own
        change = report.source_change
        organizations = (LoadReport(int(change == "inserted"), int(change == "updated"), int(change == "unchanged"),
                                    resource_type="Organization"),) if "Organization" in call.registry.providers else ()
        return LoadReport(report.inserted, report.updated, report.unchanged, report.deleted, report.notes,
                          report.missing, tuple(map(str, report.deleted_ids)), tuple(map(str, report.missing_ids)),
                          {"account": args.account, "data_source": data_source, "version": args.version},
                          report.deleted_units, report.missing_units, resource_type="Location",
                          other_types=organizations,
                          changes=tuple((kind, count) for kind, count in (("withdrawn", report.withdrawn),
                                                                          ("restored", report.restored),
                                                                          ("held", report.held))
                                        if count),
                          named=dict(report.named), refused=report.refused)

    return load


#: one `orgunit-fhir load` format per importer module's declaration
LOAD_FORMATS = tuple(LoadFormat(declared.name, declared.help, _loader(declared), _configure(declared), dry_run=True)
                     for declared in DECLARED)


def _is_empty(conn: Connection) -> bool:
    return conn.execute(select(org_unit.c.id).limit(1)).first() is None


DEMO = DemoData("org-unit pyramid", lambda engine, size, seed, progress: generate_demo(engine, size, seed, progress),
                _is_empty, default_size=2000)


def _configure_versions(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION", title="actions")
    listing = sub.add_parser("list", help="every source version, with its units and the one served",
                             description="every source version, with its units and the one served")
    add_common_options(listing)
    listing.add_argument("--account", metavar="NAME", help="only this account's data sources")
    chosen = sub.add_parser("set-default", help="serve this version of a data source",
                            description="serve this version of a data source: its units are published (a new "
                                        "version each) and those of the version served until now withdrawn (a "
                                        "deleted version each), so consumers syncing with _history receive the switch")
    add_common_options(chosen)
    chosen.add_argument("--data-source", required=True, metavar="NAME", help="the data source's name")
    chosen.add_argument("--version", required=True, metavar="N|newest",
                        help="a version number, or 'newest' (serve the newest version again)")
    chosen.add_argument("--account", default=DEFAULT_ACCOUNT, metavar="NAME",
                        help=f"the data source's account (default: {DEFAULT_ACCOUNT})")
    chosen.add_argument("--force", action="store_true", help="serve the version even if it holds no units")


def _list(engine: Engine, account: str | None) -> int:
    with engine.connect() as conn:
        rows = list_versions(conn, account)
    print(f"{'account':<16} {'data source':<32} {'version':>7} {'units':>9}  served")
    for row in rows:
        mark = ("yes (default)" if row.default else "yes (newest)") if row.served else ""
        print(f"{row.account:<16} {row.data_source:<32} {row.number:>7} {row.units:>9,}  {mark}")
    return 0


def _set_default(engine: Engine, args: argparse.Namespace) -> int:
    number = None if args.version == "newest" else _version_number(args.version)
    with transaction(engine) as conn:  # a writer: one at a time
        switch = set_default_version(conn, args.data_source, number, account=args.account, now=stamp(conn))
        chosen = [v for v in list_versions(conn, args.account) if v.data_source == args.data_source and v.served]
        if chosen and not chosen[0].units and not args.force:
            conn.rollback()
            raise LoadError(f"version {chosen[0].number} of {args.account}/{args.data_source} holds no units "
                            "(a later version loaded with the same ids moved them there): serving it would "
                            "publish nothing and withdraw every unit; pass --force to serve it anyway")
    published = (f"{switch.withdrawn:,} units withdrawn (a deleted version each), {len(switch.restored):,} restored "
                 f"and {switch.republished:,} published again (a new version each): consumers syncing with _history, "
                 "_since or $export?_since receive the switch" if switch != Switch() else
                 "it already served it: nothing changed")
    logging.getLogger("orgunit_fhir.cli").info(
        f"versions: {args.account}/{args.data_source} now serves "
        f"{'its newest version' if number is None else f'version {number}'}; {published}",
        extra={"fields": {"command": "versions set-default", "account": args.account, "data_source": args.data_source,
                          "version": number, "withdrawn": switch.withdrawn, "restored": len(switch.restored),
                          "republished": switch.republished}})
    return 0


def _version_number(raw: str) -> int:
    if not raw.isdigit():
        raise ConfigError(f"--version must be a version number or 'newest', not {raw!r}")
    return int(raw)


def _versions(args: argparse.Namespace, settings: Settings) -> int:
    with writing_engine(settings) as engine:
        return _list(engine, args.account) if args.action == "list" else _set_default(engine, args)


VERSIONS = Command("versions", "list the source versions, or choose the one served", _configure_versions, _versions)
