"""`orgunit-fhir check-data [--account A] [--data-source D] [--json]`: the data-quality report
(plugins.orgunits.integrity) of what is published, on stdout, one line per check that found something (or one JSON
document); exit 1 when an error-level check found anything."""
from __future__ import annotations

import argparse
import logging
import sys
import time

import orjson

from plugins.orgunits.admin import account_names, list_sources
from plugins.orgunits.integrity import CHECKS, failed, lines, read_units, run_checks
from server import Command, LoadError, Settings, reading_engine


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--account", metavar="NAME", help="only this account (default: every account)")
    parser.add_argument("--data-source", metavar="NAME", help="only this data source (of --account, else of any)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON document")


def _run(args: argparse.Namespace, settings: Settings) -> int:
    started = time.perf_counter()
    with reading_engine(settings) as engine, engine.connect() as conn:
        if args.account is not None and args.account not in account_names(conn):
            raise LoadError(f"account {args.account!r} does not exist (accounts: "
                            f"{', '.join(account_names(conn)) or 'none'})")
        names = sorted({s.name for s in list_sources(conn, args.account)})
        if args.data_source is not None and args.data_source not in names:
            within = f" in account {args.account!r}" if args.account else ""
            raise LoadError(f"no data source {args.data_source!r}{within} (data sources: {', '.join(names)})")
        units = read_units(conn, args.account, args.data_source)
    findings = run_checks(units)
    seconds = round(time.perf_counter() - started, 1)
    bad = failed(findings)
    if args.json:
        found = {finding.check.code: finding for finding in findings}
        document = {"account": args.account, "data_source": args.data_source, "units": len(units),
                    "seconds": seconds, "failed": bad,
                    "checks": [found[check.code].as_json() if check.code in found else
                               {"check": check.code, "severity": check.severity, "title": check.title, "count": 0,
                                "first": []} for check in CHECKS]}
        sys.stdout.write(orjson.dumps(document).decode() + "\n")
    else:
        for line in lines(findings):
            sys.stdout.write(line + "\n")
    sys.stdout.flush()
    errors = sum(f.count for f in findings if f.check.severity == "error")
    warnings = sum(f.count for f in findings if f.check.severity == "warning")
    logging.getLogger("orgunit_fhir.cli").log(
        logging.ERROR if bad else logging.INFO,
        f"check-data: {len(units):,} units checked in {seconds}s: {errors:,} errors, {warnings:,} warnings"
        f"{' (exit 1: an error-level check failed)' if bad else ''}",
        extra={"fields": {"command": "check-data", "units": len(units), "errors": errors, "warnings": warnings,
                          "seconds": seconds}})
    return 1 if bad else 0


CHECK_DATA = Command("check-data", "the data-quality report of what is published (DHIS2's data-integrity checks that "
                                   "apply to a pyramid): exit 1 when an error-level check finds anything",
                     _configure, _run)
