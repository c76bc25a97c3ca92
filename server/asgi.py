"""ASGI entry for uvicorn (one per worker): settings from $ORGUNIT_FHIR_SETTINGS / $ORGUNIT_FHIR_DATABASE_URL."""
from __future__ import annotations

from starlette.applications import Starlette

from server.app import create_app
from server.settings import load_settings


def create() -> Starlette:
    return create_app(load_settings())
