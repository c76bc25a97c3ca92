"""Waiting for what another process does "soon" (writes a log line, accepts a request, sees a connection go): looked
at until it is so, never after a fixed sleep that a loaded machine outlasts; the bound is how long a test may wait
before it fails, not how fast the machine is."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(look: Callable[[], T | None], what: Callable[[], str], within: float = 30, every: float = 0.05) -> T:
    """What `look` finds once it finds something (not None); fails after `within` seconds saying `what()`."""
    deadline = time.monotonic() + within
    while True:
        found = look()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within:g} s: {what()}")
        time.sleep(every)
