from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

from server.app import create_app
from server.access.mint import mint_token
from server.engine.context import ServerContext, create_context
from server.settings import Settings, parse_settings
from server.storage.db import create_db_engine
from tests.support import pg
from tests.support.commands import logging_kept
from tests.support.contexts import make_settings, migrate, pyramid_context
from tests.support.schedule import Recorder, costliest_first, recorded


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-costs", action="store_true",
                     help="write the seconds each test file took into tests/costs.json (tests/support/schedule.py)")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--record-costs"):
        config.pluginmanager.register(Recorder(), "record-costs")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The costliest files first: `make test`'s workers take whole files in this order (tests/support/schedule.py)."""
    items[:] = costliest_first(items, recorded())


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """The logging tree's handlers and levels as they were before the test: a test that runs the command line in
    process has it configure logging (server.telemetry.logs), which binds a handler to the stderr pytest captured
    for that test; left in place, a later test's log lines go to that closed file ("--- Logging error ---").
    pytest's own capture handlers, which it adds and removes around each phase, are left to it."""
    with logging_kept(owned=lambda handler: type(handler).__module__.startswith("_pytest")):
        yield


@pytest.fixture(autouse=True)
def _no_template_refused(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every search the suite runs in process is compared with its shape's template on the template's first uses
    (server.engine.templates): a refused template is a value that reached a statement other than through the
    search's conditions, a test failure wherever it happens (but where a test makes one on purpose)."""
    refused: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = refused.append  # type: ignore[method-assign]
    logger = logging.getLogger("server.engine.templates")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
    if refused and request.node.get_closest_marker("refuses_templates") is None:
        pytest.fail(f"{refused[0].getMessage()} ({getattr(refused[0], 'shape', '')})")


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An SQLite file at the newest migration; tests copy it instead of migrating again."""
    path = tmp_path_factory.mktemp("template") / "migrated.db"
    engine = create_db_engine(parse_settings({"database": {"url": f"sqlite:///{path}"}}))
    migrate(engine)
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    engine.dispose()
    return path


@pytest.fixture(scope="session", autouse=True)
def _drop_pg_templates() -> Iterator[None]:
    yield
    if pg._templates:
        pg.drop_templates()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'test.db'}"
    else:
        with pg.scratch_database() as url:
            yield url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def migrated_url(request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path) -> Iterator[str]:
    """A fresh database already at the newest schema, on each backend."""
    if request.param == "sqlite":
        shutil.copyfile(sqlite_template, tmp_path / "test.db")
        yield f"sqlite:///{tmp_path / 'test.db'}"
    else:
        with pg.scratch_database(migrated=True) as url:
            yield url


@pytest.fixture
def fresh_ctx(migrated_url: str, tmp_path: Path) -> Iterator[Callable[..., ServerContext]]:
    """Server contexts over one fresh database at the newest schema, each with the Location plugin's `config`
    given as keywords (none: the defaults): one database seen by servers of different settings."""
    made: list[ServerContext] = []

    def make(**location: Any) -> ServerContext:
        plugins = {"plugins": {"location": {"config": location}}} if location else {}
        ctx = create_context(make_settings(migrated_url, tmp_path, **plugins))
        made.append(ctx)
        return ctx

    yield make
    for ctx in made:
        ctx.db.dispose()


@pytest.fixture
def settings(migrated_url: str, tmp_path: Path) -> Settings:
    return make_settings(migrated_url, tmp_path, auth={"secret": "test-secret-with-at-least-32-bytes!!"})


@pytest.fixture
def engine(settings: Settings) -> Iterator[Engine]:
    eng = create_db_engine(settings)
    yield eng
    eng.dispose()


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def backend_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh database on each backend, shared by one test module (populate it in a module fixture)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('db') / 'module.db'}"
    else:
        with pg.scratch_database() as url:
            yield url


@pytest.fixture(scope="module")
def small_ctx(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerContext]:
    """A server context over the small hand-made pyramid, on each backend."""
    ctx = pyramid_context(backend_url, tmp_path_factory.mktemp("var"))
    yield ctx
    ctx.db.dispose()


@pytest.fixture(scope="module")
def client(small_ctx: ServerContext) -> Iterator[TestClient]:
    app = create_app(small_ctx.settings, context=small_ctx)
    with TestClient(app, base_url="http://testserver") as c:
        c.headers["Authorization"] = f"Bearer {mint_token(small_ctx.settings)}"
        yield c


@pytest.fixture
def closing_client() -> Iterator[Callable[[Any], TestClient]]:
    """Make TestClients whose database pools are disposed at teardown, before the database fixtures
    (list this fixture after them) drop their databases."""
    made: list[TestClient] = []

    def make(app: Any) -> TestClient:
        made.append(TestClient(app))
        return made[-1]

    yield make
    for client in made:
        client.app.state.ctx.db.dispose()
