"""The access and audit lines an app writes (server.telemetry.records), captured and parsed."""
from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from starlette.applications import Starlette


class Recorded:
    """What the app's recorder wrote since it was captured: the raw lines, or parsed (JSON) by logger."""

    def __init__(self, app: Starlette) -> None:
        self.recorder = app.state.recorder
        self.recorder.flush()
        self.buffer, self.previous = io.StringIO(), self.recorder.stream
        self.recorder.stream = self.buffer

    def raw(self) -> list[str]:
        self.recorder.flush()
        return self.buffer.getvalue().splitlines()

    def of(self, logger: str) -> list[dict[str, Any]]:
        return [line for line in map(json.loads, self.raw()) if line.get("logger") == logger]

    def release(self) -> None:
        self.recorder.flush()
        self.recorder.stream = self.previous


@contextmanager
def recording(app: Starlette) -> Iterator[Recorded]:
    recorded = Recorded(app)
    try:
        yield recorded
    finally:
        recorded.release()
