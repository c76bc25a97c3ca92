"""A test client of a server with one more plugin (a provider or operations under test), holding a token."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine
from starlette.testclient import TestClient

from server.access.mint import mint_token
from server.app import create_app
from server.settings import Settings


@contextmanager
def plugin_api(settings: Settings, db: Engine, name: str, plugin: object) -> Iterator[TestClient]:
    """The client of `create_app(settings)` on `db` with `plugin` registered as `name`, its requests bearing a token
    of these settings."""
    with TestClient(create_app(settings, extra_plugins=[(name, plugin)], db=db), base_url="http://testserver") as client:
        client.headers["Authorization"] = f"Bearer {mint_token(settings)}"
        yield client
