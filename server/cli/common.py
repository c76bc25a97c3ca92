"""What every command shares: the --settings/--database options, and the settings they name; the one way a command
reports (a log line in the server's format, `server.log_format`: JSON or text)."""
from __future__ import annotations

import argparse
import logging
from typing import Any

from server.telemetry.logs import log_fields
from server.settings import DATABASE_ENV, SETTINGS_ENV, Settings, load_settings

CLI = logging.getLogger("orgunit_fhir.cli")


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--settings", metavar="FILE",
                        help=f"settings file (default: ${SETTINGS_ENV} or ./settings.yaml)")
    parser.add_argument("--database", metavar="URL",
                        help=f"database URL: sqlite:///path/to/file.db or postgresql://user@host:5432/db (default: "
                             f"${DATABASE_ENV}, database.url, or SQLite in the data directory)")


def settings_of(args: argparse.Namespace) -> Settings:
    return load_settings(getattr(args, "settings", None), getattr(args, "database", None))


def common_parser() -> argparse.ArgumentParser:
    """Reads --settings and --database wherever they stand (before the commands are known)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_common(parser)
    return parser


def say(message: str, level: int = logging.INFO, **fields: Any) -> None:
    """A command's report: one log line, JSON (the message and `fields`) or text (the message), as the server's."""
    log_fields(CLI, message, level, **fields)
