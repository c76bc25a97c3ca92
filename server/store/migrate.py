"""Schema migrations (alembic) for SQLite and PostgreSQL, and the check that `serve` makes."""
from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine

MIGRATIONS = Path(__file__).parent / "migrations"


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    with engine.begin() as conn:
        command.upgrade(_config(conn), revision)


def revision(engine: Engine, message: str) -> None:
    """Autogenerate a new migration from the models (developers only)."""
    with engine.begin() as conn:
        command.revision(_config(conn), message=message, autogenerate=True)


def is_current(engine: Engine) -> bool:
    return current_revision(engine) == head_revision()
