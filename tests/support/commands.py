"""The command line run in this test process: `server.cli.main.main`, which the console script calls, with its exit
status and outputs as `tests.support.live.cli` gives them, without a new interpreter's start (about 1.5 s of imports
each). A test of the process itself (the console script, its environment, signals, `serve`) runs `live.cli` or
`live.live_server`."""
from __future__ import annotations

import io
import logging
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from unittest.mock import patch

from server.cli.main import main


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def _loggers() -> list[logging.Logger]:
    return [logging.root, *(logger for logger in logging.Logger.manager.loggerDict.values()
                            if isinstance(logger, logging.Logger))]


@contextmanager
def logging_kept(owned: Callable[[logging.Handler], bool] = lambda handler: False) -> Iterator[None]:
    """The logging tree's handlers, levels and propagation as they were (a command run in process configures
    logging for the whole process: server.telemetry.logs binds a handler to the stderr of that moment); the
    handlers `owned` by someone else (pytest's, which it adds and removes around each phase) are left to them."""
    before = {id(logger): (list(logger.handlers), logger.level, logger.propagate, logger.disabled)
              for logger in _loggers()}
    try:
        yield
    finally:
        for logger in _loggers():
            handlers, level, propagate, disabled = before.get(id(logger), ([], logging.NOTSET, True, False))
            kept = [*(h for h in handlers if not owned(h)), *(h for h in logger.handlers if owned(h))]
            if logger.handlers != kept:
                logger.handlers[:] = kept
            if logger.level != level:
                logger.setLevel(level)  # clears every logger's cache: only where it changed
            logger.propagate, logger.disabled = propagate, disabled


TIMEOUT_S = 300  # a command stuck (behind another writer's lock, say) fails its test instead of hanging its worker


@contextmanager
def _within(seconds: int, what: str) -> Iterator[None]:
    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"{what} still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def cli(*args: str) -> Ran:
    """As `live.cli` runs it: without the ORGUNIT_FHIR_* variables of the test's environment (a database named
    there is never the one a test writes), within TIMEOUT_S."""
    out, err = io.StringIO(), io.StringIO()
    theirs = {name: value for name, value in os.environ.items() if not name.startswith("ORGUNIT_FHIR_")}
    with patch.dict(os.environ, theirs, clear=True), logging_kept(), redirect_stdout(out), redirect_stderr(err), \
            _within(TIMEOUT_S, f"orgunit-fhir {' '.join(args)}"):
        try:
            status = main(list(args))
        except SystemExit as exc:  # argparse's --help or a usage error, as the process would exit
            status = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return Ran(status, out.getvalue(), err.getvalue())


def run_cli(*args: str, settings: Path, database: str) -> str:
    """What the command printed; a failure is the test's, with what the command said."""
    done = cli(*args, "--settings", str(settings), "--database", database)
    if done.returncode != 0:
        raise AssertionError(f"orgunit-fhir {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout
