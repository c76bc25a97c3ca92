from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from server.access.mint import mint_token
from server.app import create_app
from server.engine.context import ServerContext
from tests.support.contract import contract_context, subjects


@pytest.fixture(scope="module")
def contract_ctx(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerContext]:
    """Every subject's plugins enabled, every subject's sample data loaded, on each backend."""
    with contract_context(backend_url, tmp_path_factory.mktemp("var"), subjects()) as ctx:
        yield ctx


@pytest.fixture(scope="module")
def api(contract_ctx: ServerContext) -> Iterator[TestClient]:
    """A client whose token sees the whole account of the sample data."""
    with TestClient(create_app(contract_ctx.settings, context=contract_ctx), base_url="http://testserver") as client:
        client.headers["Authorization"] = f"Bearer {mint_token(contract_ctx.settings)}"
        yield client
