"""What every command shares: the --settings/--database options, and the settings they name."""
from __future__ import annotations

import argparse

from server.settings import DATABASE_ENV, SETTINGS_ENV, Settings, load_settings


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--settings", help=f"settings file (default: ${SETTINGS_ENV} or ./settings.yaml)")
    parser.add_argument("--database", help=f"database URL, e.g. postgresql://user@host/db (default: ${DATABASE_ENV} "
                                           "or SQLite in the data directory)")


def settings_of(args: argparse.Namespace) -> Settings:
    return load_settings(getattr(args, "settings", None), getattr(args, "database", None))


def common_parser() -> argparse.ArgumentParser:
    """Reads --settings and --database wherever they stand (before the commands are known)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_common(parser)
    return parser
