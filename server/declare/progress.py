"""A one-line progress display on a terminal (nothing when stderr is not a terminal)."""
from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, label: str, total: int | None = None, stream: TextIO = sys.stderr,
                 every: float = 0.25) -> None:
        self.label, self.total, self.stream, self.every = label, total, stream, every
        self.enabled = stream.isatty()
        self.started = self.shown = time.monotonic()
        self.count = 0

    def __call__(self, count: int) -> None:
        self.count = count
        now = time.monotonic()
        if self.enabled and now - self.shown >= self.every:
            self.shown = now
            self._show(now)

    def _show(self, now: float) -> None:
        rate = self.count / max(now - self.started, 1e-9)
        of = f"/{self.total:,} ({100 * self.count / self.total:.0f}%)" if self.total else ""
        self.stream.write(f"\r{self.label}: {self.count:,}{of} at {rate:,.0f}/s ")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._show(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()
