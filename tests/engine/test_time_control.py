"""Time under the tests' control (issue 42): no test raises the server's freshness interval to dodge a re-read, nor
sleeps for one; they hold its clock (tests/support/clock.py) or call `Freshness.expire()`."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for p in TESTS.rglob("*.py") if "node_modules" not in p.parts and p != Path(__file__).resolve())


def _interval_writes(tree: ast.AST) -> list[int]:
    targets = [t for node in ast.walk(tree) if isinstance(node, ast.Assign | ast.AugAssign)
               for t in (node.targets if isinstance(node, ast.Assign) else [node.target])]
    found = [t for target in targets for t in ast.walk(target)
             if isinstance(t, ast.Attribute) and t.attr == "interval_s"]
    return sorted(t.lineno for t in found)


def _freshness_sleeps(text: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), 1)
            if "sleep(" in line and ("once a second" in line or "freshness" in line.lower())]


def test_no_test_changes_the_freshness_interval_or_sleeps_for_it() -> None:
    found = {}
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        if offending := _interval_writes(ast.parse(text)) + _freshness_sleeps(text):
            found[str(path.relative_to(TESTS))] = offending
    assert found == {}, "hold the clock (tests.support.clock) or call Freshness.expire(), never sleep or widen"


@pytest.mark.parametrize("source, lines", [
    pytest.param("ctx.freshness.interval_s = 3600\n", [1], id="assigned"),
    pytest.param("a, ctx.freshness.interval_s = 1, 3600.0\n", [1], id="in-a-tuple"),
    pytest.param("ctx.freshness.interval_s += 5\n", [1], id="augmented"),
    pytest.param("x = ctx.freshness.interval_s\n", [], id="read-only"),
])
def test_the_interval_guard_itself(source: str, lines: list[int]) -> None:
    assert _interval_writes(ast.parse(source)) == lines
