"""Helpers the tests share: real data paths, settings, tokens and server contexts over test data."""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine

from server.access.mint import mint_token
from server.engine.context import ServerContext, create_context
from server.extensions import load_extensions
from server.settings import Settings, parse_settings
from server.storage.freshness import Freshness, Snapshot
from server.storage.prerender import refresh
from tests.support.data import load_small_pyramid

# the shared material, as `make test` names it (SHARED=...), else beside the checkout
SHARED = Path(os.environ.get("SHARED") or Path(__file__).resolve().parents[3] / "shared")
REAL_DATA = SHARED / "data" / "real"
IASO_CSV = REAL_DATA / "iaso_burkina_faso" / "org_units.csv"


def make_settings(database_url: str, tmp_path: Path, **sections: dict) -> Settings:
    raw = {"server": {"data_dir": str(tmp_path / "var")}, "database": {"url": database_url}}
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return parse_settings(raw)


SECRET = "test-secret-with-at-least-32-bytes!!"


def pyramid_context(url: str, var: Path, *also: Callable[[Engine], None]) -> ServerContext:
    """A server context over the small hand-made pyramid (then `also` loaders), its bodies pre-rendered."""
    ctx = create_context(make_settings(url, var, auth={"secret": SECRET}))
    ctx.extensions.schema.upgrade(ctx.db)
    for load in (load_small_pyramid, *also):
        load(ctx.db)
    refresh(ctx.db, ctx.registry)  # as `load` does: requests splice the stored bodies (test_prerender: same bytes)
    return ctx


def bearer(settings: Settings, *, subject: str = "orgunit-fhir-cli", permissions: list[str] | None = None,
           **claims: Any) -> dict[str, str]:
    """The Authorization header of a token signed with these settings' secret, `claims` set last (`account`,
    `org_unit_roots`, `scope`, `sub`...); the permission is the configured one unless `permissions` says."""
    return {"Authorization": f"Bearer {mint_token(settings, subject, permissions, extra=claims)}"}


def migrate(engine: Engine, settings: Settings | None = None) -> None:
    """Every chain of the plugins these settings enable (default: all) to its head."""
    load_extensions(settings or parse_settings({})).schema.upgrade(engine)


class NoBodies(Freshness):
    """What the database holds, but no stored body usable (as before pre-rendering, or after the settings changed):
    every resource rendered per request."""

    def snapshot(self, conn: Connection) -> Snapshot:
        return replace(super().snapshot(conn), bodies=frozenset())

    def current(self, database: str) -> Snapshot | None:
        found = super().current(database)
        return None if found is None else replace(found, bodies=frozenset())


def per_request(ctx: ServerContext) -> ServerContext:
    """The same server, told that no stored body may be used (every resource rendered per request)."""
    return replace(ctx, freshness=NoBodies(ctx.registry))
