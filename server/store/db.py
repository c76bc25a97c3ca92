"""Database engines for SQLite (embedded default) and PostgreSQL (production)."""
from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from server.settings import Settings


def normalize_url(url: str) -> str:
    """postgresql://... means psycopg 3 here."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def create_db_engine(settings: Settings, *, writing: bool = False) -> Engine:
    """The serving engine has the per-statement timeout; a writing one (migrate, load, demo) has none."""
    url = normalize_url(settings.database_url)
    if url.startswith("sqlite"):
        path = make_url(url).database
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        return engine
    if writing:
        return create_engine(url, pool_pre_ping=True,
                             connect_args={"options": "-c statement_timeout=0", "connect_timeout": 5})
    # serving: a connection is not pinged at checkout (a round trip per request): a dropped one fails its
    # request once, which the endpoint repeats (reads are safe to repeat) on a fresh connection
    return create_engine(
        url,
        pool_size=settings.database.pool_size,
        connect_args={"options": f"-c statement_timeout={settings.database.statement_timeout_ms}",
                      "connect_timeout": 5},
    )


def create_schema(engine: Engine) -> None:
    """Bring the schema to the newest migration (creates it on an empty database)."""
    from server.store.migrate import upgrade

    upgrade(engine)

