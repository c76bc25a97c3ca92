"""`orgunit-fhir accounts list|rename|remove` and `orgunit-fhir data-sources list|rename|remove`: undoing a load
into the wrong account or data source. Each change is one transaction; `remove --dry-run` rolls it back."""
from __future__ import annotations

import argparse
import logging
from collections.abc import Callable

from sqlalchemy import Connection, Engine

from plugins.orgunits.admin import (
    list_accounts,
    list_sources,
    remove_account,
    remove_source,
    rename_account,
    rename_source,
)
from plugins.orgunits.claimless import removal_notes, rename_note
from plugins.orgunits.tables import DEFAULT_ACCOUNT
from plugins.orgunits.writer import stamp, transaction
from server import Command, Settings, add_common_options, writing_engine

log = logging.getLogger("orgunit_fhir.cli")
REMOVE_HELP = ("delete its units (a deleted version each, published in _history) and stop publishing it; refused "
               "while units are served unless --force; --purge erases them instead, every version (undo a load into "
               "the wrong account)")


def _say(message: str, level: int = logging.INFO, **fields: object) -> None:
    log.log(level, message, extra={"fields": fields})


def _sub(parent: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    parser = parent.add_parser(name, help=help_text, description=help_text)
    add_common_options(parser)
    return parser


def _account_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--account", default=DEFAULT_ACCOUNT, metavar="NAME",
                        help=f"the data source's account (default: {DEFAULT_ACCOUNT})")


def _removal_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true", help="remove even though units are served")
    parser.add_argument("--dry-run", action="store_true", help="say what would be removed, changing nothing")
    parser.add_argument("--purge", action="store_true",
                        help="erase the units and every version of them (read, vread, _history, search, _since and "
                             "$export no longer return them; no deletion is published): for a load into the wrong "
                             "account or data source, also after a remove without --purge")


def _configure_accounts(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION", title="actions")
    _sub(sub, "list", "every account, with its data sources and units")
    rename = _sub(sub, "rename", "give an account another name (its tokens need the new name)")
    rename.add_argument("name", metavar="NAME", help="the account's current name")
    rename.add_argument("new_name", metavar="NEW_NAME", help="its new name (an account that does not exist yet)")
    remove = _sub(sub, "remove", f"remove every data source of the account: {REMOVE_HELP}")
    remove.add_argument("name", metavar="NAME", help="the account")
    _removal_options(remove)


def _configure_sources(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION", title="actions")
    listing = _sub(sub, "list", "every data source, with its versions, units and last load format")
    listing.add_argument("--account", metavar="NAME", help="only this account's data sources")
    rename = _sub(sub, "rename", "give a data source another name (its units get a new version; its slug stays)")
    rename.add_argument("name", metavar="NAME", help="the data source's current name")
    rename.add_argument("new_name", metavar="NEW_NAME", help="its new name")
    _account_option(rename)
    remove = _sub(sub, "remove", f"remove a data source: {REMOVE_HELP}")
    remove.add_argument("name", metavar="NAME", help="the data source")
    _account_option(remove)
    _removal_options(remove)


def _accounts(args: argparse.Namespace, settings: Settings) -> int:
    with writing_engine(settings) as engine:
        if args.action == "list":
            with engine.connect() as conn:
                rows = list_accounts(conn)
            print(f"{'account':<24} {'data sources':>12} {'units':>11} {'served':>11}")
            for row in rows:  # a removed account: its tokens see its deletions (410, DELETE entries), nothing else
                state = f"  removed {row.removed.isoformat(sep=' ', timespec='seconds')}" if row.removed else ""
                print(f"{row.account:<24} {row.sources:>12,} {row.units:>11,} {row.served:>11,}{state}")
            return 0
        if args.action == "rename":
            with transaction(engine) as conn:
                claimless = rename_note(conn, args.name, args.new_name, settings.auth.default_account)
                moved = rename_account(conn, args.name, args.new_name)
            sources = f"{moved:,} data source{'s' if moved != 1 else ''}"
            _say(f"accounts: {args.name!r} is now {args.new_name!r} ({sources}); its consumers need "
                 f"tokens for {args.new_name!r}; {claimless}", command="accounts rename", account=args.new_name,
                 previous=args.name)
            return 0
        return _removed(engine, args, settings, args.name,
                        lambda conn: remove_account(conn, args.name, force=args.force, now=stamp(conn),
                                                    purge=args.purge),
                        f"account {args.name!r}")


def _sources(args: argparse.Namespace, settings: Settings) -> int:
    with writing_engine(settings) as engine:
        if args.action == "list":
            with engine.connect() as conn:
                rows = list_sources(conn, args.account)
            print(f"{'account':<16} {'data source':<32} {'versions':>8} {'units':>11} {'served':>11}  last format")
            for s in rows:
                print(f"{s.account:<16} {s.name:<32} {s.versions:>8,} {s.units:>11,} {s.served:>11,}  "
                      f"{s.last_format or '-'}")
            return 0
        if args.action == "rename":
            with transaction(engine) as conn:
                changed = rename_source(conn, args.account, args.name, args.new_name, stamp(conn))
            _say(f"data-sources: {args.account}/{args.name} is now {args.account}/{args.new_name}; {changed:,} units "
                 "got a new version (their managingOrganization.display)", command="data-sources rename",
                 account=args.account, data_source=args.new_name, previous=args.name, updated=changed)
            return 0
        return _removed(engine, args, settings, args.account,
                        lambda conn: (1, remove_source(conn, args.account, args.name, force=args.force,
                                                       now=stamp(conn), purge=args.purge)),
                        f"data source {args.account}/{args.name}")


def _removed(engine: Engine, args: argparse.Namespace, settings: Settings, account: str,
             remove: Callable[[Connection], tuple[int, int]], what: str) -> int:
    with transaction(engine, args.dry_run) as conn:
        sources, deleted = remove(conn)
        tokens = removal_notes(conn, account, settings.auth.default_account)  # before a dry run rolls back
    verb = "purge" if args.purge else "remove"
    done = f"would {verb}" if args.dry_run else f"{verb}d"
    of = f"{sources:,} data source{'s' if sources != 1 else ''}, " if args.command == "accounts" else ""
    how = ("erased with every version (gone from reads, _history, search and any $export started afterwards; "
           "files of exports already done stay until they expire)" if args.purge else
           "deleted (a deleted version each in _history)")
    _say(f"{done} {what}: {of}{deleted:,} unit{'s' if deleted != 1 else ''} {how}"
         f"{' (dry run: nothing changed)' if args.dry_run else ''}", command=f"{args.command} remove",
         dry_run=args.dry_run, data_sources=sources, deleted=deleted, purged=args.purge)
    for note in tokens:
        _say(f"{'if done: ' if args.dry_run else ''}{note}", logging.WARNING, command=f"{args.command} remove",
             dry_run=args.dry_run)
    return 0


def _writes(args: argparse.Namespace) -> bool:
    return args.action != "list" and not getattr(args, "dry_run", False)


ACCOUNTS = Command("accounts", "list, rename or remove accounts (tenants)", _configure_accounts, _accounts,
                   renders=_writes)
DATA_SOURCES = Command("data-sources", "list, rename or remove data sources", _configure_sources, _sources,
                       renders=_writes)
