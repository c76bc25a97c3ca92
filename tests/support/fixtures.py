"""Fixture factories the test modules share, so that no module copies them: the server context a module builds
over its own data (on each backend, disposed after the module) and a client of the app over it. A module
declares `ctx = context_fixture(build)` and `app_client = client_fixture()` (any attribute name works: pytest
names a fixture by the attribute that holds it)."""
from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.engine.context import ServerContext
from tests.support.contexts import bearer

Build = Callable[[str, Path], "ServerContext | AbstractContextManager[ServerContext]"]


def context_fixture(build: Build) -> Any:
    """A module fixture: the context `build(backend_url, var)` makes, on each backend. A context manager is
    entered and left; a plain context has its pool disposed after the module."""
    @pytest.fixture(scope="module")
    def ctx(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerContext]:
        made = build(backend_url, tmp_path_factory.mktemp("var"))
        if isinstance(made, AbstractContextManager):
            with made as context:
                yield context
            return
        yield made
        made.db.dispose()

    return ctx


def client_fixture(*, authorized: bool = False, context: str = "ctx") -> Any:
    """A module fixture: a client of the app over the module's `ctx` (or the context fixture named `context`).
    Without `authorized` it sends no token (each request brings its own: tests.support.contexts.bearer); with it,
    a token of the configured permission and no account or roots claim."""
    def app_client(**fixtures: ServerContext) -> Iterator[TestClient]:
        ctx = fixtures[context]
        with TestClient(create_app(ctx.settings, context=ctx), base_url="http://testserver") as client:
            if authorized:
                client.headers.update(bearer(ctx.settings))
            yield client

    # the context is an argument pytest sees (not looked up at run time), so that the client is made again with
    # it for each backend
    app_client.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(context, inspect.Parameter.KEYWORD_ONLY, annotation=ServerContext)])
    return pytest.fixture(scope="module")(app_client)
