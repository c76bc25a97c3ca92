"""The order in which `make test` hands test files to its workers: the costliest first (longest processing time
first), so that no worker starts a long file while the others run out of work.

pytest-xdist's `--dist loadfile` gives each worker whole files from a queue; by default it orders that queue by the
number of tests in a file, which put the browser's files (a few tests, minutes of setup) last: one worker ran them
alone at the end. `make test` turns that off (`--no-loadscope-reorder`) and the suite's collection order is this
one: files by the seconds they took when last recorded (`tests/costs.json`), a file not recorded yet first (its
cost unknown, it must not be the tail). Within a file the order is pytest's.

`make test ARGS=--record-costs` writes the seconds each file took in that run (setup, call and teardown of every
test) into `tests/costs.json`: a partial run updates the files it ran, and files gone are dropped."""
from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

COSTS = Path(__file__).resolve().parents[1] / "costs.json"


def recorded(path: Path = COSTS) -> dict[str, float]:
    """The seconds each test file took when last recorded; nothing when no record is readable."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(name): float(seconds) for name, seconds in found.items()} if isinstance(found, dict) else {}


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def costliest_first(items: list[pytest.Item], costs: Mapping[str, float]) -> list[pytest.Item]:
    """The items, their files ordered by recorded cost (unrecorded first), each file's items in their own order."""
    files: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        files[file_of(item.nodeid)].append(item)
    ordered = sorted(files, key=lambda name: (name in costs, -costs.get(name, 0.0)))
    return [item for name in ordered for item in files[name]]


def totals(reports: Iterable[pytest.TestReport]) -> dict[str, float]:
    """Seconds per test file over these reports (every phase of every test)."""
    seconds: dict[str, float] = defaultdict(float)
    for report in reports:
        seconds[file_of(report.nodeid)] += report.duration
    return {name: round(value, 1) for name, value in sorted(seconds.items())}


class Recorder:
    """Keeps every test report of the run (in the controller, xdist's workers report to it) and writes the files'
    totals at the end of a run that passed."""

    def __init__(self, path: Path = COSTS) -> None:
        self.path = path
        self.reports: list[pytest.TestReport] = []

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.reports.append(report)

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if exitstatus != 0 or hasattr(session.config, "workerinput"):
            return
        root = self.path.parent.parent
        kept = {name: seconds for name, seconds in recorded(self.path).items() if (root / name).is_file()}
        merged = dict(sorted({**kept, **totals(self.reports)}.items()))
        self.path.write_text(json.dumps(merged, indent=1) + "\n", encoding="utf-8")
