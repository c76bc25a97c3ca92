"""Fixtures of the access tests."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.engine.context import ServerContext
from tests.support.contexts import pyramid_context


@pytest.fixture
def pyramid_api(migrated_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, ServerContext]]:
    """A client of a server holding the small pyramid alone, in a database of its own (a test may write to it)."""
    ctx = pyramid_context(migrated_url, tmp_path)
    with TestClient(create_app(ctx.settings, context=ctx), base_url="http://testserver") as client:
        yield client, ctx
    ctx.db.dispose()
