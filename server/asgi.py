"""ASGI entry for uvicorn (one per worker): settings from $ORGUNIT_FHIR_SETTINGS / $ORGUNIT_FHIR_DATABASE_URL.

`orgunit-fhir serve` sets those; run under another server (`uvicorn --factory server.asgi:create`), the app
configures its own logging from the settings, and $ORGUNIT_FHIR_ACCESS_LOG=0 turns the access log off."""
from __future__ import annotations

import os

from starlette.applications import Starlette

from server.app import create_app
from server.telemetry.logs import configure_logging
from server.settings import load_settings

ACCESS_LOG_ENV = "ORGUNIT_FHIR_ACCESS_LOG"


def create() -> Starlette:
    settings = load_settings()
    configure_logging(settings, access_log=os.environ.get(ACCESS_LOG_ENV, "1") != "0")
    return create_app(settings)
