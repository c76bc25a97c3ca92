"""Time under the tests' control: the server re-reads what the database holds once a second (server.storage.freshness);
a test that must not meet a re-read in the middle of what it watches holds that clock still, and one that must see a
change at once calls `Freshness.expire()` — never a sleep, never a longer interval."""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from server.storage.freshness import Freshness


def hold(freshness: Freshness) -> None:
    """From now on the server looks at the database once, at the next request, then only after `expire()`."""
    still = time.monotonic()
    freshness.expire()
    freshness.clock = lambda: still


@contextmanager
def held(freshness: Freshness) -> Iterator[None]:
    """Within the block the server looks at the database once, at the next request, then not again (until
    `expire()`): what a test captures or compares is never cut by a re-read, however slow the machine."""
    clock = freshness.clock
    hold(freshness)
    try:
        yield
    finally:
        freshness.clock = clock
