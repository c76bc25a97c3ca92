"""The server the contract suite checks: every subject's plugins enabled over one database, each subject's sample
data loaded in turn, bodies pre-rendered; and the databases it runs on (an SQLite file, a scratch database on a
PostgreSQL server)."""
from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from server.contract.samples import Subject
from server.engine.context import ServerContext, create_context
from server.settings import Settings, parse_settings
from server.storage.prerender import refresh

SECRET = "orgunit-fhir-contract-suite-secret-32-bytes"  # the local HMAC secret its tokens are signed with


@contextmanager
def installed(sites: Sequence[Path]) -> Iterator[None]:
    """Packages found through their entry points while inside (their directories on sys.path)."""
    with pytest.MonkeyPatch.context() as patch:
        for site in sites:
            patch.syspath_prepend(str(site))
        yield


def contract_settings(url: str, var: Path, chosen: Sequence[Subject]) -> Settings:
    """A server on `url` (its data directory in `var`) with every subject's plugins, its tokens signed with SECRET."""
    plugins = {name: spec for subject in chosen for name, spec in subject.plugins.items()}
    return parse_settings({"server": {"data_dir": str(var / "var")}, "database": {"url": url},
                           "auth": {"secret": SECRET}, "plugins": plugins})


@contextmanager
def contract_context(url: str, var: Path, chosen: Sequence[Subject]) -> Iterator[ServerContext]:
    """A server context over every subject's sample data (each loaded in turn), bodies pre-rendered."""
    with ExitStack() as stack:
        stack.enter_context(installed([s.site for s in chosen if s.site is not None]))
        settings = contract_settings(url, var, chosen)
        ctx = create_context(settings)
        stack.callback(ctx.db.dispose)
        ctx.extensions.schema.upgrade(ctx.db)
        for subject in chosen:
            subject.load(settings)
        refresh(ctx.db, ctx.registry)
        yield ctx


def sqlite_url(folder: Path) -> str:
    """A new SQLite database file in `folder`."""
    return f"sqlite:///{folder / 'contract.db'}"


@contextmanager
def scratch_database(server: str, prefix: str = "fhir_contract_") -> Iterator[str]:
    """The URL of a new empty database `<prefix><12 hex digits>` on the PostgreSQL server `server` reaches (a libpq
    URL of any database there, `postgresql://user@host:5432/postgres`, whose user may CREATE DATABASE), dropped on
    leaving."""
    name = f"{prefix}{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urlsplit(server)._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
