"""orgunit-fhir serve | check-config | demo | load | render | migrate | token, and the plugins' own commands.

Every failure is one line naming what is wrong and what to do, logged in the server's format (`server.log_format`),
never a traceback (set $ORGUNIT_FHIR_TRACEBACK=1 to see one for an unexpected error)."""
from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import NoReturn

from sqlalchemy.engine import make_url

from server.cli import check, data, serve, token
from server.cli.common import common_parser, say, settings_of
from server.errors import (
    AfterCommit,
    ConfigError,
    LoadError,
    StorageBusy,
    StorageError,
    StorageFull,
    StorageUnavailable,
)
from server.extensions import Extensions, load_extensions
from server.plugins import Blame, blame
from server.ops.checks import (
    DatabaseCheck,
    check_primary,
    database_url_problem,
    embedded_database_missing,
    missing_database,
    storage_problems,
)
from server.telemetry.logs import configure_logging
from server.settings import Settings

Run = Callable[[argparse.Namespace, Settings, Extensions], int]
TRACEBACK_ENV = "ORGUNIT_FHIR_TRACEBACK"

ENGINE: tuple[tuple[str, str, Callable[[argparse.ArgumentParser], None], Run], ...] = (
    ("serve", "serve the FHIR API from an existing database (--demo: create the embedded demo when there is none)",
     serve.configure, serve.cmd_serve),
    ("demo", "write the plugins' synthetic demo data (the org-unit pyramid: 5 levels)", data.configure_demo,
     data.cmd_demo),
    ("render", "pre-render every version for these settings (load and demo do it too)", lambda p: None,
     data.cmd_render),
    ("migrate", "bring the database schema (every plugin's tables) to this version (writer role)", lambda p: None,
     data.cmd_migrate),
    ("check-config", "check the settings, plugins and databases, one line each (exit 1 on any FAIL)", lambda p: None,
     check.cmd_check_config),
    ("token", "print a JWT signed with the local key", token.configure, token.cmd_token),
)


class Parser(argparse.ArgumentParser):
    """A missing subcommand (a COMMAND, a FORMAT, an ACTION) is answered with the choices, at every depth (nested
    parsers are of the same class)."""

    def error(self, message: str) -> NoReturn:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and message.endswith(f"required: {action.metavar}"):
                self.print_usage(sys.stderr)
                self.exit(2, f"{self.prog}: missing {action.metavar}: one of {', '.join(action.choices)} "
                             f"({self.prog} {action.metavar} --help for its options)\n")
        super().error(message)


def build_parser(extensions: Extensions) -> tuple[argparse.ArgumentParser, dict[str, Run]]:
    parser = Parser(prog="orgunit-fhir", description="Read-only FHIR R4 server for org units")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
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
        runs[plugin_command.name] = _plugin_run(plugin_command.run, plugin_command.renders)
    return parser, runs


def _plugin_run(run: Callable[[argparse.Namespace, Settings], int],
                renders: Callable[[argparse.Namespace], bool]) -> Run:
    def run_it(args: argparse.Namespace, settings: Settings, extensions: Extensions) -> int:
        status = run(args, settings)
        if status == 0 and renders(args):
            data.render_committed(settings, f"orgunit-fhir {args.command} {getattr(args, 'action', '')}".strip())
        return status

    return run_it


def _may_create(args: argparse.Namespace) -> bool:
    """Only migrate, demo, load (not a dry run) and `serve --demo` create a database; check-config, token and
    serve decide for themselves (they never create one: serve refuses after checking its settings and plugins,
    load --dry-run reads an empty throwaway one); every other command refuses a SQLite file that does not exist
    (a typo'd path)."""
    return args.command in ("check-config", "token", "migrate", "demo", "load", "serve")


def _needs_database(args: argparse.Namespace, extensions: Extensions) -> bool:
    """Every command reads a database but a plugin's command declared `needs_database=False`."""
    command = extensions.commands.get(args.command)
    return command is None or command.needs_database


def _safe_url(settings: Settings | None) -> str:
    try:
        return make_url(settings.database_url).render_as_string(hide_password=True) if settings else "?"
    except Exception:  # noqa: BLE001 - only words for a message
        return "?"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _schema_unready(settings: Settings | None, extensions: Extensions | None,
                    before: DatabaseCheck | None) -> str | None:
    """What is wrong with the primary database's schema when it is not this server's current one (no schema, or
    one behind: what `migrate` does), else None; not looked at again when the check `before` the command found
    the database unreachable (a silent one would make the operator wait out the connection bound twice)."""
    if settings is None or extensions is None or (before is not None and not before.reachable):
        return None
    try:
        found = check_primary(settings, extensions.schema)
    except Exception:  # noqa: BLE001 - the check is a better message, never a second failure
        return None
    return None if not found.reachable or found.current else found.describe()


def _primary_before(settings: Settings, extensions: Extensions) -> DatabaseCheck | None:
    """The primary database as the command finds it, None where there is nothing to look at (an embedded database
    not created yet: looking would create the file)."""
    return None if embedded_database_missing(settings) else check_primary(settings, extensions.schema)


#: the commands that refuse a schema behind this release's (`render` writes what this release knows: behind, it
#: would fail half way); the others meet it as they meet it (migrate brings it to the head, load and demo migrate)
CURRENT_SCHEMA_ONLY = ("render",)


def _refused_schema(command: str, before: DatabaseCheck | None) -> str | None:
    """Why the command refuses the primary database's schema as found `before` it, else None: what a newer release
    migrated (a chain at a revision this server does not know), which no command of this release reads or writes
    (check-config lists it; serve refuses it with the rest of its checks); a schema behind, for the commands that
    need the current one."""
    if before is None or not before.reachable:
        return None
    if not before.migratable:
        return before.describe()
    if command in CURRENT_SCHEMA_ONLY and before.has_schema and not before.current:
        return f"{command} refused: {before.describe()}"
    return None


def _fail(name: str, message: str, status: int, exc_info: bool = False) -> int:
    say(f"orgunit-fhir {name}: {message}", logging.ERROR, command=name, exit_status=status)
    if exc_info:
        logging.getLogger("orgunit_fhir").exception("the traceback")
    return status


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    configure_logging(Settings())  # the default format until the settings say otherwise
    known, _ = common_parser().parse_known_args(argv)
    name = next((a for a in argv if not a.startswith("-")), "orgunit-fhir")
    settings: Settings | None = None
    extensions: Extensions | None = None
    args: argparse.Namespace | None = None
    before: DatabaseCheck | None = None  # the primary database as the command found it, once looked at
    try:
        settings = settings_of(known)
        try:
            configure_logging(settings)
        except ConfigError:
            pass  # a bad server.log_format: check-config names it, serve refuses it
        if name != "check-config" and (problem := database_url_problem(settings.database_url)):
            raise ConfigError(problem)
        extensions = load_extensions(settings)
        parser, runs = build_parser(extensions)
        if not any(not a.startswith("-") for a in argv) and not {"-h", "--help"} & set(argv):
            parser.print_help(sys.stderr)
            return 2
        args = parser.parse_args(argv)
        name = args.command
        if name != "check-config" and _needs_database(args, extensions) and (found := storage_problems(settings)):
            raise ConfigError("; ".join(found))  # check-config lists them among its lines
        if not _may_create(args) and _needs_database(args, extensions) and embedded_database_missing(settings):
            raise ConfigError(missing_database(settings))
        if name not in ("check-config", "serve") and _needs_database(args, extensions):
            before = _primary_before(settings, extensions)
            if refused := _refused_schema(name, before):
                raise ConfigError(refused)
        return runs[args.command](args, settings, extensions)
    except ConfigError as exc:
        return _fail(name, f"configuration error: {exc}", 2)
    except LoadError as exc:
        return _fail(name, str(exc), 1)
    except AfterCommit as exc:  # committed, then a step failed or was interrupted: the truth, exit 3
        return _fail(name, exc.message, AfterCommit.EXIT_STATUS)
    except StorageError as exc:
        return _fail(name, _storage_failure(name, exc, settings, extensions, before), 1)
    except KeyboardInterrupt:
        return _fail(name, f"interrupted{_rolled_back(name)}", 130)
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        cause = _storage_cause(exc)  # SQLAlchemy's PendingRollbackError after a connection lost mid-command
        if cause is not None:
            return _fail(name, _storage_failure(name, cause, settings, extensions, before), 1)
        shown = bool(os.environ.get(TRACEBACK_ENV))
        culprit = _culprit(exc, args, extensions)
        if culprit is not None:  # a plugin's code failed: named, with its frame, never as the server's bug
            see = "" if shown else f"; set {TRACEBACK_ENV}=1 to see the traceback"
            return _fail(name, f"{culprit.describe(exc)}{see}", 1, exc_info=shown)
        return _fail(name, f"unexpected {type(exc).__name__}: {_first_line(exc)} (a bug: please report it with "
                           f"the command line{'' if shown else f'; set {TRACEBACK_ENV}=1 to see the traceback'})",
                     1, exc_info=shown)


def _culprit(exc: BaseException, args: argparse.Namespace | None, extensions: Extensions | None) -> Blame | None:
    """The plugin an unexpected exception came from: the innermost frame of a plugin's code on its traceback, else
    the plugin whose load format `load` was calling (a call that failed before entering it: a wrong signature)."""
    found = blame(exc)
    if found is not None or args is None or extensions is None or args.command != "load":
        return found
    if not isinstance(exc, TypeError) or _raised_in(exc) not in FORMAT_CALLERS:
        return None  # the server's own code failed on the way (a storage step, the report): not the plugin's
    plugin = extensions.format_plugins.get(getattr(args, "format", ""))
    return None if plugin is None else Blame(plugin, f"the call of its load format {args.format!r}")


#: the modules whose frame calls a load format's `load` (`load` itself, the shim of the plugin API 1.0 form): a
#: TypeError raised there, in no plugin's frame, is a call that failed before entering the format
FORMAT_CALLERS = ("server.cli.data", "server.extensions")


def _raised_in(exc: BaseException) -> str:
    """The module of the innermost frame of `exc`'s traceback."""
    frames = list(traceback.walk_tb(exc.__traceback__))
    return str(frames[-1][0].f_globals.get("__name__", "")) if frames else ""


WRITERS = ("load", "demo", "migrate", "versions", "accounts", "data-sources")


def _rolled_back(name: str) -> str:
    """What a failure before the commit left: nothing (the transaction rolled back), for a command that writes."""
    return ": nothing was written (its transaction was rolled back)" if name in WRITERS else ""


def _storage_cause(exc: BaseException) -> StorageError | None:
    """The storage error behind `exc` (its cause or context), when one is."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, StorageError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _storage_failure(name: str, exc: StorageError, settings: Settings | None, extensions: Extensions | None,
                     before: DatabaseCheck | None) -> str:
    """A database failure in one line: the real cause (a full disk, another writer, a connection lost, no schema,
    no privilege) and what to do, never a request to report a bug for a known condition."""
    rolled = _rolled_back(name)
    if isinstance(exc, StorageFull):
        return (f"the disk holding the database is full ({_first_line(exc)}){rolled}; free space (or raise the "
                "quota), then run it again")
    if isinstance(exc, StorageBusy):
        return (f"another writer held the database's lock longer than this command waits ({_first_line(exc)})"
                f"{rolled}; run it again once that write is done")
    unready = _schema_unready(settings, extensions, before)
    if unready is not None:  # a command run before `migrate`: its tables are missing, not forbidden
        return f"{unready} ({_first_line(exc)})"
    if isinstance(exc, StorageUnavailable) and exc.repeatable:  # reached, then dropped mid-command
        return (f"the connection to the database ({_safe_url(settings)}) was lost ({_first_line(exc)}){rolled}; "
                "check that the database server runs, then run it again")
    if isinstance(exc, StorageUnavailable):  # the database cannot be opened or reached
        return (f"the database ({_safe_url(settings)}) cannot be opened or reached: {_first_line(exc)}{rolled}; "
                "check database.url (or --database) and that the database server runs")
    return (f"the database ({_safe_url(settings)}) refused: {_first_line(exc)}{rolled}; check the role's privileges "
            "(migrate, load and demo need the writer role)")

