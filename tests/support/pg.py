"""The local PostgreSQL server for tests: started when it is down, one throwaway database per use."""
from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from sqlalchemy import create_engine

from server.extensions import load_extensions
from server.settings import parse_settings

ADMIN_URL = os.environ.get("ORGUNIT_FHIR_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def _reachable() -> bool:
    try:
        with psycopg.connect(ADMIN_URL, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


def ensure_running() -> None:
    if _reachable():
        return
    versions = sorted(p.name for p in Path("/etc/postgresql").glob("*")) if Path("/etc/postgresql").exists() else []
    if versions:
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main", "start"], check=False)
    for _ in range(40):
        if _reachable():
            return
        time.sleep(0.25)
    raise RuntimeError(f"PostgreSQL is not reachable at {ADMIN_URL} and could not be started")


_templates: dict[str, str] = {}


def migrated_template() -> str:
    """A database at the newest migration, made once per test session; scratch databases copy it."""
    head = "head"
    if head not in _templates:
        name = f"oft_template_{head}_{os.getpid()}"
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        engine = create_engine(ADMIN_URL.replace("postgresql://", "postgresql+psycopg://").rsplit("/", 1)[0] + f"/{name}")
        load_extensions(parse_settings({})).schema.upgrade(engine)
        engine.dispose()
        _templates[head] = name
    return _templates[head]


def drop_templates() -> None:
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        for name in _templates.values():
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    _templates.clear()


@contextmanager
def scratch_database(migrated: bool = False) -> Iterator[str]:
    """A new empty database, or with `migrated` one already at the newest schema (copied from a template)."""
    ensure_running()
    name = f"oft_{uuid.uuid4().hex[:12]}"
    template = f' TEMPLATE "{migrated_template()}"' if migrated else ""
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{template}')
    try:
        yield ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
