"""The order `make test` hands test files to its workers (tests/support/schedule.py): the costliest first, a file
never recorded before them all, each file's tests in their own order; `--record-costs` writes what a run measured."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.schedule import Recorder, costliest_first, recorded, totals


@dataclass(frozen=True)
class Node:
    nodeid: str


@dataclass(frozen=True)
class Report:
    nodeid: str
    duration: float


class Controller:
    """The configuration of the run that hands out the files (xdist's controller, or a run without workers)."""


@dataclass(frozen=True)
class Worker:
    workerinput: dict[str, Any]


@dataclass(frozen=True)
class Session:
    config: Any


def ids(items: list[Any]) -> list[str]:
    return [item.nodeid for item in items]


COLLECTED = ["a/test_cheap.py::t1", "a/test_cheap.py::t2[x]", "b/test_dear.py::t1", "b/test_new.py::t1",
             "a/test_cheap.py::t2[y]", "c/test_mid.py::t1"]


@pytest.mark.parametrize(("costs", "expected"), [
    pytest.param({"a/test_cheap.py": 1.0, "b/test_dear.py": 90.0, "b/test_new.py": 0.0, "c/test_mid.py": 5.0},
                 ["b/test_dear.py::t1", "c/test_mid.py::t1", "a/test_cheap.py::t1", "a/test_cheap.py::t2[x]",
                  "a/test_cheap.py::t2[y]", "b/test_new.py::t1"], id="costliest-first-each-file-whole"),
    pytest.param({"a/test_cheap.py": 1.0, "b/test_dear.py": 90.0, "c/test_mid.py": 5.0},
                 ["b/test_new.py::t1", "b/test_dear.py::t1", "c/test_mid.py::t1", "a/test_cheap.py::t1",
                  "a/test_cheap.py::t2[x]", "a/test_cheap.py::t2[y]"], id="a-file-never-recorded-first"),
    pytest.param({}, ["a/test_cheap.py::t1", "a/test_cheap.py::t2[x]", "a/test_cheap.py::t2[y]",
                      "b/test_dear.py::t1", "b/test_new.py::t1", "c/test_mid.py::t1"], id="no-record-files-as-found"),
])
def test_files_are_handed_out_costliest_first(costs: dict[str, float], expected: list[str]) -> None:
    assert ids(costliest_first([Node(n) for n in COLLECTED], costs)) == expected


@pytest.mark.parametrize("text", [
    pytest.param(None, id="missing"),
    pytest.param("{not json", id="half-written"),
    pytest.param("[1, 2]", id="not-an-object"),
])
def test_an_unreadable_record_orders_nothing(tmp_path: Path, text: str | None) -> None:
    path = tmp_path / "costs.json"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    assert recorded(path) == {}


def test_totals_add_every_phase_of_every_test_of_a_file() -> None:
    reports = [Report("a/test_x.py::t[1]", 0.25), Report("a/test_x.py::t[1]", 2.0), Report("a/test_x.py::u", 0.3),
               Report("b/test_y.py::t", 1.0)]
    assert totals(reports) == {"a/test_x.py": 2.5, "b/test_y.py": 1.0}


def _run(tmp_path: Path, reports: list[Report], status: int = 0, config: Any = None) -> dict[str, float]:
    recorder = Recorder(tmp_path / "tests" / "costs.json")
    for report in reports:
        recorder.pytest_runtest_logreport(report)  # type: ignore[arg-type]
    recorder.pytest_sessionfinish(Session(config or Controller()), status)  # type: ignore[arg-type]
    return recorded(recorder.path)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A checkout with three test files, their costs recorded before, and one record of a file since deleted."""
    for name in ("test_a.py", "test_b.py", "test_c.py"):
        (tmp_path / "tests" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "tests" / name).write_text("", encoding="utf-8")
    (tmp_path / "tests" / "costs.json").write_text(json.dumps(
        {"tests/test_a.py": 10.0, "tests/test_b.py": 20.0, "tests/test_c.py": 30.0, "tests/test_gone.py": 40.0}))
    return tmp_path


@pytest.mark.parametrize(("status", "config", "expected"), [
    pytest.param(0, Controller(), {"tests/test_a.py": 3.0, "tests/test_b.py": 20.0, "tests/test_c.py": 30.0},
                 id="a-partial-run-updates-its-files-and-drops-deleted-ones"),
    pytest.param(1, Controller(), {"tests/test_a.py": 10.0, "tests/test_b.py": 20.0, "tests/test_c.py": 30.0,
                               "tests/test_gone.py": 40.0}, id="a-failed-run-records-nothing"),
    pytest.param(0, Worker(workerinput={}), {"tests/test_a.py": 10.0, "tests/test_b.py": 20.0,
                                              "tests/test_c.py": 30.0, "tests/test_gone.py": 40.0},
                 id="a-worker-leaves-it-to-the-controller"),
])
def test_recording_a_run(tree: Path, status: int, config: Any, expected: dict[str, float]) -> None:
    assert _run(tree, [Report("tests/test_a.py::t", 1.0), Report("tests/test_a.py::u", 2.0)], status, config) \
        == expected
