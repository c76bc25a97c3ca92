"""The served worker's process (server.asgi.create, what `serve` runs in each worker): worker threads yield the
interpreter to the loop every millisecond, and the heap built at start-up is out of the cyclic collector's reach, so a
full collection while a costly search builds its statement stops the loop for the young objects only (issue 39: with
~170,000 start-up objects scanned, each full collection held /healthz 80-130 ms; frozen, 15-30 ms)."""
from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from server import asgi


@pytest.fixture
def worker_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    settings = tmp_path / "settings.yaml"
    settings.write_text(f"server:\n  data_dir: {tmp_path}/var\n  audit_log: false\n", encoding="utf-8")
    monkeypatch.setenv("ORGUNIT_FHIR_SETTINGS", str(settings))
    monkeypatch.setenv("ORGUNIT_FHIR_DATABASE_URL", f"sqlite:///{tmp_path / 'worker.db'}")
    interval = sys.getswitchinterval()
    gc.unfreeze()
    try:
        yield
    finally:
        gc.unfreeze()
        sys.setswitchinterval(interval)


def test_the_worker_freezes_its_start_up_heap_and_yields_to_the_loop(worker_process: None) -> None:
    assert gc.get_freeze_count() == 0
    asgi.create()
    assert gc.get_freeze_count() > 10_000  # the modules, the registry, the app: frozen once built
    assert sys.getswitchinterval() == pytest.approx(asgi.SWITCH_INTERVAL_S)
