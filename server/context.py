"""Everything built once at start-up: settings, plugins, providers, database, auth, capabilities."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pluggy
from sqlalchemy import Engine

from server.auth import Authenticator
from server.capabilities import build_capability_statement
from server.freshness import CountCache, Freshness
from server.plugins import get_plugin_manager
from server.provider import ResourceProvider
from server.registry import Registry
from server.ratelimit import RateLimiter
from server.scope import Scoper
from server.search.sql import Prepared, body_query
from server.settings import Settings
from server.store.db import create_db_engine


@dataclass(frozen=True)
class ServerContext:
    settings: Settings
    pm: pluggy.PluginManager
    registry: Registry
    db: Engine
    authenticator: Authenticator
    capability_statement: dict[str, Any]
    freshness: Freshness
    counts: CountCache
    reads: Mapping[str, Prepared]  # resource type -> its read of stored bodies, compiled once
    scoped_reads: Mapping[str, Prepared]  # the same, with the row's partition and path (restricted callers)
    scoper: Scoper
    rate_limiter: RateLimiter | None = None  # per subject, when server.rate_limit_per_minute is set


def create_context(settings: Settings, extra_plugins: Iterable[tuple[str, object]] = (),
                   db: Engine | None = None) -> ServerContext:
    pm = get_plugin_manager(settings, extra_plugins)
    registry = Registry.collect(pm, settings)
    db = db if db is not None else create_db_engine(settings)
    # every request's statement is a read on its own: no BEGIN/ROLLBACK round trips (the engine given keeps
    # its transactions for whoever writes with it)
    db = db.execution_options(isolation_level="AUTOCOMMIT")
    prerendered = [p for p in registry if isinstance(p, ResourceProvider) and p.prerendered is not None]
    reads = {p.resource_type: Prepared.compile(body_query(p), db.dialect) for p in prerendered}
    scoped_reads = {p.resource_type: Prepared.compile(body_query(p, scoped=True), db.dialect) for p in prerendered}
    freshness = Freshness(registry)
    return ServerContext(
        settings=settings,
        pm=pm,
        registry=registry,
        db=db,
        authenticator=Authenticator(settings),
        capability_statement=build_capability_statement(registry, settings, pm),
        freshness=freshness,
        counts=CountCache(),
        reads=reads,
        scoped_reads=scoped_reads,
        scoper=Scoper(freshness),
        rate_limiter=RateLimiter(settings.server.rate_limit_per_minute) if settings.server.rate_limit_per_minute
        else None,
    )
