"""The tests' one way to wait for what another process does "soon" (tests/support/waiting.py, tests/support/deploy.py
`logged`): what is found once it is so, and a failure that says what never came."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.support.deploy import logged
from tests.support.waiting import eventually


def test_what_is_so_at_once_is_found_at_once() -> None:
    assert eventually(lambda: "here", lambda: "never", within=0) == "here"


def test_what_comes_later_is_waited_for() -> None:
    looks = iter([None, None, 0])
    assert eventually(lambda: next(looks), lambda: "never", every=0) == 0  # a falsy find is a find


def test_what_never_comes_fails_saying_what() -> None:
    with pytest.raises(AssertionError, match=r"not within 0.1 s: the line never came"):
        eventually(lambda: None, lambda: "the line never came", within=0.1)


def test_a_log_is_read_in_whole_lines_until_they_hold_what_is_looked_for(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    log.write_text("first line\nsecond li", encoding="utf-8")  # a line being written
    writer = threading.Timer(0.2, lambda: log.write_text("first line\nsecond line\n", encoding="utf-8"))
    writer.start()
    try:
        assert logged(log, lambda text: "second li" in text) == "first line\nsecond line\n"
    finally:
        writer.join()


def test_a_log_that_never_holds_it_fails_with_what_it_holds(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    log.write_text("first line\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="access.log never logged what was looked for:\nfirst line"):
        logged(log, lambda text: "second" in text, within=0.1)
