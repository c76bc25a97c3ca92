"""ASGI entry for uvicorn (one per worker): settings from $ORGUNIT_FHIR_SETTINGS / $ORGUNIT_FHIR_DATABASE_URL.

`orgunit-fhir serve` sets those; run under another server (`uvicorn --factory server.asgi:create`), the app
configures its own logging from the settings (server.access_log, server.audit_log)."""
from __future__ import annotations

from starlette.applications import Starlette

from server.app import create_app
from server.telemetry.logs import configure_logging
from server.settings import load_settings

def create() -> Starlette:
    settings = load_settings()
    configure_logging(settings)
    return create_app(settings)
