"""ASGI entry for uvicorn (one per worker): settings from $ORGUNIT_FHIR_SETTINGS / $ORGUNIT_FHIR_DATABASE_URL.

`orgunit-fhir serve` sets those; run under another server (`uvicorn --factory server.asgi:create`), the app
configures its own logging from the settings (server.access_log, server.audit_log)."""
from __future__ import annotations

import gc
import sys

from starlette.applications import Starlette

from server.app import create_app
from server.telemetry.logs import configure_logging
from server.settings import load_settings

SWITCH_INTERVAL_S = 0.001  # worker threads (a costly search's SQL, a page's HTML) yield the interpreter to the loop
# this often (Python's default: 5 ms, which a probe waiting on several handoffs feels as tens of ms)


def create() -> Starlette:
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    settings = load_settings()
    configure_logging(settings)
    app = create_app(settings)
    # the start-up heap (modules, registry, app: ~170,000 objects) out of the cyclic collector's reach: a full
    # collection, which a costly search's statement triggers in a worker thread and which holds the interpreter
    # throughout, then scans the young objects only (issue 39: /healthz held 80-130 ms by each, then 15-30 ms)
    gc.collect()
    gc.freeze()
    return app
