"""orgunit-fhir serve | check-config | demo | load | render | migrate | token, and the plugins' own commands."""
from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from server.cli import check, data, serve, token
from server.cli.common import common_parser, settings_of
from server.errors import ConfigError, LoadError
from server.extensions import Extensions, load_extensions
from server.settings import Settings

Run = Callable[[argparse.Namespace, Settings, Extensions], int]
log = logging.getLogger("orgunit_fhir")

ENGINE: tuple[tuple[str, str, Callable[[argparse.ArgumentParser], None], Run], ...] = (
    ("serve", "serve the FHIR API (creates demo data in an empty embedded database)", serve.configure, serve.cmd_serve),
    ("demo", "write the plugins' synthetic demo data (the org-unit pyramid: 5 levels)", data.configure_demo,
     data.cmd_demo),
    ("render", "pre-render every version for these settings (load and demo do it too)", lambda p: None,
     data.cmd_render),
    ("migrate", "bring the database schema (every plugin's tables) to this version (writer role)", lambda p: None,
     data.cmd_migrate),
    ("check-config", "check the settings, plugins and databases, one line each", lambda p: None,
     check.cmd_check_config),
    ("token", "print a JWT signed with the local key", token.configure, token.cmd_token),
)


def build_parser(extensions: Extensions) -> tuple[argparse.ArgumentParser, dict[str, Run]]:
    parser = argparse.ArgumentParser(prog="orgunit-fhir", description="Read-only FHIR R4 server for org units")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = common_parser()
    runs: dict[str, Run] = {}
    for name, help_text, configure, run in ENGINE:
        command = sub.add_parser(name, help=help_text, description=help_text, parents=[common])
        configure(command)
        runs[name] = run
    load = sub.add_parser("load", help="import a file in one of the plugins' formats (one transaction)",
                          description="import a file in one of the plugins' formats (one transaction)")
    data.configure_load(load, extensions, common)
    runs["load"] = data.cmd_load
    for plugin_command in extensions.commands.values():
        command = sub.add_parser(plugin_command.name, help=plugin_command.help, description=plugin_command.help,
                                 parents=[common])
        plugin_command.configure(command)
        runs[plugin_command.name] = lambda args, settings, _, run=plugin_command.run: run(args, settings)
    return parser, runs


def _safe_url(settings: Settings | None) -> str:
    try:
        return make_url(settings.database_url).render_as_string(hide_password=True) if settings else "?"
    except Exception:  # noqa: BLE001 - only words for a message
        return "?"


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    argv = list(sys.argv[1:] if argv is None else argv)
    known, _ = common_parser().parse_known_args(argv)
    name = next((a for a in argv if not a.startswith("-")), "orgunit-fhir")
    settings: Settings | None = None
    try:
        settings = settings_of(known)
        extensions = load_extensions(settings)
        parser, runs = build_parser(extensions)
        args = parser.parse_args(argv)
        name = args.command
        return runs[args.command](args, settings, extensions)
    except ConfigError as exc:
        print(f"orgunit-fhir {name}: configuration error: {exc}", file=sys.stderr)
        return 2
    except LoadError as exc:
        print(f"orgunit-fhir {name}: {exc}", file=sys.stderr)
        return 1
    except OperationalError as exc:  # the database cannot be opened or reached
        cause = str(exc.orig or exc).strip().splitlines()[0]
        print(f"orgunit-fhir {name}: the database ({_safe_url(settings)}) cannot be opened or reached: {cause}",
              file=sys.stderr)
        return 1


