"""bench/app_floor.py's targets never sent before: each distinct target once, none of the warm-up's, and any
answer that is not 2xx stops the measure."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bench.app_floor import _first_sight


class _App:
    def __init__(self, status: int = 200) -> None:
        self.paths: list[str] = []
        self.status = status

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.paths.append(scope["path"] + "?" + scope["query_string"].decode())
        await send({"type": "http.response.start", "status": self.status, "headers": []})


@pytest.mark.parametrize("paths, requests, measured", [
    pytest.param([f"/fhir/Location/{i}?" for i in range(300)] * 3, 2000, 100, id="repeats-sent-once"),
    pytest.param([f"/fhir/Location/{i}?" for i in range(1000)], 50, 50, id="at-most-requests"),
    pytest.param(["/fhir/metadata?"] * 10, 2000, None, id="one-target-none"),
    pytest.param([f"/fhir/Location/{i}?" for i in range(150)], 2000, None, id="all-warm-none"),
])
def test_targets_never_sent_before_are_sent_once_each(paths: list[str], requests: int,
                                                      measured: int | None) -> None:
    app = _App()
    result = asyncio.run(_first_sight(app, paths, "t", requests))
    assert (result is None) == (measured is None)
    if measured is not None:
        warm, fresh = app.paths[:200], app.paths[200:]
        assert len(fresh) == measured == len(set(fresh)) and not set(warm) & set(fresh)


def test_an_answer_that_is_not_2xx_stops_it() -> None:
    with pytest.raises(SystemExit, match="404"):
        asyncio.run(_first_sight(_App(404), [f"/fhir/Location/{i}?" for i in range(300)], "t", 10))
